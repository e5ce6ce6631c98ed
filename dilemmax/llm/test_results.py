"""Play's summary names every entry of every metric by the axes its game declares
(``env.metric_axes``): per-trial values under trial names, per-agent ones under seat names, with
fewer, as many and more trials than agents; and a play run with fewer trials than agents writes
its results.json.

The episodes are the games' hand-written metric tests' rollouts (every event known), measured
with any number of trials by the games' own ``episode_metrics``; nothing is compiled but the
bootstrap."""

from __future__ import annotations

import faulthandler
import json

import jax
import numpy as np
import pytest

from dilemmax import compile_log
from dilemmax.cli import main
from dilemmax.envs import metrics as M
from dilemmax.envs.open_cleanup import metrics as cleanup_metrics
from dilemmax.envs.open_cleanup.test_env import _rollout as cleanup_rollout
from dilemmax.envs.open_harvest import metrics as harvest_metrics
from dilemmax.envs.open_harvest.test_metrics import AGENTS as HARVEST_AGENTS
from dilemmax.envs.open_harvest.test_metrics import _rollout as harvest_rollout
from dilemmax.llm.results import metric_columns, summarize

PLAY_TIMEOUT_S = 600  # compiling a small open_cleanup on a loaded 2-core machine: well under


def hand_episode(game: str, num_trials: int):
    """(rollout, agents, the game's metrics of it with ``num_trials`` trials, declaration)."""
    if game == "open_cleanup":
        rollout, agents = cleanup_rollout()  # 5 agents; events in trials 0 and 1
        module = cleanup_metrics
    else:
        rollout, agents = harvest_rollout(), HARVEST_AGENTS  # 3 agents; trials 0 and 1
        module = harvest_metrics
    # One program (the rollout's arrays as its constants) rather than one per eager op.
    metrics = jax.device_get(jax.jit(lambda: module.episode_metrics(rollout, agents, num_trials))())
    return rollout, agents, metrics, module.METRIC_AXES


# num_trials below, at and above the number of agents (5 in open_cleanup's, 3 in open_harvest's).
SWEEP = [("open_cleanup", k) for k in (2, 5, 7)] + [("open_harvest", k) for k in (2, 3, 4)]


def seatings(agents: list[str]) -> list[dict[str, str]]:
    """Two episodes' seats: even agents "x" and odd ones "y", then the other way round."""
    first = {a: "xy"[i % 2] for i, a in enumerate(agents)}
    return [first, {a: "yx"[i % 2] for i, a in enumerate(agents)}]


def expected_columns(metrics: dict, axes: dict, agents: list[str], seats: list[dict]) -> dict:
    """Every reported name -> its per-episode values, read off the metric function's output."""
    out: dict[str, list] = {}
    for name, value in metrics.items():
        value = np.asarray(value, np.float64)
        if axes[name] == M.SCALAR:
            out[name] = [[float(value)] for _ in seats]
        elif axes[name] == M.PER_TRIAL:
            for k in range(value.shape[0]):
                out[f"{name}[trial_{k + 1}]"] = [[value[k]] for _ in seats]
        elif axes[name] == M.PER_AGENT:
            for seat in "xy":
                out[f"{name}[{seat}]"] = [
                    [value[i] for i, a in enumerate(agents) if s[a] == seat] for s in seats
                ]
        else:
            assert axes[name] == M.PER_TRIAL_AGENT, name
            for k in range(value.shape[0]):
                for seat in "xy":
                    out[f"{name}[trial_{k + 1}][{seat}]"] = [
                        [value[k, i] for i, a in enumerate(agents) if s[a] == seat] for s in seats
                    ]
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("game", "num_trials"), SWEEP)
def test_every_entry_is_reported_under_its_trial_and_seat(game, num_trials):
    rollout, agents, metrics, axes = hand_episode(game, num_trials)
    seats = seatings(agents)
    episodes = [{"id": e, "seats": s} for e, s in enumerate(seats)]
    stacked = {k: np.stack([v, v]) for k, v in metrics.items()}
    columns = metric_columns(stacked, episodes, axes)
    assert columns == expected_columns(metrics, axes, agents, seats)
    # Every trial is there, none under a seat's name, however many trials and agents.
    gini = "gini" if game == "open_cleanup" else "gini_per_trial"
    assert [c for c in columns if c.startswith(f"{gini}[")] == [
        f"{gini}[trial_{k + 1}]" for k in range(num_trials)
    ]
    # Against the episode's own events: apples eaten by a seat's agents within each trial.
    infos = jax.device_get(rollout.infos)
    played = np.asarray(rollout.valid)
    for k in range(num_trials):
        in_trial = played & (np.asarray(infos["trial"]) == k)
        for e, seating in enumerate(seats):
            for seat in "xy":
                mine = [i for i, a in enumerate(agents) if seating[a] == seat]
                ate = np.asarray(infos["ate"])[in_trial][:, mine].sum(axis=0)
                reported = columns[f"apples_per_trial[trial_{k + 1}][{seat}]"][e]
                assert reported == ate.tolist(), (k, e, seat)


