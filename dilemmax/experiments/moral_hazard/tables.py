"""Cross-model tables of the grid design: Table 2 (one row per model) and Table 5 (paired
model-level diagnostics), with the appendix's Tables 17 (leave one model out) and 18 (effect
size, bootstrap P(mean > 0), Holm and BH adjustments), from several runs' ``results.json``.

Each run is one model under one method (``--method``: Base, SFT, RLOO, SFT+RLOO, GEPA, ...).
A single run's mean +- sd is over its replicates; several runs of the same model and method are
its model-run seeds (one value per run). A comparison "<method> - Base" pairs,
per model, the method's mean over replicates with the base run's; "Best observed weight - Base"
takes, per model, the weight update (SFT, RLOO or SFT+RLOO) with the highest team success, and
reports its team and unsafe-choice changes (a descriptive upper envelope, as in the paper).
Over the paired models: the mean change in percentage points, the exact bootstrap CI over model
pairs (:func:`dilemmax.statistics.exact_bootstrap`), how many models changed positively,
the exact sign-flip p; Holm and Benjamini-Hochberg adjust over every row of Table 5.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from dilemmax import statistics
from dilemmax.errors import UsageError
from dilemmax.experiments.design import Report
from dilemmax.experiments.moral_hazard import common

TABLE2_COLUMNS = ("Model", "Team", "Local", "Query", "Info", "Valid")
TABLE2_OUTCOMES = ("team_success", "local_reward", "query_rate", "info_transfer", "format_validity")
TABLE5_COLUMNS = ("Comparison", "Metric", "Δ pp", "Bootstrap 95% CI", "Positive", "Exact p")
TABLE17_COLUMNS = ("Omitted model", "Team Δ pp", "Team 95% CI", "Risky Δ pp", "Risky 95% CI")
TABLE18_COLUMNS = ("Comparison", "Metric", "d_z", "P(Δ̄>0)", "Exact p", "Holm p", "BH q")
TABLE5_METRICS = (("Team success", "team_success"), ("Unsafe choice", "unsafe_choice"))
WEIGHT_METHODS = ("SFT", "RLOO", "SFT+RLOO")
BEST_WEIGHT = "Best observed weight"
GRID_CONDITIONS = 15  # the one-at-a-time grid's conditions (generator.condition_grid)
TABLE5_CAPTION = (
    "Δ pp: mean percentage-point change against Base over the paired models; CI: exact "
    "bootstrap over model pairs; Positive: models with a positive change (for unsafe choice a "
    "positive change is worse); Exact p: paired sign flips."
)
TABLE18_CAPTION = (
    "d_z: mean paired change / its sd; P(Δ̄>0) from the exact bootstrap over model pairs; Holm "
    "and Benjamini-Hochberg adjust over every row of Table 5."
)


def table2_caption(conditions: Sequence[int]) -> str:
    """Table 2's caption for runs that played ``conditions`` conditions each: the paper's "over
    the 15-condition grid" only when that is what was played."""
    counts = sorted(set(conditions))
    if counts == [GRID_CONDITIONS]:
        played = f"over the {GRID_CONDITIONS}-condition grid"
    elif len(counts) == 1:
        n = counts[0]
        played = f"over the {n} condition{'' if n == 1 else 's'} played (of the grid's 15)"
    else:
        played = f"over each run's conditions ({', '.join(map(str, counts))} of the grid's 15)"
    return (
        f"Percentages {played}, mean ± sample sd across replicates (each the mean over its "
        "episodes); Random: the random valid-action control on the same cases."
    )


def captioned(table: str, caption: str) -> str:
    """A markdown table followed by its caption (the first line stays the header)."""
    return f"{table}\n{caption}\n"


def table2_row(label: str, outcomes: Mapping) -> list[str]:
    """``[label, "team mean ± sd", ...]`` from a run's outcome summary (fractions)."""
    return [label] + [common.pct_cell(outcomes[o]["replicates"]) for o in TABLE2_OUTCOMES]


