"""``moral_hazard/sweeps`` (Appendix D.1, Figure 2, Tables 6 and 7): autonomous payoff sweeps.

The model plays every seat of the full game while one parameter moves from the primary setting
(n = 2, k = 0.10, w_T = 0.50): query cost k over 0, 0.05, ..., 0.40; team reward w_T over
{0, 0.2, 0.3, 0.4, 0.5, 0.8, 1.0}; group size n over 2..9. Each condition: three replicates x 15
episodes; every number is the percentage mean +- sample sd over the replicate means. The
primary setting is played once in each sweep, as the paper's tables list it in each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dilemmax.envs.moral_hazard import theory
from dilemmax.envs.moral_hazard.generator import make_config, stack_configs
from dilemmax.envs.option_declaration import setting
from dilemmax.errors import UsageError
from dilemmax.experiments import catalogue
from dilemmax.experiments.design import Design, Part, Plan, Report, SessionOptions
from dilemmax.experiments.moral_hazard import common
from dilemmax.llm.play import PlayResult

SWEEPS = ("k", "w_T", "n")
PAPER_VALUES = {
    "k": tuple(round(0.05 * i, 2) for i in range(9)),
    "w_T": (0.0, 0.2, 0.3, 0.4, 0.5, 0.8, 1.0),
    "n": tuple(range(2, 10)),
}
TABLE6_COLUMNS = ("$k$", "Query", "Team", "Local", "Unsafe")
TABLE7_COLUMNS = ("Sweep", "Value", "Query", "Team", "Local", "Unsafe")
_TABLE_OUTCOMES = ("query_rate", "team_success", "local_reward", "unsafe_choice")
_PANEL_OUTCOMES = (("query_rate", "Query"), ("team_success", "Team"), ("local_reward", "Local"))


@dataclass(frozen=True)
class SweepsParams(common.SizeParams):
    """``moral_hazard/sweeps``' parameters (the paper's sweeps by default)."""

    sweeps: str | None = setting(
        None, "comma-separated subset of k, w_T, n (default all three)", list=True
    )
    k_values: str | None = setting(
        None, "query costs of the k sweep (default 0, 0.05, .., 0.40)", list=True
    )
    w_team_values: str | None = setting(None, "team rewards of the w_T sweep", list=True)
    n_values: str | None = setting(None, "group sizes of the n sweep (default 2..9)", list=True)


def sweep_values(params: SweepsParams) -> dict[str, list]:
    """sweep -> its values, from the options (the paper's by default)."""
    chosen = common.name_list(params.sweeps, "--sweeps", SWEEPS) or list(SWEEPS)
    given = {
        "k": common.number_list(params.k_values, "--k-values", 0.0, 1.0),
        "w_T": common.number_list(params.w_team_values, "--w-team-values", 0, 1),
        "n": common.number_list(params.n_values, "--n-values", 2, 9),
    }
    out = {}
    for sweep in SWEEPS:
        if sweep in chosen:
            values = given[sweep] if given[sweep] is not None else list(PAPER_VALUES[sweep])
            if sweep == "n" and any(v != int(v) for v in values):
                raise UsageError(f"--n-values: group sizes are whole numbers, got {values}")
            out[sweep] = [int(v) for v in values] if sweep == "n" else values
    return out


def _condition(sweep: str, value) -> tuple[int, dict, str]:
    """(n, make_config options, name) of one sweep point."""
    if sweep == "k":
        return 2, {"cost": value}, f"k={value:.2f}"
    if sweep == "w_T":
        return 2, {"w_team": value}, f"w_T={value:.2f}"
    return int(value), {}, f"n={int(value)}"


def plan(params: SweepsParams, run: SessionOptions) -> Plan:
    replicates, episodes = common.sizes(params)
    values = sweep_values(params)
    groups: dict[tuple[str, int], list[tuple[str, object]]] = {}
    for sweep, points in values.items():
        for value in points:
            n, options, name = _condition(sweep, value)
            groups.setdefault((sweep, n), []).append((name, make_config(n, **options)))
    parts = []
    for (sweep, n), rows in groups.items():
        names = [name for name, _ in rows]
        tiled, config_names = common.replicate_configs(
            stack_configs([cfg for _, cfg in rows]), names, replicates
        )
        parts.append(
            Part(
                f"{sweep}/n={n}",
                common.env_for(n),
                tiled,
                config_names,
                episodes=episodes,
                calls_per_episode=common.CALLS_PER_SEAT * n,
            )
        )
    context = {"values": values, "replicates": replicates, "episodes": episodes}
    return Plan(parts, context)


def analyse(
    plan_: Plan,
    results: Sequence[PlayResult],
    params: SweepsParams,
    run: SessionOptions,
    extra: dict,
) -> Report:
    by_sweep: dict[str, dict[str, dict]] = {}
    for part, result in zip(plan_.parts, results, strict=True):
        sweep = part.name.split("/")[0]
        rows = common.episode_rows(result, part.config_names)
        for name in dict.fromkeys(r["condition"] for r in rows):
            means = common.replicate_means([r for r in rows if r["condition"] == name])
            cell = {}
            for outcome, reps in means.items():
                mean, sd = common.mean_sd(reps)
                cell[outcome] = {"mean": mean, "sd": sd, "replicates": reps}
            by_sweep.setdefault(sweep, {})[name] = cell
    seat = common.model_label(results[0]) if results else "model"
    payload = {
        "design": "moral_hazard/sweeps",
        "model": seat,
        "replicates": plan_.context["replicates"],
        "episodes_per_condition": plan_.context["episodes"],
        "values": plan_.context["values"],
        "predicted": {"k_star": theory.cost_star(), "w_team_star": theory.team_weight_star()},
        "sweeps": by_sweep,
    }
    # A run that reached no episode has no panel to draw (its results and tables say so).
    figures = {"figure2": lambda path: _figure(payload, path)} if by_sweep else {}
    return Report(payload, _tables(by_sweep), figures)


def _cells(cell: Mapping) -> list[str]:
    return [common.pct_cell(cell[o]["replicates"]) for o in _TABLE_OUTCOMES]


def _tables(by_sweep: Mapping[str, Mapping[str, dict]]) -> dict[str, str]:
    tables = {}
    if "k" in by_sweep:
        rows = [[name.split("=")[1]] + _cells(cell) for name, cell in by_sweep["k"].items()]
        tables["table6"] = common.markdown(TABLE6_COLUMNS, rows)
    rows = []
    for sweep in ("w_T", "n"):
        for j, (name, cell) in enumerate(by_sweep.get(sweep, {}).items()):
            label = ("$w_T$" if sweep == "w_T" else "$n$") if j == 0 else ""
            rows.append([label, name.split("=")[1]] + _cells(cell))
    if rows:
        tables["table7"] = common.markdown(TABLE7_COLUMNS, rows)
    return tables


def _figure(payload: Mapping, path: str) -> None:
    """Figure 2: one panel per sweep, query / team / local means with +-1 sd bands; the
    predicted indifference points k* = w_T* = 0.30 as dashed lines."""
    plt = common.pyplot()
    sweeps = [s for s in SWEEPS if s in payload["sweeps"]]
    fig, axes = plt.subplots(1, len(sweeps), figsize=(4.2 * len(sweeps), 3.6), squeeze=False)
    marks = {"k": payload["predicted"]["k_star"], "w_T": payload["predicted"]["w_team_star"]}
    for ax, sweep, letter in zip(axes[0], sweeps, "ABC", strict=False):
        cells = payload["sweeps"][sweep]
        x = np.asarray([float(name.split("=")[1]) for name in cells])
        for outcome, label in _PANEL_OUTCOMES:
            mean = np.asarray([100 * c[outcome]["mean"] for c in cells.values()])
            sd = np.asarray([100 * c[outcome]["sd"] for c in cells.values()])
            ax.plot(x, mean, marker="o", label=label)
            ax.fill_between(x, mean - sd, mean + sd, alpha=0.2)
        if sweep in marks:
            ax.axvline(marks[sweep], color="gray", linestyle="--", linewidth=1)
        ax.set_xlabel({"k": "query cost k", "w_T": "team reward w_T", "n": "group size n"}[sweep])
        ax.set_ylabel("percent")
        ax.set_ylim(-5, 105)
        ax.set_title(f"{letter}: {sweep} sweep")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


DESIGN = Design(
    name="moral_hazard/sweeps",
    **catalogue.described("moral_hazard/sweeps"),
    params=SweepsParams,
    plan=plan,
    analyse=analyse,
)
