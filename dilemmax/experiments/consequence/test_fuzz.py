"""The red-teaming report (gap report, the paper's Tables 2-4, the maps, stakes profiles, rule
rankings and ablation bars) and the consequence designs' reports on edge populations, built as
arrays (no episode played): every outcome 0 or 1, one context, one rule, cells no episode
reached, degenerate (zero-variance) contexts, one population in a cross-model table. A report
is always written and every figure is drawn."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from dilemmax.envs.consequence.generator import context_table
from dilemmax.experiments.consequence import common, grid
from dilemmax.experiments.design import Report
from dilemmax.experiments.report import write_report
from dilemmax.redteam import ablations as A
from dilemmax.redteam import figures, gap, paper_tables
from dilemmax.redteam import statistics as S
from dilemmax.redteam.reference import EPSILONS, ReferenceTable

FUZZ = settings(
    max_examples=4,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
RESOURCES, THRESHOLDS = context_table(12, 3)
RULE_SETS = st.sampled_from([("RP",), ("AON", "RP", "PP"), ("AON", "RE", "DV", "RP", "PP")])
CONTEXT_SETS = st.sampled_from([(0,), (5, 100, 227)])
PATTERNS = st.sampled_from(["zeros", "ones", "mixed"])


def population(name, rules, contexts, pattern, per_cell, seed) -> S.Population:
    """``per_cell`` episodes in each (rule, context) cell but, with ``per_cell`` 0, one episode
    in the first cell only (the others empty)."""
    rng = np.random.default_rng(seed)
    cells = [(k, c) for k in range(len(rules)) for c in range(len(contexts))]
    rows = [cell for cell in cells for _ in range(per_cell)] or cells[:1]
    count = len(rows)

    def values(top=1.0):
        if pattern == "zeros":
            return np.zeros(count)
        if pattern == "ones":
            return np.full(count, top)
        return rng.integers(0, 2, count) * top

    metrics = {m: values() for m in ("fatality", "collapse", "targeted_elimination",
                                     "exploitation", "cascade")}  # fmt: skip
    metrics["survivors"] = values(3.0)
    metrics["deaths_by_rank"] = np.stack([values()] * 3, axis=-1)
    return S.Population(
        name,
        metrics,
        np.asarray([k for k, _ in rows]),
        np.asarray([c for _, c in rows]),
        len(contexts),
        tuple(rules),
    )


def reference(rules, contexts, pattern) -> ReferenceTable:
    value = {"zeros": 0.0, "ones": 1.0, "mixed": 0.5}[pattern]
    ur = np.full((len(EPSILONS), len(rules), len(contexts)), value)
    index = np.asarray(contexts)
    return ReferenceTable(EPSILONS, tuple(rules), RESOURCES[index], THRESHOLDS[index], 3,
                          {"fatality": ur}, {})  # fmt: skip


def written(report: Report, folder) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    write_report(folder, {"design": "fuzz"}, report)
    whole = json.loads((folder / "results.json").read_text())
    assert "figures_failed" not in whole, whole["figures_failed"]
    return whole


@pytest.mark.slow
@FUZZ
@given(RULE_SETS, CONTEXT_SETS, PATTERNS, st.sampled_from([0, 1, 2]), st.integers(0, 10**6))
def test_grid_report_tables_and_figures(tmp_path_factory, rules, contexts, pattern, per_cell, seed):
    pop = population("model", rules, contexts, pattern, per_cell, seed)
    ref = reference(rules, contexts, pattern)
    report = gap.gap_report([pop], ref, seed, num_resamples=50)
    for entry in report["populations"]["model"]["outcomes"].values():
        for row in entry.values():
            assert np.isnan(row["mean"]) or row["low"] <= row["mean"] <= row["high"]
    tables = {"table2": paper_tables.table2(report), "table3": paper_tables.table3(report)}
    results = {"gap": common.plain(report)}
    whole = written(Report(results, tables, grid._figures(pop, ref, "model")),
                    tmp_path_factory.mktemp("grid"))  # fmt: skip
    assert set(whole["figures"]) == {"fatality", "iag", "stakes_fatality"}
    # One model in the cross-model tables, and the same model twice under two names.
    run = {"results": {"gap": results["gap"], "cells": common.plain(
        {"fatality": pop.cell_means("fatality")}), "contexts": list(contexts),
        "rules": list(rules)}}  # fmt: skip
    written(grid.combine([run]), tmp_path_factory.mktemp("one"))
    written(grid.combine([run, run]), tmp_path_factory.mktemp("two"))


@pytest.mark.slow
@settings(FUZZ, max_examples=2)  # each example writes a dozen figures
@given(RULE_SETS, CONTEXT_SETS, PATTERNS, st.sampled_from([0, 1, 2]), st.integers(0, 10**6))
@example(("AON", "RP"), (5, 100, 227), "zeros", 0, 0)  # RP played nowhere: NaN gaps
def test_gap_report_files_of_two_populations(
    tmp_path_factory, rules, contexts, pattern, per_cell, seed
):
    pops = [population(name, rules, contexts, pattern, per_cell, seed + i)
            for i, name in enumerate(("a", "b"))]  # fmt: skip
    out = tmp_path_factory.mktemp("gap")
    gap.write_gap_report(pops, reference(rules, contexts, pattern), out, seed, num_resamples=50)
    for name in ("table2.md", "table3.md", "report.json", "rule_ranking.png",
                 "stakes_fatality.png", "fatality_a.png", "iag_b.png"):  # fmt: skip
        assert (out / name).stat().st_size > 0, name


@FUZZ
@given(st.sampled_from([("RP",), ("RP", "PP")]), CONTEXT_SETS, PATTERNS,
       st.sampled_from([0, 1, 2]), st.integers(0, 10**6))  # fmt: skip
def test_ablation_report_table4_and_bars(
    tmp_path_factory, rules, contexts, pattern, per_cell, seed
):
    names = list(A.ABLATIONS)
    arms = list(dict.fromkeys(arm for name in names for arm in A.ABLATIONS[name]))
    played = {arm: population(str(i), rules, contexts, pattern, per_cell, seed + i)
              for i, arm in enumerate(arms)}  # fmt: skip
    report = A.ablation_report(played, names, rules, np.asarray(contexts), 1, seed, 50)
    tables = {"table4": paper_tables.table4(report),
              "ablations": figures.markdown_table(*A.ablation_table(report))}  # fmt: skip
    draw = lambda png: figures.ablation_bars(report, png, paper_tables.TABLE4_ROWS)  # noqa: E731
    written(Report(common.plain(report), tables, {"table4": draw}),
            tmp_path_factory.mktemp("ablations"))  # fmt: skip
