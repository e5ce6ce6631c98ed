"""Outcomes per condition with bootstrap confidence intervals: ``evaluate(policy, configs, ...)``.

A condition set runs as one vmapped program (conditions x episodes); the intervals are
percentile bootstraps of the per-episode outcomes (:func:`dilemmax.statistics.bootstrap_rows`),
one row per condition and outcome, all in one compiled program.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import jax
import numpy as np

from dilemmax.envs.base import typed_key
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.moral_hazard.generator import ConditionSet, stack_configs
from dilemmax.envs.moral_hazard.metrics import SCALAR_OUTCOMES
from dilemmax.envs.moral_hazard.types import MoralHazardConfig
from dilemmax.envs.rollout import run_episodes
from dilemmax.statistics import bootstrap_rows


class Estimate(NamedTuple):
    """A mean over episodes and its bootstrap confidence interval."""

    mean: float
    low: float
    high: float


def _as_condition_sets(configs) -> list[ConditionSet]:
    if isinstance(configs, ConditionSet):
        return [configs]
    if isinstance(configs, Mapping):
        return [configs[n] for n in sorted(configs)]
    if isinstance(configs, MoralHazardConfig):
        if configs.utilities.ndim == 2:
            configs = stack_configs([configs])
        num = configs.utilities.shape[0]
        names = tuple(f"condition_{i}" for i in range(num))
        return [ConditionSet(names, configs, configs.utilities.shape[1])]
    if isinstance(configs, Sequence):
        return [s for item in configs for s in _as_condition_sets(item)]
    raise TypeError(f"cannot evaluate on {type(configs).__name__}")


def run_conditions(
    policy, conditions: ConditionSet, num_episodes: int, key: jax.Array
) -> dict[str, np.ndarray]:
    """Per-episode outcomes of ``policy`` on every condition: outcome -> array [C, E, ...]."""
    env = MoralHazardEnv(conditions.num_agents)
    _, metrics = run_episodes(env, policy, key, num_episodes, conditions.configs)
    return {name: np.asarray(value) for name, value in metrics.items()}


def evaluate(
    policy,
    configs,
    num_episodes: int,
    key: jax.Array,
    *,
    outcomes: Sequence[str] = SCALAR_OUTCOMES,
    num_resamples: int = 10_000,
    confidence: float = 0.95,
) -> dict[str, dict[str, Estimate]]:
    """Plays ``num_episodes`` episodes of every condition and summarises the outcomes.

    Args:
        policy: one jittable policy for every seat, or one per seat (a sequence or a dict keyed
            by agent name; it must fit every condition's number of agents).
        configs: a :class:`ConditionSet`, the dict :func:`condition_grid` returns, a list of
            those, or a (batched) :class:`MoralHazardConfig` (conditions named condition_<i>).
        num_episodes: episodes per condition (each draws its own cases when the condition has
            ``sample_cases``).
        key: PRNG key (episodes and bootstrap resamples).
        outcomes: which scalar outcomes to report (default all of ``SCALAR_OUTCOMES``).
        num_resamples, confidence: of the percentile bootstrap.

    Returns:
        condition name -> outcome -> :class:`Estimate` (mean, low, high), in condition order.
    """
    key = typed_key(key)  # legacy PRNGKey keys would not reshape after the split below
    results: dict[str, dict[str, Estimate]] = {}
    sets = _as_condition_sets(configs)
    for conditions, set_key in zip(sets, jax.random.split(key, len(sets)), strict=True):
        key_play, key_boot = jax.random.split(set_key)
        metrics = run_conditions(policy, conditions, num_episodes, key_play)
        samples = np.stack([np.asarray(metrics[o], np.float32) for o in outcomes], axis=1)
        rows = samples.reshape(-1, samples.shape[-1])  # [conditions x outcomes, episodes]
        interval = bootstrap_rows(rows, key_boot, num_resamples, confidence)
        mean, low, high = (part.reshape(samples.shape[:2]) for part in interval)
        for ci_index, name in enumerate(conditions.names):
            results[name] = {
                outcome: Estimate(
                    float(mean[ci_index, j]), float(low[ci_index, j]), float(high[ci_index, j])
                )
                for j, outcome in enumerate(outcomes)
            }
    return results


def format_table(
    results: Mapping[str, Mapping[str, Estimate]], outcomes: Sequence[str] | None = None
) -> str:
    """A markdown table of :func:`evaluate` results: mean [low, high], rates in percent."""
    first = next(iter(results.values()))
    outcomes = list(outcomes or first.keys())
    lines = [
        "| condition | " + " | ".join(outcomes) + " |",
        "| --- |" + " --- |" * len(outcomes),
    ]
    for name, row in results.items():
        cells = []
        for o in outcomes:
            e = row[o]
            scale, unit = (1.0, "") if o == "score" else (100.0, "")
            cells.append(f"{scale * e.mean:.2f} [{scale * e.low:.2f}, {scale * e.high:.2f}]{unit}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