# --------------------------------------------------------------------------- runs
def _unwrapped(run):
    """A design's own results: under ``"results"`` of a run folder's results.json."""
    inner = run.get("results") if isinstance(run, Mapping) else None
    return inner if isinstance(inner, Mapping) else run


def _checked(runs: Sequence[Mapping]) -> list[Mapping]:
    runs = [_unwrapped(run) for run in runs]
    for i, run in enumerate(runs):
        if not isinstance(run, Mapping) or run.get("design") != "moral_hazard/grid":
            raise UsageError(f"run {i + 1} is not a moral_hazard/grid result; combine grid runs")
        if not isinstance(run.get("outcomes"), Mapping) or "model" not in run:
            raise UsageError(f"run {i + 1} ({run.get('model')}) has no outcomes to combine")
        for name, outcome in run["outcomes"].items():
            values = outcome.get("replicates") if isinstance(outcome, Mapping) else None
            if not (isinstance(values, list) and values and all(_is_number(v) for v in values)):
                raise UsageError(
                    f"run {i + 1} ({str(run.get('model'))[:60]}): outcome {str(name)[:40]!r} has "
                    "no replicate values (a run that played no episode?)"
                )
    return list(runs)


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _pooled(runs: Sequence[Mapping]) -> dict[tuple[str, str], dict[str, list[float]]]:
    """(model, method) -> outcome -> the values its mean +- sd is taken over.

    One run: its replicates' values. Several runs of the same model and method (model-run
    seeds: adapters trained from different seeds, or repeated sampling runs): one value per run,
    the mean over its replicates, so the sd is across runs as in the paper's Table 2.
    """
    by_key: dict[tuple[str, str], list[Mapping]] = {}
    for run in runs:
        by_key.setdefault((str(run["model"]), str(run.get("method") or "Base")), []).append(run)
    pooled: dict[tuple[str, str], dict[str, list[float]]] = {}
    for key, group in by_key.items():
        outcomes = list(dict.fromkeys(o for run in group for o in run["outcomes"]))
        pooled[key] = {
            o: [float(v) for v in group[0]["outcomes"][o]["replicates"]]
            if len(group) == 1
            else [float(np.mean(run["outcomes"][o]["replicates"])) for run in group]
            for o in outcomes
            if all(o in run["outcomes"] for run in group)
        }
    return pooled


def _conditions_played(run: Mapping) -> int:
    """How many conditions a run played (its per-condition summaries; the grid's 15 for a run
    that kept none)."""
    conditions = run.get("conditions")
    return len(conditions) if isinstance(conditions, Mapping) and conditions else GRID_CONDITIONS


def _is_base(method: str) -> bool:
    return method.strip().lower() == "base"


def _as_outcomes(values: Mapping[str, list[float]]) -> dict:
    return {o: {"replicates": v} for o, v in values.items()}


# --------------------------------------------------------------------------- Table 2
def _table2(runs, pooled) -> tuple[list[list[str]], list[dict]]:
    base_keys = [k for k in pooled if _is_base(k[1])]
    keys = base_keys or list(pooled)
    rows, records = [], []
    for model, method in keys:
        label = model if base_keys else f"{model} ({method})"
        rows.append(table2_row(label, _as_outcomes(pooled[(model, method)])))
        records.append({"model": label, **_means(pooled[(model, method)])})
    random = next((run["random"] for run in runs if run.get("random")), None)
    if random:
        rows.append(table2_row("Random", random))
        records.append({"model": "Random", **{o: random[o]["mean"] for o in TABLE2_OUTCOMES}})
    return rows, records


def _means(values: Mapping[str, list[float]]) -> dict[str, float]:
    return {o: float(np.mean(v)) for o, v in values.items()}


