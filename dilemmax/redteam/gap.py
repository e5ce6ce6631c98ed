"""The institutional alignment gap of populations against the reference, as one report.

:func:`gap_report` turns one or more :class:`~dilemmax.redteam.statistics.Population` s and a
:class:`~dilemmax.redteam.reference.ReferenceTable` into a JSON-able dict: raw outcomes per rule
with CIs, IAG per rule with CIs and sign-flip p-values (at every epsilon, with sign stability),
paired rule contrasts, decisive rules per context, the RP targeting fingerprint, and the
population x rule permutation test. :func:`write_gap_report` also writes the figures and tables
(the paper's Tables 2 and 3 as ``table2.md`` / ``table3.md``, from
:mod:`dilemmax.redteam.paper_tables`).
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dilemmax.envs.consequence import constants as C
from dilemmax.redteam import figures, paper_tables
from dilemmax.redteam import statistics as S
from dilemmax.redteam.reference import PRIMARY_EPSILON, ReferenceTable
from dilemmax.statistics import NUM_RESAMPLES, population_rule_test


def _rows(ci: dict, rules) -> dict:
    return {
        r: {"mean": float(ci["mean"][k]), "low": float(ci["low"][k]), "high": float(ci["high"][k])}
        for k, r in enumerate(rules)
    }


def reference_for(population: S.Population, reference: ReferenceTable) -> np.ndarray:
    """UR_ref [E, K, C] ordered like the population's rules."""
    names = [C.RULE_NAMES[r] if isinstance(r, int) else str(r).upper() for r in reference.rules]
    missing = [r for r in population.rules if r not in names]
    if missing:
        raise ValueError(f"reference has no rule(s) {missing}")
    if reference.ur.shape[-1] != population.num_contexts:
        raise ValueError(
            f"reference has {reference.ur.shape[-1]} contexts, population {population.num_contexts}"
        )
    return reference.ur[:, [names.index(r) for r in population.rules]]


def rp_fingerprint(population: S.Population) -> dict:
    """The regressive-targeting fingerprint (Section 5.2, Appendix 13) of one population."""
    rules = list(population.rules)
    out: dict = {}
    if "RP" not in rules:
        return out
    rp = population.rule_index == rules.index("RP")
    m = population.metrics
    if "targeted_elimination" in m:
        out["rp_targeted_elimination"] = float(np.mean(m["targeted_elimination"][rp]))
    if "exploitation" in m:
        out["rp_exploitation"] = float(np.mean(m["exploitation"][rp]))
    for name in ("deaths_by_rank", "round_one_deaths_by_rank"):
        if name in m:
            out[f"rp_{name}"] = np.asarray(m[name])[rp].sum(axis=0).astype(int).tolist()
    fatality = population.cell_means("fatality")
    safest, worst = S.decisive_rules(fatality)
    out["rp_decisively_safest_contexts"] = int(np.sum(safest == rules.index("RP")))
    out["rp_decisively_worst_contexts"] = int(np.sum(worst == rules.index("RP")))
    return out


def gap_report(
    populations: Sequence[S.Population],
    reference: ReferenceTable,
    seed: int = 0,
    num_resamples: int = NUM_RESAMPLES,
) -> dict:
    """Everything Sections 4-5 report, per population (see the module docstring)."""
    rng = np.random.default_rng(seed)
    report: dict = {"populations": {}, "epsilons": list(reference.epsilons)}
    for pop in populations:
        ref = reference_for(pop, reference)
        fatality = pop.cell_means("fatality")
        entry: dict = {"episodes": int(len(pop.rule_index)), "meta": pop.meta}
        entry["outcomes"] = {
            name: _rows(ci, pop.rules)
            for name, ci in S.outcome_summary(pop, rng, num_resamples=num_resamples).items()
        }
        gaps = {}
        for e, eps in enumerate(reference.epsilons):
            iag = S.alignment_gap(fatality, ref[e], rng, num_resamples)
            gaps[str(eps)] = {
                r: {
                    "mean": float(iag["mean"][k]),
                    "low": float(iag["low"][k]),
                    "high": float(iag["high"][k]),
                    "p_value": float(iag["p_value"][k]),
                    "ur_ref": float(np.mean(ref[e, k])),
                }
                for k, r in enumerate(pop.rules)
            }
        entry["iag"] = gaps
        # Stable: no two epsilons give gaps of strictly opposite sign (an exact 0 contradicts
        # nothing: at epsilon = 0 the reference's UR is 0 in most contexts).
        # A rule no episode played has no gap (NaN) at any epsilon: nothing to contradict.
        entry["iag_sign_stable"] = {
            r: not (
                {1, -1}
                <= {
                    int(np.sign(round(g[r]["mean"], 12)))
                    for g in gaps.values()
                    if np.isfinite(g[r]["mean"])
                }
            )
            for r in pop.rules
        }
        entry["rule_contrasts"] = S.rule_contrasts(fatality, rng, pop.rules, num_resamples)
        entry["decisive"] = S.decisive_counts(fatality, pop.rules)
        entry["fingerprint"] = rp_fingerprint(pop)
        report["populations"][pop.name] = entry
    if len(populations) > 1:
        cells = [p.cell_means("fatality") for p in populations]
        if not any(np.isnan(c).any() for c in cells):
            report["population_x_rule"] = population_rule_test(cells, rng, num_resamples)
    return report


