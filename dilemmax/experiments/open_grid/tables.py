"""Appendix C's homogeneous-team tables, one row per model, from played episodes.

Each table is kept as sums (numerators and denominators per model), so the rows of several runs
combine exactly by adding them (:func:`merge_sums`) before the ratios are taken.

- Table 3 (OpenCleanup: what changes after the first trial), trial 1 vs the mean of trials 2-5:
  the share of answered steps in explore mode; the trial step of the team's first cleared cell
  and first eaten apple (trials where it never happened are left out of the mean); the team's
  cells cleared or lightened in the first 50 steps.
- Table 4 (OpenCleanup tool use in trials 2-5): pick-ups per agent per trial; pick-ups per
  working tool obtained; the share of working tools that re-crafted the tool the agent had just
  lost; steps spent crafting (answered steps in craft mode) per cell cleared or lightened.
- Table 5 (OpenHarvest: knowing the payoffs versus using them): payoffs known by the end of the
  last trial; the share of eaten apples taken at their best-paying stage and before it; points
  per apple; mean per-agent return per trial.

A column that cannot be computed (no trial 2, no apple eaten, no per-step events) shows "-".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from dilemmax.envs.osj.replies import explore_share
from dilemmax.experiments.open_grid.events import Episode, per_trial, recrafts
from dilemmax.llm.config import TRANSPORT_WORDS
from dilemmax.redteam.figures import markdown_table

TABLE3_HEADER = (
    "Model",
    "Explore (%) T1", "Explore (%) T2–5",
    "First clear T1", "First clear T2–5",
    "First apple T1", "First apple T2–5",
    "Cells, t < 50 T1", "Cells, t < 50 T2–5",
)  # fmt: skip
TABLE4_HEADER = ("Model", "Pick-ups", "Pick-ups / tool", "Re-crafts (%)", "Craft steps / cell")
TABLE5_HEADER = (
    "Model", "Known (%)", "Best stage (%)", "Premature (%)", "Points / apple", "Return",
)  # fmt: skip
TABLES = {
    "open_cleanup": {"table3": TABLE3_HEADER, "table4": TABLE4_HEADER},
    "open_harvest": {"table5": TABLE5_HEADER},
}


def model_label(spec: str) -> str:
    """A seat spec without the options that only say how calls travel (its server, key,
    timeouts), so one model's runs on different servers share a row."""
    head, *options = str(spec).split(",")
    kept = [o for o in options if not any(w in o.split("=")[0] for w in TRANSPORT_WORDS)]
    return ",".join([head, *kept])


def model_of(episode: Episode) -> str:
    """The row an episode of a homogeneous team belongs to: its (one) model."""
    names = sorted({model_label(s) for s in episode.seats.values()})
    return names[0] if len(names) == 1 else " + ".join(names)


def _add(sums: dict, key: str, value: float, count: float = 1.0) -> None:
    total, n = sums.get(key, (0.0, 0.0))
    sums[key] = (total + float(value), n + float(count))


def _ratio(sums: Mapping, key: str, scale: float = 1.0):
    total, n = sums.get(key, (0.0, 0.0))
    return None if n <= 0 else scale * total / n


# ----------------------------------------------------------------------------- OpenCleanup
def cleanup_sums(episode: Episode) -> dict[str, tuple[float, float]]:
    """Table 3 and 4 numerators / denominators of one episode."""
    m, sums = episode.metrics, {}
    num_trials = int(np.asarray(m["first_clear_step"]).shape[0])
    for k in range(num_trials):
        late = "T2" if k > 0 else "T1"
        modes = [mode for steps in episode.modes.values() for trial, mode in steps if trial == k]
        if modes:
            _add(sums, f"explore_{late}", explore_share(modes) * len(modes), len(modes))
        for name in ("first_clear_step", "first_apple_step"):
            step = int(np.asarray(m[name])[k])
            if step >= 0:
                _add(sums, f"{name}_{late}", step)
        _add(sums, f"early_{late}", float(np.asarray(m["early_cleaning"])[k]))
        if k > 0:
            pickups = np.asarray(m["pickups"])[k]
            _add(sums, "pickups", pickups.sum(), pickups.size)
            _add(sums, "pickups_per_tool", pickups.sum(), np.asarray(m["working_tools"])[k].sum())
            crafting = sum(1 for steps in episode.modes.values() for t, mo in steps
                           if t == k and mo == "craft")  # fmt: skip
            if episode.infos is None:
                continue
            changed = episode.infos["cleared"] + episode.infos["lightened"]
            cells = per_trial(np.asarray(changed), episode.infos, episode.valid, num_trials)[k]
            _add(sums, "craft_steps_per_cell", crafting, cells.sum())
    if episode.infos is not None:
        again, tools = recrafts(episode.infos, episode.valid, num_trials)
        _add(sums, "recrafts", again[1:].sum(), tools[1:].sum())
    return sums