# --------------------------------------------------------------------------- Table 5
def _comparisons(pooled) -> list[tuple[str, dict[str, tuple[dict, dict]]]]:
    """(comparison name, model -> (method means, base means)) for every comparison with base."""
    base = {m: _means(v) for (m, method), v in pooled.items() if _is_base(method)}
    methods = list(dict.fromkeys(method for (_, method) in pooled if not _is_base(method)))
    out = []
    weights = [m for m in methods if m.upper() in WEIGHT_METHODS]
    if weights:
        best = {}
        for model, base_means in base.items():
            tried = [_means(pooled[(model, m)]) for m in weights if (model, m) in pooled]
            if tried:
                best[model] = (max(tried, key=lambda means: means["team_success"]), base_means)
        out.append((BEST_WEIGHT, best))
    for method in methods:
        pairs = {
            model: (_means(pooled[(model, method)]), base_means)
            for model, base_means in base.items()
            if (model, method) in pooled
        }
        out.append((method, pairs))
    return [(name, pairs) for name, pairs in out if len(pairs) >= 2]


def _deltas(pairs: Mapping[str, tuple[dict, dict]], outcome: str) -> dict[str, float]:
    return {model: 100.0 * (m[outcome] - b[outcome]) for model, (m, b) in pairs.items()}


def _diagnostics(deltas: Mapping[str, float]) -> dict:
    d = list(deltas.values())
    boot = statistics.exact_bootstrap(d)
    return {
        "delta_pp": boot["mean"],
        "ci": [boot["low"], boot["high"]],
        "exact_bootstrap": boot["exact"],
        "positive": int(sum(x > 0 for x in d)),
        "models": len(d),
        "exact_p": statistics.sign_flip_test(d),
        "dz": statistics.paired_dz(d),
        "p_positive": boot["p_positive"],
        "per_model": dict(deltas),
    }


def _table5(pooled) -> list[dict]:
    rows = []
    comparisons = _comparisons(pooled)
    for metric, outcome in TABLE5_METRICS:
        for name, pairs in comparisons:
            row = {"comparison": f"{name} − Base", "metric": metric}
            rows.append({**row, **_diagnostics(_deltas(pairs, outcome))})
    if rows:
        p = [r["exact_p"] for r in rows]
        holm, bh = statistics.holm(p), statistics.benjamini_hochberg(p)
        for row, h, q in zip(rows, holm, bh, strict=True):
            row["holm_p"], row["bh_q"] = float(h), float(q)
    return rows


def _leave_one_out(pooled) -> tuple[str, list[dict]]:
    comparisons = _comparisons(pooled)
    if not comparisons or len(comparisons[0][1]) < 3:
        return "", []
    name, pairs = comparisons[0]
    rows = []
    for omitted in pairs:
        kept = {m: v for m, v in pairs.items() if m != omitted}
        row = {"omitted": omitted}
        for key, outcome in (("team", "team_success"), ("risky", "unsafe_choice")):
            boot = statistics.exact_bootstrap(list(_deltas(kept, outcome).values()))
            row[key] = {"delta_pp": boot["mean"], "ci": [boot["low"], boot["high"]]}
        rows.append(row)
    return f"{name} − Base", rows


def _pp(x: float) -> str:
    return f"{x:+.1f}"


def _ci_text(pair: Sequence[float]) -> str:
    return f"[{_pp(pair[0])}, {_pp(pair[1])}]"


def _table5_markdown(rows: Sequence[dict]) -> tuple[str, str]:
    main = [
        [
            r["comparison"],
            r["metric"],
            _pp(r["delta_pp"]),
            _ci_text(r["ci"]),
            f"{r['positive']}/{r['models']}",
            f"{r['exact_p']:.3f}",
        ]
        for r in rows
    ]
    secondary = [
        [
            r["comparison"],
            r["metric"],
            f"{r['dz']:.2f}",
            f"{r['p_positive']:.2f}",
            f"{r['exact_p']:.3f}",
            f"{r['holm_p']:.3f}",
            f"{r['bh_q']:.3f}",
        ]
        for r in rows
    ]
    return (
        captioned(common.markdown(TABLE5_COLUMNS, main), TABLE5_CAPTION),
        captioned(common.markdown(TABLE18_COLUMNS, secondary), TABLE18_CAPTION),
    )


