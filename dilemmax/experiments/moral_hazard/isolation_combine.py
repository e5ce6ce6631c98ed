"""Several isolation runs (one model each) side by side: Table 8 with one empirical-boundary
column per model, and a summary row per model (boundary error, pooled bars, probes, validity).

The paper ran isolation for one model, so the per-model summary table is this project's layout;
its Table 8 columns (k, predicted alpha*(k)) come first, then each model's boundary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dilemmax.errors import UsageError
from dilemmax.experiments.design import Report
from dilemmax.experiments.moral_hazard import common

MODELS_COLUMNS = (
    "Model",
    "Boundary MAE",
    "Max error",
    "Below (%)",
    "At (%)",
    "Above (%)",
    "Comprehension (%)",
    "Prediction (%)",
    "Valid (%)",
)


def _design_results(runs: Sequence[Mapping]) -> list[Mapping]:
    out = []
    for i, run in enumerate(runs):
        inner = run.get("results") if isinstance(run, Mapping) else None
        inner = inner if isinstance(inner, Mapping) else run
        if not isinstance(inner, Mapping) or inner.get("design") != "moral_hazard/isolation":
            raise UsageError(f"run {i + 1} is not a moral_hazard/isolation result")
        out.append(inner)
    return out


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _num(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def _model_row(run: Mapping) -> list[str]:
    bars = run.get("bars") or {}
    probe = run.get("probes") or {}
    rates = [_pct((bars.get(p) or {}).get("rate")) for p in ("below", "at", "above")]
    return [
        str(run.get("model")),
        _num(run.get("boundary_mae")),
        _num(run.get("boundary_max_error")),
        *rates,
        _pct(probe.get("comprehension_accuracy")),
        _pct(probe.get("prediction_accuracy")),
        _pct(run.get("format_validity")),
    ]


def combine(runs: Sequence[Mapping]) -> Report:
    """The per-model summary and Table 8 across models (costs in the first run's order)."""
    results = _design_results(runs)
    labels = [str(r.get("model")) for r in results]
    costs = list(dict.fromkeys(b["cost"] for r in results for b in r["boundaries"]))
    by_model = [{b["cost"]: b for b in r["boundaries"]} for r in results]
    columns = [
        "$k$",
        "Predicted $\\alpha^{*}(k)$",
        *[f"Empirical 50% boundary ({m})" for m in labels],
    ]
    rows = []
    for cost in costs:
        star = next(m[cost]["alpha_star"] for m in by_model if cost in m)
        found = [_num(m[cost]["boundary"]) if cost in m else "–" for m in by_model]
        rows.append([f"{cost:.2f}", _num(star), *found])
    tables = {
        "isolation_models": common.markdown(MODELS_COLUMNS, [_model_row(r) for r in results]),
        "table8": common.markdown(columns, rows),
    }
    summary = [
        {
            "model": r.get("model"),
            "boundary_mae": r.get("boundary_mae"),
            "boundaries": r["boundaries"],
            "bars": r.get("bars"),
            "probes": r.get("probes"),
        }
        for r in results
    ]
    return Report({"design": "moral_hazard/isolation (combined)", "models": summary}, tables)
