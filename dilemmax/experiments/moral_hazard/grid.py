"""``moral_hazard/grid``: the 15 one-at-a-time conditions, the paper's Table 2 row and Figure 4.

The model plays every seat of every condition of :func:`condition_grid` (as ``dilemmax play
--grid``), three replicates x 15 episodes per condition by default; the random valid-action
control plays the same conditions and replicates (no model calls). Table 2's row for the model
and the random control's row give team, local, query, info and valid as percentage mean +- sd
over the replicates, each replicate's value being the mean over its episodes of every condition
(the paper's mean over its 45 condition x seed summaries, which hold equal numbers of episodes).
Runs of several models (and methods: base, SFT, ...) combine into Tables 2 and 5 with
:func:`dilemmax.experiments.moral_hazard.tables.combine`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import jax
import numpy as np

from dilemmax.envs.moral_hazard.generator import condition_grid
from dilemmax.envs.option_declaration import setting
from dilemmax.experiments import catalogue
from dilemmax.experiments.design import Design, Part, Plan, Report, SessionOptions
from dilemmax.experiments.moral_hazard import common
from dilemmax.experiments.moral_hazard.tables import (
    TABLE2_COLUMNS,
    captioned,
    combine,
    draw_figure4,
    table2_caption,
    table2_row,
)
from dilemmax.llm.play import PlayResult

RANDOM_SEAT = "scripted:random_control"
CONDITION_COLUMNS = ("Condition", "Team", "Local", "Query", "Info", "Unsafe", "Valid", "Final")
_CONDITION_OUTCOMES = (
    "team_success",
    "local_reward",
    "query_rate",
    "info_transfer",
    "unsafe_choice",
    "format_validity",
    "final_accuracy",
)


def condition_names() -> list[str]:
    """The 15 conditions' names, in the grid's order (``k=0.10``, ``w_T=0.50``, ``n=3``, ...)."""
    return [name for conditions in condition_grid().values() for name in conditions.names]


@dataclass(frozen=True)
class GridParams(common.SizeParams):
    """``moral_hazard/grid``'s parameters (the paper's sizes by default)."""

    conditions: str | None = setting(
        None,
        "comma-separated subset of the 15 conditions (k=0.10, w_T=0.50, n=3, "
        "provenance=visible, ...)",
        list=True,
    )
    no_random: bool = setting(False, "leave out the random control")
    model_label: str | None = setting(None, "the model's name in the tables (default its seat)")
    method: str = setting(
        "Base", "what this run is (Base, SFT, RLOO, SFT+RLOO, GEPA, ...) for Table 5"
    )


def plan(params: GridParams, run: SessionOptions) -> Plan:
    replicates, episodes = common.sizes(params)
    keep = common.name_list(params.conditions, "--conditions", condition_names())
    parts = []
    for n, conditions in condition_grid().items():
        chosen = [i for i, name in enumerate(conditions.names) if keep is None or name in keep]
        if not chosen:
            continue
        configs = jax.tree.map(lambda x, i=np.asarray(chosen): x[i], conditions.configs)
        names = [conditions.names[i] for i in chosen]
        tiled, config_names = common.replicate_configs(configs, names, replicates)
        env = common.env_for(n)
        parts.append(
            Part(
                f"n={n}",
                env,
                tiled,
                config_names,
                episodes=episodes,
                calls_per_episode=common.CALLS_PER_SEAT * n,
            )
        )
        if not params.no_random:
            seats = {agent: RANDOM_SEAT for agent in env.agents}
            parts.append(Part(f"random/n={n}", env, tiled, config_names, seats, episodes))
    context = {"replicates": replicates, "episodes": episodes, "conditions": keep}
    return Plan(parts, context)


def _is_random(part: Part) -> bool:
    return part.name.startswith("random/")


def _rows(plan_: Plan, results: Sequence[PlayResult], random: bool) -> list[dict]:
    rows = []
    for part, result in zip(plan_.parts, results, strict=True):
        if _is_random(part) == random:
            rows += common.episode_rows(result, part.config_names)
    return rows


def summary(rows: Sequence[Mapping]) -> dict:
    """outcome -> {mean, sd, replicates} over the replicates' means of ``rows``."""
    out = {}
    for outcome, values in common.replicate_means(rows).items():
        mean, sd = common.mean_sd(values)
        out[outcome] = {"mean": mean, "sd": sd, "replicates": values}
    return out


def _per_condition(rows: Sequence[Mapping]) -> dict:
    names = list(dict.fromkeys(r["condition"] for r in rows))
    return {name: summary([r for r in rows if r["condition"] == name]) for name in names}


def analyse(
    plan_: Plan, results: Sequence[PlayResult], params: GridParams, run: SessionOptions, extra: dict
) -> Report:
    model_rows = _rows(plan_, results, random=False)
    random_rows = _rows(plan_, results, random=True)
    model_results = [r for p, r in zip(plan_.parts, results, strict=True) if not _is_random(p)]
    seat = common.model_label(model_results[0]) if model_results else "model"
    label = params.model_label or seat
    payload = {
        "design": "moral_hazard/grid",
        "model": label,
        "method": params.method or "Base",
        "seat": seat,
        "replicates": plan_.context["replicates"],
        "episodes_per_condition": plan_.context["episodes"],
        "episodes": len(model_rows),
        "outcomes": summary(model_rows),
        "conditions": _per_condition(model_rows),
        "random": summary(random_rows) if random_rows else None,
    }
    return Report(payload, _tables(payload), {"figure4": lambda path: _figure(payload, path)})


def _tables(payload: Mapping) -> dict[str, str]:
    rows = [table2_row(payload["model"], payload["outcomes"])]
    if payload["random"]:
        rows.append(table2_row("Random", payload["random"]))
    per_condition = [
        [name] + [common.pct_cell(out[o]["replicates"]) for o in _CONDITION_OUTCOMES]
        for name, out in payload["conditions"].items()
    ]
    return {
        "table2": captioned(
            common.markdown(TABLE2_COLUMNS, rows), table2_caption([len(payload["conditions"])])
        ),
        "conditions": common.markdown(CONDITION_COLUMNS, per_condition),
    }


def _figure(payload: Mapping, path: str) -> None:
    draw_figure4({payload["model"]: payload["outcomes"]}, payload["random"], path)


DESIGN = Design(
    name="moral_hazard/grid",
    **catalogue.described("moral_hazard/grid"),
    params=GridParams,
    plan=plan,
    analyse=analyse,
    combine=combine,
)
