"""Homogeneous teams (five copies of one model) and the same teams with the hidden rules revealed.

``homogeneous``: every seat plays the user's model (``--seats``) on every seed; writes the
game's Appendix C tables (OpenCleanup: Tables 3 and 4; OpenHarvest: Table 5), one row per
model, and the return per trial (Figure 3). Runs of several models combine into one table.

``reveal``: the same team twice on the same seeds, the ``reveal`` protocol option off and on
(the reference harness's upper bound: every agent is told the hidden rules at the start); writes
the return per trial of both and their difference, and the tables of both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from dilemmax.commandline import headless_pyplot
from dilemmax.experiments import catalogue
from dilemmax.experiments.design import Design, Plan, Report, SessionOptions
from dilemmax.experiments.open_grid import common
from dilemmax.experiments.open_grid.events import episodes_of
from dilemmax.experiments.open_grid.tables import (
    jsonable_sums,
    merge_sums,
    model_of,
    model_sums,
    table_rows,
    tables_of,
)
from dilemmax.redteam.figures import markdown_table


def _returns_by_model(episodes) -> dict[str, dict]:
    """model -> {"sum": per-trial sums of the mean per-agent return, "episodes": n}."""
    out: dict[str, dict] = {}
    for episode in episodes:
        returns = np.asarray(episode.metrics["return_per_trial"], np.float64).mean(axis=-1)
        row = out.setdefault(model_of(episode), {"sum": np.zeros_like(returns), "episodes": 0})
        row["sum"] = row["sum"] + returns
        row["episodes"] += 1
    return out


def _model_results(game: str, episodes) -> dict[str, dict]:
    """model -> its table sums and per-trial returns (what results.json keeps and combine adds)."""
    sums = jsonable_sums(model_sums(game, episodes))
    returns = _returns_by_model(episodes)
    return {
        model: {
            "sums": sums[model],
            "return_sum": [float(v) for v in returns[model]["sum"]],
            "episodes": returns[model]["episodes"],
        }
        for model in sums
    }


def _report(game: str, models: Mapping[str, Mapping], extra: Mapping | None = None) -> Report:
    """The homogeneous report of some models' results (one run's, or several combined)."""
    sums = {m: {k: tuple(v) for k, v in r["sums"].items()} for m, r in models.items()}
    returns = {m: [v / r["episodes"] for v in r["return_sum"]] for m, r in models.items()}
    tables = tables_of(game, sums)
    results = {
        "game": game,
        "models": {m: dict(r) for m, r in models.items()},
        "return_per_trial": returns,
        "tables": {name: table_rows(name, sums) for name in tables},
        **(extra or {}),
    }
    trials = max((len(v) for v in returns.values()), default=0)
    header = ["Model"] + [f"T{k + 1}" for k in range(trials)]
    tables["returns"] = markdown_table(header, [[m, *(f"{v:.2f}" for v in r)] for m, r in
                                                returns.items()])  # fmt: skip
    figures = {"returns": lambda path: _draw_returns(returns, game, path)}
    if game == "open_harvest":  # Figure 9: payoffs known against apples eaten at the best stage
        rows = results["tables"]["table5"]
        figures["known_vs_best_stage"] = lambda path: _draw_known(rows, path)
    return Report(results, tables, figures)


def _draw_known(rows: Sequence[Sequence], path: str) -> None:
    plt = headless_pyplot()

    figure, axis = plt.subplots(figsize=(4.5, 3.5))
    drawn = [(m, k, b) for m, k, b, *_ in rows if k is not None and b is not None]
    for model, known, best in drawn:
        axis.scatter([known], [best], label=model)
    axis.set_xlabel("payoffs known by the last trial (%)")
    axis.set_ylabel("apples eaten at best stage (%)")
    if drawn:  # a model that ate nothing has no best-stage share to draw
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _draw_returns(returns: Mapping[str, Sequence[float]], game: str, path: str) -> None:
    plt = headless_pyplot()

    figure, axis = plt.subplots(figsize=(5, 3.5))
    for model, values in returns.items():
        axis.plot(range(1, len(values) + 1), values, marker="o", label=model)
    axis.set_xlabel("trial")
    axis.set_ylabel("apples per agent" if game == "open_cleanup" else "points per agent")
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


# ----------------------------------------------------------------------------- homogeneous
def _added(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """Element-wise sum of two per-trial lists (the shorter padded with zeros)."""
    width = max(len(a), len(b))
    return [(a[k] if k < len(a) else 0.0) + (b[k] if k < len(b) else 0.0) for k in range(width)]


def homogeneous_design(game: str) -> Design:
    def plan(params: common.OpenGridParams, run: SessionOptions) -> Plan:
        env = common.design_env(game, params)
        return Plan([common.team_part("team", env, params)], {"game": game})

    def analyse(plan: Plan, results, params, run: SessionOptions, extra) -> Report:
        env = plan.parts[0].env
        episodes = episodes_of(results[0], env, common.transcript_of(run))
        return _report(game, _model_results(game, episodes))

    def combine(runs: Sequence[Mapping]) -> Report:
        models: dict[str, dict] = {}
        for record in runs:
            run = record.get("results", record)  # a run folder's results.json holds it there
            if run.get("game") != game or "models" not in run:
                continue
            for model, r in run["models"].items():
                into = models.setdefault(model, {"sums": {}, "return_sum": [], "episodes": 0})
                merged = merge_sums([into["sums"], r["sums"]])
                into["sums"] = {k: list(v) for k, v in merged.items()}
                into["return_sum"] = _added(into["return_sum"], r["return_sum"])
                into["episodes"] += int(r["episodes"])
        return _report(game, models, {"runs": len(runs)})

    return Design(
        name=f"{game}/homogeneous",
        **catalogue.described(f"{game}/homogeneous"),
        params=common.OpenGridParams,
        plan=plan,
        analyse=analyse,
        combine=combine,
    )


# ----------------------------------------------------------------------------- reveal
REVEAL_PARTS = (("hidden", False), ("revealed", True))


def reveal_design(game: str) -> Design:
    def plan(params: common.OpenGridParams, run: SessionOptions) -> Plan:
        env = common.design_env(game, params)
        parts = [
            common.team_part(name, env, params, protocol_options={"reveal": on})
            for name, on in REVEAL_PARTS
        ]
        return Plan(parts, {"game": game})

    def analyse(plan: Plan, results, params, run: SessionOptions, extra) -> Report:
        transcript = common.transcript_of(run)
        conditions = {}
        for (name, _), part, result in zip(REVEAL_PARTS, plan.parts, results, strict=True):
            conditions[name] = _model_results(game, episodes_of(result, part.env, transcript))
        rows, difference = [], {}
        for model in conditions["hidden"]:
            per = {}
            for name, _ in REVEAL_PARTS:
                r = conditions[name].get(model)
                if r is None:
                    continue
                per[name] = [v / r["episodes"] for v in r["return_sum"]]
                rows.append([model, name, *(f"{v:.2f}" for v in per[name]),
                             f"{np.mean(per[name]):.2f}"])  # fmt: skip
            if len(per) == 2:
                difference[model] = [b - a for a, b in zip(per["hidden"], per["revealed"],
                                                            strict=True)]  # fmt: skip
        trials = plan.parts[0].env.num_trials
        header = ["Model", "Rules", *(f"T{k + 1}" for k in range(trials)), "Mean"]
        tables = {"reveal": markdown_table(header, rows)}
        for name, _ in REVEAL_PARTS:
            sums = {m: {k: tuple(v) for k, v in r["sums"].items()}
                    for m, r in conditions[name].items()}  # fmt: skip
            tables.update({f"{t}_{name}": md for t, md in tables_of(game, sums).items()})
        results_json = {"game": game, "conditions": conditions, "revealed_minus_hidden": difference}
        return Report(results_json, tables)

    return Design(
        name=f"{game}/reveal",
        **catalogue.described(f"{game}/reveal"),
        params=common.OpenGridParams,
        plan=plan,
        analyse=analyse,
    )
