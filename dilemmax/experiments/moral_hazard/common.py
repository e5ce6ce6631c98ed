"""What the moral-hazard designs share: options, replicate copies of configs, per-replicate
outcome means, mean +- sd cells and markdown tables.

Replicates. The paper reports each number as mean +- sample standard deviation over three
outer replicates (model-run seeds, API sampling replicates or random-policy seeds), each
averaging 15 episodes per condition. Here a replicate is a copy of every condition's config
inside the same part, named ``r<i>/<condition>``: each copy gets its own episode keys (one key
per configuration), so the replicates draw independent cases and, at a sampling temperature
above zero, independent replies.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.commandline import headless_pyplot
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.option_declaration import setting
from dilemmax.errors import UsageError
from dilemmax.experiments.design import DesignParams
from dilemmax.llm.play import PlayResult

PAPER_REPLICATES = 3
PAPER_EPISODES = 15  # per replicate and condition (three episode seeds x five episodes)
CALLS_PER_SEAT = 3.0  # work, note (asked only after a query) and final: at most three per seat

# Per-episode outcomes the designs summarise (``MoralHazardEnv.episode_metrics`` names).
OUTCOMES = (
    "team_success",
    "local_reward",
    "query_rate",
    "info_transfer",
    "format_validity",
    "unsafe_choice",
    "final_accuracy",
    "score",
)


# --------------------------------------------------------------------------- options
@dataclass(frozen=True)
class SizeParams(DesignParams):
    """The sizes every moral-hazard design takes; None: the paper's."""

    replicates: int | None = setting(
        None, f"outer replicates (default {PAPER_REPLICATES}, the paper's)"
    )
    episodes: int | None = setting(
        None, f"episodes per replicate and cell (default {PAPER_EPISODES})"
    )


def sizes(params: SizeParams) -> tuple[int, int]:
    """(replicates, episodes per replicate and cell), each checked to be >= 1."""
    replicates = PAPER_REPLICATES if params.replicates is None else params.replicates
    episodes = PAPER_EPISODES if params.episodes is None else params.episodes
    if replicates < 1 or episodes < 1:
        raise UsageError(f"--replicates and --episodes must be >= 1, got {replicates}, {episodes}")
    return int(replicates), int(episodes)


def number_list(text: str | None, option: str, low: float, high: float) -> list[float] | None:
    """``"0,0.05,0.1"`` -> [0.0, 0.05, 0.1], each in [low, high]; None for None. A bad entry is a
    one-line UsageError naming the option."""
    if text is None:
        return None
    values = []
    for entry in str(text).split(","):
        entry = entry.strip()
        try:
            value = float(entry)
        except ValueError:
            raise UsageError(f"{option}: {entry!r} is not a number") from None
        if not (low <= value <= high):  # also refuses NaN
            raise UsageError(f"{option}: {value} is outside [{low}, {high}]")
        values.append(round(value, 6))
    if not values:
        raise UsageError(f"{option}: no values")
    return values


def name_list(text: str | None, option: str, known: Sequence[str]) -> list[str] | None:
    """Comma-separated names, each one of ``known``; None for None."""
    if text is None:
        return None
    names = [entry.strip() for entry in str(text).split(",") if entry.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise UsageError(f"{option}: unknown {unknown or 'empty list'}; choose from {list(known)}")
    return names


# --------------------------------------------------------------------------- envs
@functools.cache
def env_for(num_agents: int, payoff: str = "team") -> MoralHazardEnv:
    """One env per (n, payoff) for every plan: the batched harness compiles its episode
    loop per env object, so parts and designs of the same shape share one compile."""
    return MoralHazardEnv(num_agents, payoff=payoff)


# --------------------------------------------------------------------------- replicates
def replicate_configs(configs, names: Sequence[str], replicates: int):
    """(configs repeated ``replicates`` times along the leading axis, names ``r<i>/<name>``)."""
    tiled = jax.tree.map(lambda x: jnp.concatenate([x] * replicates), configs)
    return tiled, [f"r{r}/{name}" for r in range(replicates) for name in names]


def split_name(config_name: str) -> tuple[int, str]:
    """``"r2/k=0.10"`` -> (2, "k=0.10")."""
    head, _, rest = config_name.partition("/")
    return int(head[1:]), rest


def episode_rows(result: PlayResult, config_names: Sequence[str]) -> list[dict[str, Any]]:
    """One row per episode: replicate, condition name, episode ordinal and every metric (a
    number, or a list for one with an axis)."""
    rows = []
    for i, info in enumerate(result.episodes):
        replicate, condition = split_name(config_names[int(info["config_index"])])
        row = {"replicate": replicate, "condition": condition, "episode": int(info["episode"])}
        for name, values in result.metrics.items():
            row[name] = np.asarray(values[i], np.float64).tolist()  # a 0-d array: a float
        rows.append(row)
    return rows


def replicate_means(rows: Sequence[Mapping], outcomes: Sequence[str] = OUTCOMES) -> dict:
    """outcome -> [mean over the rows of each replicate] (replicates in increasing order)."""
    replicates = sorted({int(r["replicate"]) for r in rows})
    return {
        o: [float(np.mean([r[o] for r in rows if r["replicate"] == k])) for k in replicates]
        for o in outcomes
    }


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """(mean, sample standard deviation; 0 for one value)."""
    x = np.asarray(values, np.float64)
    return float(x.mean()), float(x.std(ddof=1)) if x.size > 1 else 0.0


def pct_cell(values: Sequence[float]) -> str:
    """``"97.8 ± 3.8"``: percentage mean +- sd over replicate values given as fractions."""
    mean, sd = mean_sd(values)
    return f"{100 * mean:.1f} ± {100 * sd:.1f}"


def markdown(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A markdown table with these columns (in order) and rows of cells."""
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def table_columns(table: str) -> list[str]:
    """The column names of a markdown table written by :func:`markdown` (its first line)."""
    first = table.strip().splitlines()[0]
    return [cell.strip() for cell in first.strip().strip("|").split("|")]


def model_label(result: PlayResult, agent: str = "agent_0") -> str:
    """The seat name the first episode put at ``agent`` (what a run is reported under)."""
    return str(result.episodes[0]["seats"].get(agent, "model")) if result.episodes else "model"


def pyplot():
    """matplotlib's pyplot on the Agg backend (loaded only to draw figures)."""
    plt = headless_pyplot()

    return plt
