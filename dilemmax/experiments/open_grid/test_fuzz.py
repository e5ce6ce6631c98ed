"""The open_grid designs' analyses, tables and figures on edge results, built as the batched
harness gives them with an env of the paper's sizes stubbed (no env built, nothing compiled):
returns and events all 0 or all at their top, no apple ever eaten, a single episode, a run of
no episode, one model in the cross-model table. A report is always written and every figure
is drawn."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dilemmax.experiments.design import Part, Plan, Report
from dilemmax.experiments.open_grid import arena, common, schelling, teams
from dilemmax.experiments.report import write_report
from dilemmax.llm.play import PlayResult
from dilemmax.llm.session_options import SessionOptions

FUZZ = settings(
    max_examples=4,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
GAMES = st.sampled_from(common.GAMES)
PATTERNS = st.sampled_from(["zeros", "top", "mixed"])
AGENTS, TRIALS = 5, 3


def stub_env(game: str):
    return SimpleNamespace(name=game, num_agents=AGENTS, num_trials=TRIALS, trial_steps=10,
                           agents=[f"agent_{i}" for i in range(AGENTS)])  # fmt: skip


@pytest.fixture(autouse=True)
def no_env_built(monkeypatch):
    monkeypatch.setattr(common, "design_env", lambda game, params: stub_env(game))
    monkeypatch.setattr(common, "seed_configs", lambda *args, **kwargs: None)


def metrics(game: str, episodes: int, pattern: str, rng) -> dict[str, np.ndarray]:
    """Every metric the tables read, [E, ...] as the env's episode_metrics give them."""

    def drawn(shape, top):
        shape = (episodes, *shape)
        if pattern == "zeros":
            return np.zeros(shape)
        if pattern == "top":
            return np.full(shape, float(top))
        return rng.integers(0, top + 1, shape).astype(np.float64)

    k, a = TRIALS, AGENTS
    out = {"return_per_trial": drawn((k, a), 20), "return": drawn((a,), 60)}
    if game == "open_cleanup":
        never = -np.ones((episodes, k)) if pattern == "zeros" else drawn((k,), 9)
        out |= {"first_clear_step": never, "first_apple_step": never,
                "early_cleaning": drawn((k,), 5), "pickups": drawn((k, a), 3),
                "working_tools": drawn((k, a), 2), "total_cleaning": drawn((k,), 8),
                "cleaning_per_trial": drawn((k, a), 2)}  # fmt: skip
    else:
        out |= {"apples": drawn((a,), 4), "payoffs_known": drawn((a,), 1),
                "best_stage_share": drawn((a,), 1), "premature_share": drawn((a,), 1),
                "orchard_lifetime": drawn((k,), 10)}  # fmt: skip
    return out


def result_of(game, episodes, pattern, seed, seats=None) -> PlayResult:
    rng = np.random.default_rng(seed)
    seating = seats or {f"agent_{i}": "openai:m" for i in range(AGENTS)}
    infos = [{"episode": e, "part": "p", "seats": dict(seating)} for e in range(episodes)]
    return PlayResult(metrics(game, episodes, pattern, rng), infos)


def written(report: Report, folder) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    write_report(folder, {"design": "fuzz"}, report)
    whole = json.loads((folder / "results.json").read_text())
    assert "figures_failed" not in whole, whole["figures_failed"]
    return whole


PARAMS, RUN = common.OpenGridParams(seeds=1), SessionOptions()


@FUZZ
@given(GAMES, PATTERNS, st.sampled_from([0, 1, 3]), st.integers(0, 10**6))
def test_homogeneous_and_reveal_report_every_edge(tmp_path_factory, game, pattern, n, seed):
    design = teams.homogeneous_design(game)
    plan = design.plan(PARAMS, RUN)
    whole = written(design.analyse(plan, [result_of(game, n, pattern, seed)], PARAMS, RUN, {}),
                    tmp_path_factory.mktemp("homogeneous"))  # fmt: skip
    written(design.combine([whole]), tmp_path_factory.mktemp("one_model"))
    reveal = teams.reveal_design(game)
    results = [result_of(game, n, pattern, seed + i) for i in range(2)]
    written(reveal.analyse(reveal.plan(PARAMS, RUN), results, PARAMS, RUN, {}),
            tmp_path_factory.mktemp("reveal"))  # fmt: skip


@FUZZ
@given(GAMES, PATTERNS, st.integers(0, 10**6))
def test_schelling_reports_every_edge(tmp_path_factory, game, pattern, seed):
    plan = schelling.plan_schelling(game, PARAMS, RUN)
    results = [result_of(game, 1, pattern, seed + i) for i in range(len(plan.parts))]
    report = schelling.analyse_schelling(game, plan, results)
    whole = written(report, tmp_path_factory.mktemp("schelling"))
    if pattern != "mixed":  # every return equal: no condition holds strictly
        assert whole["results"]["conditions"]["sequential_social_dilemma"] is False


@FUZZ
@given(GAMES, PATTERNS, st.sampled_from([0, 1, 2]), st.integers(0, 10**6))
def test_arena_reports_every_edge(tmp_path_factory, game, pattern, n, seed):
    env = stub_env(game)
    specs = [f"openai:m{i % 2}" for i in range(AGENTS)]  # two models, five seats
    plan = Plan([Part("seed0", env)], {"game": game, "specs": specs})
    seats = dict(zip(env.agents, specs, strict=True))
    result = result_of(game, n, pattern, seed, seats)
    written(arena.analyse_arena(game, plan, [result]), tmp_path_factory.mktemp("arena"))