def write_gap_report(
    populations: Sequence[S.Population],
    reference: ReferenceTable,
    out_dir: Path,
    seed: int = 0,
    num_resamples: int = NUM_RESAMPLES,
    epsilon: float = PRIMARY_EPSILON,
) -> dict:
    """:func:`gap_report` plus figures and tables under ``out_dir``; returns the report."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = gap_report(populations, reference, seed, num_resamples)
    rng = np.random.default_rng(seed + 1)
    e = list(reference.epsilons).index(epsilon)
    total = int(reference.resources[0].sum())
    stakes_fatality, stakes_survivors, counts = {}, {}, {}
    for pop in populations:
        ref = reference_for(pop, reference)
        fatality = pop.cell_means("fatality")
        slug = re.sub(r"[^A-Za-z0-9_-]", "_", pop.name)
        figures.heatmaps(
            fatality,
            reference.resources,
            reference.thresholds,
            out_dir / f"fatality_{slug}",
            f"{pop.name}: fatality per context",
            pop.rules,
        )
        figures.heatmaps(
            fatality - ref[e],
            reference.resources,
            reference.thresholds,
            out_dir / f"iag_{slug}",
            f"{pop.name}: IAG = UR_pop - UR_ref (eps = {epsilon})",
            pop.rules,
            diverging=True,
        )
        stakes_fatality[pop.name] = S.stakes_profile(fatality, reference.thresholds, total, rng)
        if "survivors" in pop.metrics:
            survivors = pop.cell_means("survivors")
            stakes_survivors[pop.name] = S.stakes_profile(
                survivors, reference.thresholds, total, rng
            )
        counts[pop.name] = S.decisive_counts(fatality, pop.rules)
        _write_context_table(pop, ref[e], reference, out_dir / f"contexts_{slug}.csv")
    rules = populations[0].rules
    figures.heatmaps(
        reference_for(populations[0], reference)[e],  # the reference's rows of these rules
        reference.resources,
        reference.thresholds,
        out_dir / "reference_ur",
        f"reference UR_ref (eps = {epsilon})",
        rules,
    )
    figures.stakes_profiles(stakes_fatality, out_dir / "stakes_fatality", "fatality", rules)
    if stakes_survivors:
        figures.stakes_profiles(stakes_survivors, out_dir / "stakes_survivors", "survivors", rules)
    figures.ranking_bars(counts, out_dir / "rule_ranking", rules)
    _write_iag_table(report, out_dir / "iag_table", epsilon)
    (out_dir / "table2.md").write_text(paper_tables.table2(report, epsilon))
    (out_dir / "table3.md").write_text(paper_tables.table3(report))
    (out_dir / "report.json").write_text(json.dumps(report, indent=1, default=jsonable))
    return report


def jsonable(value):
    """json.dumps' default= for numpy scalars and arrays."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot serialise {type(value)}")


def _write_context_table(pop: S.Population, ur_ref: np.ndarray, reference, path: Path) -> Path:
    """CSV, one row per (rule, context): every core metric, UR_ref, IAG, decisive rules."""
    names = [m for m in S.CORE_METRICS if m in pop.metrics]
    cells = {m: pop.cell_means(m) for m in names}
    safest, worst = S.decisive_rules(cells["fatality"])
    label = lambda k: pop.rules[k] if k >= 0 else ""
    counts = pop.cell_counts()
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(
            [
                "resources",
                "T",
                "rule",
                "episodes",
                *names,
                "UR_ref",
                "IAG",
                "decisively_safest",
                "decisively_worst",
            ]
        )
        for c in range(pop.num_contexts):
            w = "(" + ",".join(str(int(v)) for v in reference.resources[c]) + ")"
            for k, rule in enumerate(pop.rules):
                values = [float(cells[m][k, c]) for m in names]
                writer.writerow(
                    [
                        w,
                        int(reference.thresholds[c]),
                        rule,
                        int(counts[k, c]),
                        *values,
                        float(ur_ref[k, c]),
                        float(cells["fatality"][k, c] - ur_ref[k, c]),
                        label(safest[c]),
                        label(worst[c]),
                    ]
                )
    return path


def _write_iag_table(report: dict, path: Path, epsilon: float) -> list[Path]:
    """Per population and rule: fatality [CI], UR_ref, IAG [CI], p, sign stability."""
    header = [
        "population",
        "rule",
        "fatality",
        "fatality CI",
        "UR_ref",
        "IAG",
        "IAG CI",
        "p",
        "sign stable over eps",
        "targeted",
        "exploitation",
    ]
    rows = []
    for name, entry in report["populations"].items():
        gaps = entry["iag"][str(epsilon)]
        for rule, g in gaps.items():
            out = entry["outcomes"]
            f = out["fatality"][rule]
            tgt = out.get("targeted_elimination", {}).get(rule, {"mean": float("nan")})
            exp = out.get("exploitation", {}).get(rule, {"mean": float("nan")})
            rows.append(
                [
                    name,
                    rule,
                    f["mean"],
                    f"[{f['low']:+.3f}, {f['high']:+.3f}]",
                    g["ur_ref"],
                    g["mean"],
                    f"[{g['low']:+.3f}, {g['high']:+.3f}]",
                    f"{g['p_value']:.4f}",
                    entry["iag_sign_stable"][rule],
                    tgt["mean"],
                    exp["mean"],
                ]
            )
    return figures.write_table(path, header, rows)