@pytest.mark.slow
def test_the_summary_holds_each_trial_s_gini_with_fewer_trials_than_agents():
    """Two trials, five agents: the hand episode's Gini of each trial's returns, (1, 1, 0, 0, 0)
    -> 0.6 and (2, 0, 0, 0, 0) -> 0.8, under trial names (it used to end in an IndexError)."""
    _, agents, metrics, axes = hand_episode("open_cleanup", 2)
    episodes = [{"id": e, "seats": s} for e, s in enumerate(seatings(agents))]
    stacked = {k: np.stack([v, v]) for k, v in metrics.items()}
    summary = summarize([(stacked, episodes)], axes, num_resamples=50)["all"]
    assert summary["gini[trial_1]"] == pytest.approx((0.6, 0.6, 0.6))
    assert summary["gini[trial_2]"] == pytest.approx((0.8, 0.8, 0.8))
    assert not [name for name in summary if name.startswith("gini[") and "trial" not in name]
    # return_per_trial [[1, 1, 0, 0, 0], [2, 0, 0, 0, 0]]: x plays agents 0, 2, 4 then 1, 3.
    assert summary["return_per_trial[trial_2][x]"][0] == pytest.approx((2 / 3 + 0) / 2)


def test_a_second_summary_of_the_same_shapes_compiles_nothing():
    """Every play run writes a summary; the bootstrap program is kept per (resamples,
    confidence), so a process writing several (a sweep, a notebook) compiles it once."""
    episodes = [{"id": e, "seats": {"agent_0": "x", "agent_1": "y"}} for e in range(3)]
    metrics = {"gini": np.array([0.1, 0.2, 0.3])}
    compiled = compile_log.CompileTally()
    compile_log.listen(compiled)
    first = summarize([(metrics, episodes)], {"gini": ()}, num_resamples=17)
    before = compiled.programs
    again = summarize([(metrics, episodes)], {"gini": ()}, key=jax.random.key(1), num_resamples=17)
    assert compiled.programs == before, "the second summary compiled again"
    assert first["all"]["gini"][0] == pytest.approx(0.2) == again["all"]["gini"][0]


def test_an_undeclared_or_misshapen_metric_is_named():
    episodes = [{"id": 0, "seats": {"agent_0": "x", "agent_1": "y"}}]
    with pytest.raises(M.MetricAxesError, match="'moon' declares no axes"):
        metric_columns({"moon": np.zeros((1, 2))}, episodes, {})
    with pytest.raises(M.MetricAxesError, match="'gini' has 3 agents, episode 0 2 seats"):
        metric_columns({"gini": np.zeros((1, 3))}, episodes, {"gini": M.PER_AGENT})


@pytest.mark.slow
def test_play_with_fewer_trials_than_agents_writes_its_results(tmp_path):
    out = tmp_path / "run"
    argv = ["play", "open_cleanup", "--set", "num_agents=3", "--set", "num_trials=2",
            "--set", "trial_steps=2", "--set", "num_layouts=16", "--set", "num_rules=64",
            "--seats", "scripted:random", "--seat", "agent_0=scripted:greedy",
            "--episodes", "2", "--out", str(out), "--no-progress"]  # fmt: skip
    faulthandler.dump_traceback_later(PLAY_TIMEOUT_S, exit=True)
    try:
        assert main(argv) == 0
    finally:
        faulthandler.cancel_dump_traceback_later()
    results = json.loads((out / "results.json").read_text())
    assert results["metric_axes"]["gini"] == ["trial"]
    assert results["metric_axes"]["recipes_known"] == ["trial", "agent"]
    summary = results["summary"]["all"]
    assert {n for n in summary if n.startswith("gini[")} == {"gini[trial_1]", "gini[trial_2]"}
    for episode in results["episodes"]:
        assert len(episode["metrics"]["gini"]) == 2 and len(episode["metrics"]["return"]) == 3
    greedy = [e["metrics"]["recipes_known"][1][0] for e in results["episodes"]]
    assert summary["recipes_known[trial_2][scripted:greedy]"][0] == pytest.approx(np.mean(greedy))