def table3_row(model: str, sums: Mapping) -> list:
    cells = [model]
    for key, scale in (("explore", 100.0), ("first_clear_step", 1.0), ("first_apple_step", 1.0),
                       ("early", 1.0)):  # fmt: skip
        cells += [_ratio(sums, f"{key}_T1", scale), _ratio(sums, f"{key}_T2", scale)]
    return cells


def table4_row(model: str, sums: Mapping) -> list:
    return [
        model,
        _ratio(sums, "pickups"),
        _ratio(sums, "pickups_per_tool"),
        _ratio(sums, "recrafts", 100.0),
        _ratio(sums, "craft_steps_per_cell"),
    ]


# ----------------------------------------------------------------------------- OpenHarvest
def harvest_sums(episode: Episode) -> dict[str, tuple[float, float]]:
    """Table 5 numerators / denominators of one episode (pooled over its agents' apples)."""
    m, sums = episode.metrics, {}
    apples = np.asarray(m["apples"], np.float64)
    known = np.asarray(m["payoffs_known"], np.float64)
    _add(sums, "known", known.sum(), known.size)
    _add(sums, "best_stage", (np.asarray(m["best_stage_share"]) * apples).sum(), apples.sum())
    _add(sums, "premature", (np.asarray(m["premature_share"]) * apples).sum(), apples.sum())
    _add(sums, "points_per_apple", np.asarray(m["return"]).sum(), apples.sum())
    per_trial_return = np.asarray(m["return_per_trial"], np.float64)
    _add(sums, "return", per_trial_return.sum(), per_trial_return.size)
    return sums


def table5_row(model: str, sums: Mapping) -> list:
    return [
        model,
        _ratio(sums, "known", 100.0),
        _ratio(sums, "best_stage", 100.0),
        _ratio(sums, "premature", 100.0),
        _ratio(sums, "points_per_apple"),
        _ratio(sums, "return"),
    ]


# ----------------------------------------------------------------------------- rows and text
SUMS = {"open_cleanup": cleanup_sums, "open_harvest": harvest_sums}
ROWS = {"table3": table3_row, "table4": table4_row, "table5": table5_row}


def merge_sums(many: Iterable[Mapping[str, Sequence[float]]]) -> dict[str, tuple[float, float]]:
    """Adds several sums (of episodes, or of runs' results.json rows) key by key."""
    out: dict[str, tuple[float, float]] = {}
    for sums in many:
        for key, (total, n) in sums.items():
            _add(out, key, total, n)
    return out


def model_sums(game: str, episodes: Sequence[Episode]) -> dict[str, dict]:
    """model -> the game's table sums over its episodes (models in first-seen order)."""
    per_model: dict[str, list] = {}
    for episode in episodes:
        per_model.setdefault(model_of(episode), []).append(SUMS[game](episode))
    return {model: merge_sums(sums) for model, sums in per_model.items()}


def _cell(value, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


DIGITS = {"table3": (0, 0, 0, 0, 0, 0, 0, 0), "table4": (1, 1, 0, 2), "table5": (0, 0, 0, 2, 1)}


def table_rows(table: str, sums_by_model: Mapping[str, Mapping]) -> list[list]:
    """One row per model: the model, then the table's values (None where not computable)."""
    return [ROWS[table](model, sums) for model, sums in sums_by_model.items()]


def table_markdown(game: str, table: str, sums_by_model: Mapping[str, Mapping]) -> str:
    """The table as markdown, with the paper's columns and its precision."""
    rows = []
    for row in table_rows(table, sums_by_model):
        rows.append([row[0]] + [_cell(v, d) for v, d in zip(row[1:], DIGITS[table], strict=True)])
    return markdown_table(TABLES[game][table], rows)


def tables_of(game: str, sums_by_model: Mapping[str, Mapping]) -> dict[str, str]:
    """Every Appendix C table of ``game`` as markdown."""
    return {table: table_markdown(game, table, sums_by_model) for table in TABLES[game]}


def jsonable_sums(sums_by_model: Mapping[str, Mapping]) -> dict:
    return {
        m: {k: [float(a), float(b)] for k, (a, b) in s.items()} for m, s in sums_by_model.items()
    }
