"""Appendix C Tables 3 and 4 from one hand-built OpenCleanup episode (exact values), with the
paper's columns in the paper's order; the modes read from replies or from a transcript."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np

from dilemmax.experiments.design import Part, Plan
from dilemmax.experiments.open_grid import DESIGNS
from dilemmax.experiments.open_grid.common import OpenGridParams
from dilemmax.experiments.open_grid.events import episodes_of, recrafts
from dilemmax.experiments.open_grid.tables import model_sums, table_rows
from dilemmax.llm.session_options import SessionOptions

STEPS, TRIALS, AGENTS = 6, 2, 2
T = STEPS * TRIALS
ENV = SimpleNamespace(trial_steps=STEPS, num_trials=TRIALS, num_agents=AGENTS)
TABLE3 = (
    "| Model | Explore (%) T1 | Explore (%) T2–5 | First clear T1 | First clear T2–5 | "
    "First apple T1 | First apple T2–5 | Cells, t < 50 T1 | Cells, t < 50 T2–5 |"
)
TABLE4 = "| Model | Pick-ups | Pick-ups / tool | Re-crafts (%) | Craft steps / cell |"


def _infos():
    picked = np.full((T, AGENTS), -1)
    made = np.zeros((T, AGENTS), bool)
    # Trial 1: A makes [2, 0]. Trial 2: A makes [2, 0], loses it ([0, 1]), passes [1, 2] and
    # makes [2, 0] again (a re-craft); B makes [3, 3] once.
    for t, tool, working in ((0, 2, False), (1, 0, True), (6, 2, False), (7, 0, True),
                             (8, 1, False), (9, 2, False), (10, 0, True)):  # fmt: skip
        picked[t, 0], made[t, 0] = tool, working
    picked[6, 1], picked[7, 1], made[7, 1] = 3, 3, True
    cleared, lightened = np.zeros((T, AGENTS), int), np.zeros((T, AGENTS), int)
    cleared[3, 0], cleared[11, 0], lightened[11, 1] = 1, 2, 1
    trial = np.repeat(np.arange(TRIALS), STEPS)
    return {"picked_up": picked[None], "made_tool": made[None], "trial": trial[None],
            "cleared": cleared[None], "lightened": lightened[None]}  # fmt: skip


def _modes():
    """(step, agent, mode): trial 1 has 3 explore steps of 12; trial 2 has 4 craft steps."""
    first = ["explore", "explore", "clean", "clean", "clean", "clean"]
    second = ["craft", "craft", "craft", "clean", "clean", "clean"]
    b_first = ["explore"] + ["harvest"] * 5
    b_second = ["craft"] + ["harvest"] * 5
    rows = []
    for agent, modes in (("agent_0", first + second), ("agent_1", b_first + b_second)):
        rows += [(t, agent, mode) for t, mode in enumerate(modes)]
    return rows


def _result(replies: bool):
    metrics = {
        "first_clear_step": np.array([[3, 5]]),
        "first_apple_step": np.array([[-1, 4]]),
        "early_cleaning": np.array([[2.0, 3.0]]),
        "pickups": np.array([[[2, 0], [5, 2]]], float),
        "working_tools": np.array([[[1, 0], [2, 1]]], float),
        "return_per_trial": np.array([[[0.0, 1.0], [2.0, 3.0]]]),
    }
    rows = [{"step": t, "agent": a, "fields": {"mode": m}, "valid": True} for t, a, m in _modes()]
    seats = {"agent_0": "openai:m,base_url=http://a/v1", "agent_1": "openai:m"}
    episodes = [{"part": "team", "episode": 0, "seats": seats}]
    valid = np.ones((1, T), bool)
    return SimpleNamespace(
        metrics=metrics, episodes=episodes, infos=_infos(), valid=valid,
        replies=[rows] if replies else [],
    )  # fmt: skip


def test_recrafts_follow_the_lost_tool():
    infos = {k: v[0] for k, v in _infos().items()}
    again, tools = recrafts(infos, np.ones(T, bool), TRIALS)
    assert again.tolist() == [[0, 0], [1, 0]] and tools.tolist() == [[1, 0], [2, 1]]


def test_tables_3_and_4_exact(tmp_path):
    expected3 = ["openai:m", 25.0, 0.0, 3.0, 5.0, None, 4.0, 2.0, 3.0]
    expected4 = ["openai:m", 3.5, 7 / 3, 100 / 3, 4 / 3]
    (episode,) = episodes_of(_result(replies=True), ENV)
    sums = model_sums("open_cleanup", [episode])  # the server's URL is not part of the model
    assert table_rows("table3", sums) == [expected3]
    assert table_rows("table4", sums) == [expected4]
    # Without replies in the result the modes come from the run's transcript.
    transcript = tmp_path / "transcript.jsonl"
    lines = [{"type": "call", "kind": "act", "part": "team", "episode": 0, "agent": a,
              "step": t, "fields": {"mode": m}} for t, a, m in _modes()]  # fmt: skip
    lines.append({"type": "call", "kind": "reflect", "part": "team", "episode": 0, "step": "x"})
    transcript.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    (episode,) = episodes_of(_result(replies=False), ENV, transcript)
    assert table_rows("table3", model_sums("open_cleanup", [episode])) == [expected3]
    # The design's analyse writes both tables with the paper's columns, and combine adds runs.
    design = {d.name: d for d in DESIGNS}["open_cleanup/homogeneous"]
    plan = Plan([Part("team", ENV, episodes=1)])
    report = design.analyse(plan, [_result(True)], OpenGridParams(), SessionOptions(), {})
    assert report.tables["table3"].splitlines()[0] == TABLE3
    assert report.tables["table4"].splitlines()[0] == TABLE4
    assert (
        report.tables["table3"].splitlines()[2] == "| openai:m | 25 | 0 | 3 | 5 | - | 4 | 2 | 3 |"
    )
    assert report.tables["table4"].splitlines()[2] == "| openai:m | 3.5 | 2.3 | 33 | 1.33 |"
    twice = design.combine([{"results": report.results}, {"results": report.results}])
    assert twice.results["tables"]["table4"] == [expected4]
    assert twice.results["models"]["openai:m"]["episodes"] == 2
