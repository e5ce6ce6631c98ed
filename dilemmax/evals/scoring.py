"""The scorer: a sample's episode metrics (``env.episode_metrics``, the numbers ``dilemmax play``
reports) as one Inspect score, aggregated over samples with Inspect's mean and standard error.

A scalar metric (``team_success``, ``fatality``, ``targeted_elimination``) is one key. A metric
with one axis (per agent, per trial, per rank: the axes the game declares, ``env.metric_axes``)
gives its mean under its own name and each entry under a name that says what it indexes:
``return[agent_0]``, ``gini_per_trial[trial_1]``, ``deaths_by_rank[rank_0]``. A metric per trial
and agent (``apples_per_trial``) gives its mean, and every metric's full value stays in the
score's metadata (with its axes, ``metric_axes``). An undefined value (NaN: an
information-transfer rate of an episode without a query) is left out of that key's aggregate, as
Inspect does with NaN. Beside the game's metrics: the episode's ``steps``, its ``model_calls``
and the share of its action replies the parser read as valid (``model_valid_replies``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from inspect_ai.scorer import Score, Scorer, Target, mean, scorer, stderr
from inspect_ai.solver import TaskState

from dilemmax.envs.metrics import axes_of, entry_names
from dilemmax.evals.solver import STORE_KEY


def score_values(record: Mapping[str, Any]) -> dict[str, float]:
    """The score's keys from an episode record (:func:`dilemmax.evals.solver.episode_record`:
    the metrics, their declared axes and the env's agents)."""
    values: dict[str, float] = {}
    for name, value in record["metrics"].items():
        array = np.asarray(value, np.float64)
        axes = axes_of(record["metric_axes"], name, array.shape)
        values[name] = _mean(array)
        if len(axes) == 1:
            entries = entry_names(name, axes, array.shape, record.get("agents"))
            values.update({label: float(array[index]) for index, label in entries.items()})
    counts = record.get("call_counts", {}).values()
    acts = sum(c["act_calls"] for c in counts)
    values["steps"] = float(record["steps"])
    values["model_calls"] = float(sum(c["calls"] for c in counts))
    values["model_valid_replies"] = sum(c["valid"] for c in counts) / acts if acts else math.nan
    return values


def _mean(array: np.ndarray) -> float:
    """Mean over the defined (non-NaN) entries; NaN when none is defined."""
    defined = array[~np.isnan(array)]
    return float(defined.mean()) if defined.size else math.nan


@scorer(metrics={"*": [mean(), stderr()]}, name="episode_metrics")
def episode_metrics() -> Scorer:
    """The game's metrics of the sample's episode (every key with mean and stderr)."""

    async def score(state: TaskState, target: Target) -> Score:
        record = state.store.get(STORE_KEY)
        if record is None:  # the solver did not play this sample
            return Score(value=math.nan, explanation="no episode was played")
        values = score_values(record)
        shown = [k for k in values if "[" not in k][:8]
        explanation = ", ".join(f"{k}={values[k]:.4g}" for k in shown)
        return Score(value=values, explanation=explanation, metadata=dict(record))

    return score
