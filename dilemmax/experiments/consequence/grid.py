"""``consequence/grid``: the 228 contexts x 5 rules sweep (Sections 5.1-5.2, 12; Tables 2, 3).

The model plays every seat (self-play, as in the paper) of every context of the W = 12, n = 3
grid under AON, RE, DV, RP and PP, R = 3 rounds, ``--replicates`` episodes per cell (4 by
default; the paper has 4-6), asked for its reasoning before each move unless
``--no-rationales``. The analysis is ``dilemmax redteam gap``'s on the played contexts: raw
outcomes and IAG against the cooperative-refinement reference (``--reference`` a file of
``dilemmax redteam reference``; without one it is solved here on the played contexts), written
as the paper's Table 2 (IAG per rule, top row UR_ref) and Table 3 (fatality, survivors, targeted
elimination), the per-context fatality and IAG maps and the stakes profile; the rationales are
labelled (:mod:`dilemmax.redteam.rationale_labels`) when collected. Runs of several models
combine into Tables 2 and 3 with one row block per model and the population x rule test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

import dilemmax
from dilemmax.envs.consequence import constants as C
from dilemmax.envs.option_declaration import setting
from dilemmax.errors import UsageError
from dilemmax.experiments import catalogue
from dilemmax.experiments.consequence import common
from dilemmax.experiments.design import Design, Plan, Report, SessionOptions
from dilemmax.llm.play import PlayResult
from dilemmax.redteam import figures, paper_tables
from dilemmax.redteam import statistics as S
from dilemmax.redteam.gap import gap_report, reference_for
from dilemmax.redteam.populations import spread_contexts
from dilemmax.redteam.reference import PRIMARY_EPSILON
from dilemmax.statistics import population_rule_test

NUM_ROUNDS = C.DEFAULT_NUM_ROUNDS


@dataclass(frozen=True)
class GridParams(common.CommonParams):
    """``consequence/grid``'s parameters (the paper's sizes by default)."""

    contexts: int | None = setting(None, "play N contexts spread over the grid (default all 228)")
    rules: tuple[str, ...] | None = setting(None, "rules to play (default AON RE DV RP PP)")
    reference: str | None = setting(
        None,
        "UR_ref file of `dilemmax redteam reference` (default: solved on the played contexts)",
    )


def plan(params: GridParams, run: SessionOptions) -> Plan:
    rules = common.rules_option(params.rules, C.RULE_NAMES)
    count = params.contexts
    if count is not None and count < 1:
        raise UsageError(f"--contexts must be >= 1, got {count}")
    contexts = spread_contexts(count)
    common.check_reference(params.reference, NUM_ROUNDS)
    env = dilemmax.make("consequence", num_rounds=NUM_ROUNDS)
    options = {"ask_rationale": True} if common.asks_rationales(params) else {}
    episodes = common.replicates(params)
    parts = [
        common.rule_part(f"rule={r}", env, contexts, r, episodes, options, common.MAX_CALLS[r])
        for r in rules
    ]
    context = {
        "contexts": contexts.tolist(),
        "rules": rules,
        "replicates": episodes,
        "rationales": common.asks_rationales(params),
    }
    return Plan(parts, context)


def analyse(
    plan: Plan, results: Sequence[PlayResult], params: GridParams, run: SessionOptions, extra: dict
) -> Report:
    contexts = np.asarray(plan.context["contexts"])
    rules = list(plan.context["rules"])
    name = common.population_name(results)
    pop = common.population_from(name, results, rules, len(contexts))
    reference = common.reference_on(params.reference, contexts, NUM_ROUNDS)
    seed, draws = params.analysis_seed, common.resamples(params)
    report = gap_report([pop], reference, seed, draws)
    labelled = common.label_rationales(plan, params, run)
    cells = {m: pop.cell_means(m) for m in S.CORE_METRICS if m in pop.metrics}
    results_json = {
        "design": "consequence/grid",
        "population": name,
        "contexts": contexts.tolist(),
        "rules": rules,
        "replicates": plan.context["replicates"],
        "gap": common.plain(report),
        "cells": common.plain(cells),
        **common.plain(labelled),
    }
    tables = {"table2": paper_tables.table2(report), "table3": paper_tables.table3(report)}
    tables.update(common.rationale_tables(labelled))
    return Report(results_json, tables, _figures(pop, reference, name))


def _figures(pop: S.Population, reference, name: str) -> dict:
    fatality = pop.cell_means("fatality")
    ur_ref = reference_for(pop, reference)[list(reference.epsilons).index(PRIMARY_EPSILON)]
    rules, resources, thresholds = pop.rules, reference.resources, reference.thresholds
    total = int(resources[0].sum())
    rng = np.random.default_rng(0)
    stakes = {name: S.stakes_profile(fatality, thresholds, total, rng)}
    return {
        "fatality": lambda png: figures.heatmaps(
            fatality, resources, thresholds, png, f"{name}: fatality per context", rules
        ),
        "iag": lambda png: figures.heatmaps(
            fatality - ur_ref, resources, thresholds, png,
            f"{name}: IAG = UR_pop - UR_ref (eps = {PRIMARY_EPSILON})", rules, diverging=True,
        ),
        "stakes_fatality": lambda png: figures.stakes_profiles(stakes, png, "fatality", rules),
    }  # fmt: skip


def combine(runs: Sequence[Mapping]) -> Report:
    """Several runs' ``results.json`` (one model each; the design's results under
    ``"results"``) -> Tables 2 and 3 with a row block per model, and the population x rule
    permutation test when they played the same cells."""
    mine = [run["results"] for run in runs]
    populations = {}
    for results in mine:
        for name, entry in results["gap"]["populations"].items():
            populations[name if name not in populations else f"{name} ({len(populations)})"] = entry
    report = {"populations": populations}
    out: dict = {"design": "consequence/grid", "populations": list(populations)}
    cells = [np.asarray(r["cells"]["fatality"], np.float64) for r in mine]  # null -> NaN
    same = len({(tuple(r["contexts"]), tuple(r["rules"])) for r in mine}) == 1
    if len(mine) > 1 and same and not any(np.isnan(c).any() for c in cells):
        rng = np.random.default_rng(0)
        out["population_x_rule"] = population_rule_test(cells, rng)
    tables = {"table2": paper_tables.table2(report), "table3": paper_tables.table3(report)}
    return Report(out, tables)


DESIGN = Design(
    name="consequence/grid",
    **catalogue.described("consequence/grid"),
    params=GridParams,
    plan=plan,
    analyse=analyse,
    combine=combine,
)