def combine(runs: Sequence[Mapping]) -> Report:
    """Tables 2, 5, 17 and 18 from several ``moral_hazard/grid`` runs (one model and method
    each). Table 5 needs at least two models with a base run and the compared method."""
    runs = _checked(runs)
    pooled = _pooled(runs)
    table2_rows, table2_records = _table2(runs, pooled)
    table5 = _table5(pooled)
    lomo_name, lomo = _leave_one_out(pooled)
    caption = table2_caption([_conditions_played(run) for run in runs])
    tables = {"table2": captioned(common.markdown(TABLE2_COLUMNS, table2_rows), caption)}
    if table5:
        tables["table5"], tables["table18"] = _table5_markdown(table5)
    if lomo:
        rows = [
            [
                r["omitted"],
                _pp(r["team"]["delta_pp"]),
                _ci_text(r["team"]["ci"]),
                _pp(r["risky"]["delta_pp"]),
                _ci_text(r["risky"]["ci"]),
            ]
            for r in lomo
        ]
        tables["table17"] = f"{lomo_name}\n\n" + common.markdown(TABLE17_COLUMNS, rows)
    results = {
        "design": "moral_hazard/grid (combined)",
        "runs": [{"model": r["model"], "method": r.get("method") or "Base"} for r in runs],
        "table2": table2_records,
        "table5": table5,
        "leave_one_model_out": {"comparison": lomo_name, "rows": lomo},
    }
    base = {m: _as_outcomes(v) for (m, method), v in pooled.items() if _is_base(method)}
    models = base or {f"{m} ({k})": _as_outcomes(v) for (m, k), v in pooled.items()}
    random = next((run["random"] for run in runs if run.get("random")), None)
    figures = {"figure4": lambda path: draw_figure4(models, random, path)}
    return Report(results, tables, figures)


# --------------------------------------------------------------------------- Figure 4
def draw_figure4(models: Mapping[str, Mapping], random: Mapping | None, path: str) -> None:
    """Figure 4: A, local reward against team success (marker size: query rate); B, query rate
    against information transfer (colour: team success). The random control is a red x."""
    plt = common.pyplot()

    def mean(outcomes, name):
        values = outcomes[name].get("replicates")
        return 100.0 * float(np.mean(values)) if values else 100.0 * outcomes[name]["mean"]

    def placed(outcomes) -> bool:
        """Whether every mean a point needs is a number (a run of no episode has none; a NaN
        marker size makes matplotlib fail the whole figure)."""
        names = ("local_reward", "team_success", "query_rate", "info_transfer")
        return all(np.isfinite(mean(outcomes, name)) for name in names)

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4.2))
    for label, outcomes in models.items():
        if not placed(outcomes):
            continue
        local, team = mean(outcomes, "local_reward"), mean(outcomes, "team_success")
        query, info = mean(outcomes, "query_rate"), mean(outcomes, "info_transfer")
        a.scatter(local, team, s=20 + 3 * query, alpha=0.7)
        a.annotate(label, (local, team), fontsize=7)
        b.scatter(query, info, s=20 + 3 * team, c=[[team / 100, 0.3, 1 - team / 100]], alpha=0.7)
        b.annotate(label, (query, info), fontsize=7)
    if random and placed(random):
        a.scatter(mean(random, "local_reward"), mean(random, "team_success"), marker="x", c="red")
        b.scatter(mean(random, "query_rate"), mean(random, "info_transfer"), marker="x", c="red")
    for ax, (x, y) in zip(
        (a, b), (("Local reward", "Team success"), ("Query", "Info")), strict=True
    ):
        ax.set_xlabel(f"{x} (%)")
        ax.set_ylabel(f"{y} (%)")
        ax.set_xlim(-5, 105)
        ax.set_ylim(-5, 105)
    a.set_title("A: local reward vs team success (size: query)")
    b.set_title("B: query vs information transfer (colour: team)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
