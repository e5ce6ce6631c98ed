"""The open_grid designs end to end through ``dilemmax experiment``, with planted models on
local servers (no network): the Schelling curves in the planted order, each arena seat's calls
on its own server, Table 5 and its combination over runs, reveal on vs off.

One small OpenHarvest (three agents, ten-step trials, one trial, the harvest tests' pools), so
every run shares one env and its compiled steps.
"""

from __future__ import annotations

import json
import re

import pytest

from dilemmax.cli import main
from dilemmax.experiments.open_grid import teams
from dilemmax.experiments.open_grid.events import episodes_of, per_trial
from dilemmax.llm.server import LocalChatServer

SIZES = ["--trial-steps", "10", "--trials", "1", "--envs", "1", "--no-progress",
         "--set", "num_agents=3", "--set", "num_layouts=16", "--set", "num_rules=64",
         "--set", "pool_seed=0"]  # fmt: skip
APPLE = re.compile(r"^[RYGCP][gro]$")


def greedy_action(user: str) -> int:
    """A planted eater: the move that eats, else a step toward the nearest apple on its map,
    else a turn (to look elsewhere)."""
    actions = user.split("ACTIONS NOW", 1)[1]
    eat = re.search(r"(\d) \w+ -> \(\d+, \d+\): [^|]*you eat it", actions)
    if eat:
        return int(eat.group(1))
    lines = user.split("Map:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    columns = [int(v) for v in lines[0].split()]
    me, apples = None, []
    for line in lines[1:]:
        row = int(line[1:4])
        for col, token in zip(columns, line[4:].split(), strict=False):
            if token == "ME":
                me = (row, col)
            elif APPLE.match(token):
                apples.append((row, col))
    if me is None or not apples:
        return 4
    r, c = min(apples, key=lambda a: abs(a[0] - me[0]) + abs(a[1] - me[1]))
    if r != me[0]:
        return 0 if r < me[0] else 1
    return 2 if c > me[1] else 3


def answer(action: int) -> str:
    # One object that reads as a step reply and as a trial-end rewrite.
    return json.dumps(
        {"why_this_move": "planted", "mode": "harvest", "action": action,
         "lessons": ["planted"], "plans": []}
    )  # fmt: skip


def by_role(body) -> str:
    """Defects (eats greedily) unless item 1.5 makes it a cooperator, which stays. The role is
    read wherever the layout puts it: the seat's turn ("cached") or the system prompt ("paper")."""
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    told = "the group's total matters more" in system + user
    return answer(7 if told else greedy_action(user))


def eater(body) -> str:
    return answer(greedy_action(body["messages"][-1]["content"]))


def stayer(body) -> str:
    return answer(7)


def by_model(body) -> str:
    """One server, two planted models: ``stay`` stays, any other eats."""
    return stayer(body) if body["model"] == "stay" else eater(body)


def only_if_told(body) -> str:
    """Eats only when the hidden rules are revealed to it."""
    user = body["messages"][-1]["content"]
    return answer(greedy_action(user) if "HIDDEN RULES" in user else 7)


def run(name: str, out, *extra: str) -> dict:
    assert main(["experiment", name, *SIZES, "--out", str(out), *extra]) == 0
    return json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module", autouse=True)
def api_key(monkeypatch_module):
    monkeypatch_module.setenv("OPENAI_API_KEY", "planted")


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.mark.slow
def test_schelling_curves_come_out_in_the_planted_order(tmp_path):
    with LocalChatServer(by_role) as server:
        record = run("open_harvest/schelling", tmp_path, "--seats", "openai:luna",
                     "--base-url", server.base_url, "--seeds", "1")  # fmt: skip
        assert server.answered == 4 * 10 * 3  # k = 0..3 x steps x seats
    found = record["results"]
    # A cooperator never eats; a defector eats whatever its co-players do.
    assert found["C"] == [0.0, 0.0, 0.0]
    assert all(d > 0 for d in found["D"])
    ssd = found["conditions"]
    assert (ssd["fear"], ssd["greed"], ssd["defecting_pays"]) == (True, True, [True] * 3)
    assert ssd["mutual_cooperation_over_mutual_defection"] is False
    assert ssd["sequential_social_dilemma"] is False
    assert (tmp_path / "schelling.png").stat().st_size > 0
    table = (tmp_path / "schelling.md").read_text()
    assert table.startswith("| x (cooperating co-players) | C(x) | D(x) | D(x) > C(x) |")
    # Each seat's own turn carries its role as item 1.5 after its own line (rotating over
    # seeds); the system prompt, shared by every seat, carries none.
    calls = [json.loads(line) for line in (tmp_path / "transcript.jsonl").open()]
    one = [c for c in calls if c.get("part") == "k=1/seed0" and c.get("step") == 0]
    roles = {c["agent"]: ".\n1.5 YOUR ROLE: the group's total" in c["prompt"] for c in one}
    assert roles == {"agent_0": True, "agent_1": False, "agent_2": False}
    assert not any("YOUR ROLE" in c["system"] for c in one)
    assert len({c["system"] for c in one}) == 1


def test_each_arena_seat_calls_its_own_server(tmp_path):
    with LocalChatServer(eater) as one, LocalChatServer(stayer) as two:
        record = run(
            "open_harvest/arena", tmp_path, "--seeds", "2",
            "--seat", f"agent_0=openai:eater,base_url={one.base_url}",
            "--seat", f"agent_1=openai:stayer,base_url={two.base_url}",
            "--seat", f"agent_2=openai:stayer,base_url={two.base_url}",
        )  # fmt: skip
        assert (one.answered, two.answered) == (2 * 10, 2 * 10 * 2)  # seeds x steps x its seats
        assert {b["model"] for b in one.bodies} == {"eater"}
        assert {b["model"] for b in two.bodies} == {"stayer"}
    models = record["results"]["models"]
    assert set(models) == {"openai:eater", "openai:stayer"}
    assert models["openai:eater"]["return"] > 0 == models["openai:stayer"]["return"]
    assert (tmp_path / "arena.md").read_text().startswith("| Model | Return |")


TABLE5 = "| Model | Known (%) | Best stage (%) | Premature (%) | Points / apple | Return |"


@pytest.mark.slow
def test_homogeneous_table5_one_row_per_model_and_combined(tmp_path, monkeypatch):
    seen = []

    def keep(result, env, transcript=None):  # what analyse reads of the played result
        seen.extend(episodes_of(result, env, transcript))
        return seen[-len(result.episodes) :]

    monkeypatch.setattr(teams, "episodes_of", keep)
    with LocalChatServer(by_model) as server:
        base = ["--base-url", server.base_url, "--seeds", "2"]
        first = run("open_harvest/homogeneous", tmp_path / "a", "--seats", "openai:eater", *base)
    # The session kept each step's events and replies: every agent answered every step, and
    # the per-step events add up to the episode's metrics.
    assert len(seen) == 2
    for episode in seen:
        assert {a: len(m) for a, m in episode.modes.items()} == {f"agent_{i}": 10 for i in range(3)}
        assert {mode for m in episode.modes.values() for _, mode in m} == {"harvest"}
        ate = per_trial(episode.infos["ate"].astype(int), episode.infos, episode.valid, 1)
        assert ate.tolist() == episode.metrics["apples_per_trial"].tolist()
    with LocalChatServer(by_model) as server:
        base = ["--base-url", server.base_url, "--seeds", "2"]
        second = run("open_harvest/homogeneous", tmp_path / "b", "--seats", "openai:stay", *base)
    assert (tmp_path / "a" / "table5.md").read_text().splitlines()[0] == TABLE5
    assert (tmp_path / "a" / "known_vs_best_stage.png").stat().st_size > 0
    (row,) = first["results"]["tables"]["table5"]
    assert row[0] == "openai:eater" and row[4] > 0 and row[5] > 0
    # The stayer eats nothing: it knows no payoff, and the per-apple shares have no apple.
    assert second["results"]["tables"]["table5"] == [["openai:stay", 0.0, None, None, None, 0.0]]
    out = tmp_path / "both"
    argv = ["experiment", "combine", "open_harvest/homogeneous", str(tmp_path / "a"),
            str(tmp_path / "b"), "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    lines = (out / "table5.md").read_text().splitlines()
    assert lines[0] == TABLE5 and [line.split(" | ")[0] for line in lines[2:]] == [
        "| openai:eater",
        "| openai:stay",
    ]


def test_reveal_on_versus_off_on_the_same_seeds(tmp_path):
    with LocalChatServer(only_if_told) as server:
        record = run("open_harvest/reveal", tmp_path, "--seats", "openai:told",
                     "--base-url", server.base_url, "--seeds", "1")  # fmt: skip
    results = record["results"]
    (gain,) = results["revealed_minus_hidden"]["openai:told"]
    hidden = results["conditions"]["hidden"]["openai:told"]["return_sum"]
    assert hidden == [0.0] and gain > 0
    assert (tmp_path / "reveal.md").read_text().startswith("| Model | Rules | T1 | Mean |")
    assert (tmp_path / "table5_revealed.md").is_file()


def test_reveal_after_homogeneous_on_one_cache_pays_only_the_revealed_arm(tmp_path):
    """The reveal design's hidden arm asks what the homogeneous design asked (same seeds, same
    prompts): with one response cache (--cache) only the revealed arm reaches the server."""
    seat = ["--seats", "openai:told", "--seeds", "1", "--cache", str(tmp_path / "cache")]
    with LocalChatServer(only_if_told) as server:
        run("open_harvest/homogeneous", tmp_path / "h", *seat, "--base-url", server.base_url)
        homogeneous = server.answered
        record = run("open_harvest/reveal", tmp_path / "r", *seat, "--base-url", server.base_url)
        revealed = server.answered - homogeneous
    calls = record["seat_calls"]["openai:told"]
    assert homogeneous == 10 * 3  # steps x seats
    assert calls["cache_hits"] == homogeneous and calls["calls"] == 2 * homogeneous
    assert revealed == calls["cache_misses"] == homogeneous
