"""Every moral-hazard design's analysis, tables and figures on edge results, built as the batched
harness gives them (no model, no JAX compile per example): every decision a query or none, a
single decision, cells no episode reached, one run in a cross-model table. A report is always
written, and every figure is drawn (a figure that fails is named in figures_failed, which these
tests require to stay empty)."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dilemmax.experiments.design import Report
from dilemmax.experiments.moral_hazard import common, grid, isolation, sweeps, tables
from dilemmax.experiments.moral_hazard.conftest import parse
from dilemmax.experiments.moral_hazard.isolation_combine import combine as isolation_combine
from dilemmax.experiments.report import write_report
from dilemmax.llm.play import PlayResult

# Few examples (each draws figures) and no shrinking: the failing example itself says enough.
FUZZ = settings(
    max_examples=6,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
# How an outcome's per-episode values are drawn: the edges, and anything in between.
PATTERNS = st.sampled_from(["zeros", "ones", "mixed"])
KEEP = st.sampled_from([0.0, 0.5, 1.0])  # the share of planned episodes played
SEEDS = st.integers(0, 10**6)


@functools.cache
def planned(design, argv: tuple[str, ...]):
    return design.plan(*parse(design, list(argv)))


def _values(pattern: str, count: int, rng: np.random.Generator) -> np.ndarray:
    if pattern == "zeros":
        return np.zeros(count)
    if pattern == "ones":
        return np.ones(count)
    return rng.integers(0, 2, count).astype(np.float64)


def result_of(part, pattern: str, keep: float, seed: int, seat: str = "openai:m") -> PlayResult:
    """The episodes of ``part`` as batched play reports them (each kept with probability
    ``keep``: cells no episode reached), every outcome drawn by ``pattern``."""
    rng = np.random.default_rng(seed)
    n = part.env.num_agents
    jobs = len(part.config_names) * part.episodes
    kept = [i for i in range(jobs) if rng.random() < keep]
    count = len(kept)
    query = _values(pattern, count, rng)
    metrics = {name: _values(pattern, count, rng) for name in common.OUTCOMES}
    metrics["query_by_agent"] = np.stack([query] + [np.ones(count)] * (n - 1), axis=-1)
    partner = 3 * (n - 1)
    metrics["decisions"] = partner + 2 + query  # work, note after a query, final
    metrics["valid_decisions"] = partner + (2 + query) * _values(pattern, count, rng)
    agents = [f"agent_{i}" for i in range(n)]
    seats = {a: (seat if a == "agent_0" else "scripted:partner") for a in agents}
    episodes = [
        {"config_index": i // part.episodes, "episode": i, "seats": seats, "part": part.name}
        for i in kept
    ]
    return PlayResult(metrics, episodes)


def written(report: Report, folder) -> dict:
    """The report written as the runner writes it; its results.json, checked whole."""
    folder.mkdir(parents=True, exist_ok=True)
    write_report(folder, {"design": "fuzz"}, report)
    whole = json.loads((folder / "results.json").read_text())
    assert "figures_failed" not in whole, whole["figures_failed"]
    for name in report.tables:
        assert (folder / f"{name}.md").read_text().startswith("|") or name == "table17"
    for name in report.figures:
        assert (folder / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    return whole


ISOLATION_PLANS = [
    ("--costs", "0.10", "--shares", "0.45", "--episodes", "1", "--replicates", "1", "--no-probes"),
    ("--costs", "0.10,0.30", "--episodes", "2", "--replicates", "2", "--no-probes"),
]


@pytest.mark.slow
@settings(FUZZ, max_examples=4)
@given(st.sampled_from(ISOLATION_PLANS), PATTERNS, KEEP, SEEDS)
def test_isolation_reports_every_edge(tmp_path_factory, argv, pattern, keep, seed):
    plan = planned(isolation.DESIGN, argv)
    result = result_of(plan.parts[0], pattern, keep, seed)
    report = isolation.analyse(plan, [result], *parse(isolation.DESIGN, list(argv)), {})
    whole = written(report, tmp_path_factory.mktemp("isolation"))
    for bar in whole["results"]["bars"].values():
        if bar["decisions"]:
            assert bar["low"] <= bar["rate"] <= bar["high"]
    written(isolation_combine([whole]), tmp_path_factory.mktemp("isolation_combined"))


GRID_PLANS = [
    ("--conditions", "k=0.10", "--episodes", "1", "--replicates", "1"),
    ("--conditions", "k=0.10,n=3", "--episodes", "2", "--replicates", "2", "--no-random"),
]


@pytest.mark.slow
@settings(FUZZ, max_examples=4)
@given(st.sampled_from(GRID_PLANS), PATTERNS, KEEP, SEEDS)
def test_grid_and_its_cross_model_tables_report_every_edge(
    tmp_path_factory, argv, pattern, keep, seed
):
    plan = planned(grid.DESIGN, argv)
    results = [result_of(part, pattern, keep, seed) for part in plan.parts]
    report = grid.analyse(plan, results, *parse(grid.DESIGN, list(argv)), {})
    whole = written(report, tmp_path_factory.mktemp("grid"))
    caption = report.tables["table2"]
    assert "15-condition grid" not in caption  # one or two conditions played
    if not whole["results"]["outcomes"]["team_success"]["replicates"]:
        return  # no episode: nothing a cross-model table could hold (combine refuses it)
    one = {"results": whole["results"]}  # one model in the cross-model tables
    written(tables.combine([one]), tmp_path_factory.mktemp("combined"))
    other = {"results": {**whole["results"], "model": "other"}}
    sft = {"results": {**whole["results"], "method": "SFT"}}
    sft_other = {"results": {**whole["results"], "model": "other", "method": "SFT"}}
    combined = tables.combine([one, other, sft, sft_other])  # Table 5 with equal models
    written(combined, tmp_path_factory.mktemp("combined5"))


@FUZZ
@given(PATTERNS, KEEP, SEEDS)
def test_sweeps_report_every_edge(tmp_path_factory, pattern, keep, seed):
    argv = ("--sweeps", "k,n", "--k-values", "0.1", "--n-values", "2,3", "--episodes", "1",
            "--replicates", "1")  # fmt: skip
    plan = planned(sweeps.DESIGN, argv)
    results = [result_of(part, pattern, keep, seed) for part in plan.parts]
    written(sweeps.analyse(plan, results, *parse(sweeps.DESIGN, list(argv)), {}),
            tmp_path_factory.mktemp("sweeps"))  # fmt: skip
