"""The mixed-model arena (OpenSocialJax Section 4.4, Figure 6): one model per seat.

The seats are the user's ``--seat agent_i=<spec>`` entries (``--seats`` fills the rest); each
spec carries its own endpoint, key variable and sampling options (``openai:m,base_url=...``), so
hosted APIs and local servers play side by side. Seats rotate across seeds: on seed s the model
the user put in seat i plays seat i + s (mod 5). Writes each model's individual return, and per
trial its share of the team's cleaning (OpenCleanup) or the team's orchard lifetime
(OpenHarvest).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from dilemmax.commandline import headless_pyplot
from dilemmax.errors import UsageError
from dilemmax.experiments import catalogue
from dilemmax.experiments.design import Design, Plan, Report, SessionOptions
from dilemmax.experiments.open_grid import common
from dilemmax.experiments.open_grid.tables import model_label
from dilemmax.redteam.figures import markdown_table


def arena_specs(env, run: SessionOptions) -> list[str] | None:
    """The spec of each seat in the user's order (``--seat`` over ``--seats``); None when the
    user named no seat at all (``--list`` plans without seats: the session then asks for them)."""
    given, default = dict(run.seats), run.default_seat
    unknown = sorted(set(given) - set(env.agents))
    if unknown:
        raise UsageError(f"--seat names unknown agent(s) {unknown}; agents: {env.agents}")
    if not given and not default:
        return None
    missing = [a for a in env.agents if a not in given and not default]
    if missing:
        raise UsageError(
            f"the arena needs a model in every seat: add --seat {missing[0]}=<kind>:<target> "
            "for each (or --seats for the rest)"
        )
    return [given.get(a, default) for a in env.agents]


def plan_arena(game: str, params: common.OpenGridParams, run: SessionOptions) -> Plan:
    env = common.design_env(game, params)
    specs = arena_specs(env, run)
    n = env.num_agents
    parts = []
    for seed in range(common.seeds_of(params)):
        seating = {env.agents[(i + seed) % n]: spec for i, spec in enumerate(specs or [])}
        parts.append(common.seed_part(f"seed{seed}", env, run, seed, seats=seating))
    return Plan(parts, {"game": game, "specs": specs})


def per_model(game: str, results) -> tuple[dict, dict]:
    """(model -> its returns and cleaning shares, team -> per-trial team measures)."""
    models: dict[str, dict] = {}
    team: dict[str, list] = {"orchard_lifetime": [], "total_cleaning": []}
    for result in results:
        m = result.metrics
        for e, info in enumerate(result.episodes):
            per_trial = np.asarray(m["return_per_trial"][e], np.float64)  # [K, A]
            for i, seat in enumerate(info["seats"].values()):
                row = models.setdefault(seat, {"returns": [], "cleaning_share": []})
                row["returns"].append([float(v) for v in per_trial[:, i]])
                if game == "open_cleanup":
                    own = np.asarray(m["cleaning_per_trial"][e], np.float64)[:, i]
                    total = np.asarray(m["total_cleaning"][e], np.float64)
                    share = np.divide(own, total, out=np.zeros_like(own), where=total > 0)
                    row["cleaning_share"].append([float(v) for v in share])
            if game == "open_cleanup":
                team["total_cleaning"].append([float(v) for v in m["total_cleaning"][e]])
            else:
                team["orchard_lifetime"].append([int(v) for v in m["orchard_lifetime"][e]])
    return models, {k: v for k, v in team.items() if v}


def analyse_arena(game: str, plan: Plan, results) -> Report:
    models, team = per_model(game, results)
    trials = plan.parts[0].env.num_trials
    columns = [f"T{k + 1}" for k in range(trials)]
    rows = []
    summary = {}
    labels = {spec: model_label(spec) for spec in models}
    if len(set(labels.values())) < len(labels):  # one model on two servers: keep them apart
        labels = {spec: spec for spec in models}
    models = {labels[spec]: row for spec, row in models.items()}
    for model, row in models.items():
        returns = np.asarray(row["returns"])  # [episodes, K]
        summary[model] = {
            "return": float(returns.mean()),
            "return_per_trial": returns.mean(0).tolist(),
        }
        cells = [model, f"{returns.mean():.2f}"]
        if row["cleaning_share"]:
            share = np.asarray(row["cleaning_share"]).mean(axis=0)
            summary[model]["cleaning_share_per_trial"] = share.tolist()
            cells += [f"{100 * v:.0f}" for v in share]
        rows.append(cells)
    if game == "open_cleanup":
        header = ["Model", "Return", *(f"Cleaning share (%) {c}" for c in columns)]
    else:
        header = ["Model", "Return"]
    tables = {"arena": markdown_table(header, rows)}
    for name, values in team.items():
        mean = np.asarray(values, np.float64).mean(axis=0)
        tables["arena"] += "\n" + markdown_table(
            ["Team", *columns], [[name.replace("_", " "), *(f"{v:.1f}" for v in mean)]]
        )
    results_json = {"game": game, "models": summary, "team": team, "specs": plan.context["specs"]}
    return Report(results_json, tables, {"arena": lambda path: _draw(summary, path)})


def _draw(summary: Mapping[str, Mapping], path: str) -> None:
    plt = headless_pyplot()

    shares = any("cleaning_share_per_trial" in s for s in summary.values())
    figure, axes = plt.subplots(1, 2 if shares else 1, figsize=(8 if shares else 4.5, 3.2))
    axes = np.atleast_1d(axes)
    names = list(summary)
    axes[0].bar(range(len(names)), [summary[n]["return"] for n in names])
    axes[0].set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=7)
    axes[0].set_ylabel("individual return per trial")
    if shares:
        for name in names:
            values = summary[name].get("cleaning_share_per_trial", [])
            axes[1].plot(range(1, len(values) + 1), values, marker="o", label=name)
        axes[1].set_xlabel("trial")
        axes[1].set_ylabel("share of cleaning")
        axes[1].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def arena_design(game: str) -> Design:
    return Design(
        name=f"{game}/arena",
        **catalogue.described(f"{game}/arena"),
        params=common.OpenGridParams,
        plan=lambda params, run: plan_arena(game, params, run),
        analyse=lambda plan, results, params, run, extra: analyse_arena(game, plan, results),
    )
