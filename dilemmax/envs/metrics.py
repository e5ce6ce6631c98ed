"""Metric helpers shared by the games' ``episode_metrics`` and by evaluations, all in JAX.

Everything here is jittable and vmappable (over episodes, configurations or seeds). Inputs with
padding take a ``mask`` / ``valid`` array; masked entries never influence a result, whatever
values they hold. Intervals and tests over many episodes or runs are :mod:`dilemmax.statistics`.

It is also the one home of what a metric's axes mean. Every game declares, beside its
``episode_metrics``, the axes of each metric it returns (``METRIC_AXES``, the env's
``metric_axes``): ``SCALAR``, ``PER_AGENT``, ``PER_TRIAL``, ``PER_TRIAL_AGENT`` and the few
others below. Every report (play's results, Inspect scores, the replay page, the experiments)
reads a metric's axes from that declaration, never from its shape: a per-trial float32[K] and a
per-agent float32[A] look alike whenever K == A.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp

from dilemmax.errors import UsageError


def _weights(values: jax.Array, mask: jax.Array | None) -> jax.Array:
    if mask is None:
        return jnp.ones(values.shape, jnp.float32)
    return jnp.asarray(mask, bool).astype(jnp.float32)


# --------------------------------------------------------------------------- inequality
def gini(values: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """Gini coefficient: mean absolute difference over all ordered pairs / (2 * mean).

    ``G = sum_ij |x_i - x_j| / (2 n sum_i |x_i|)``. For non-negative values this is the usual
    Gini (0 when all equal, ``(n - 1) / n`` when one holds everything). Convention for negative
    values: the denominator uses ``|x_i|``, which keeps G in [0, 1] and leaves it 0 for equal
    values; returns in these games are non-negative, where the convention does not matter.
    All-zero (or empty) input gives 0.

    Args:
        values: float32[N].
        mask: optional bool[N]; only True entries count.

    Returns:
        float32[].
    """
    x = jnp.asarray(values, jnp.float32)
    w = _weights(x, mask)
    x = jnp.where(w > 0, x, 0.0)  # masked entries may hold anything, even inf
    pair_diffs = jnp.abs(x[:, None] - x[None, :]) * w[:, None] * w[None, :]
    denom = 2.0 * jnp.sum(w) * jnp.sum(jnp.abs(x))
    return jnp.where(denom > 0, jnp.sum(pair_diffs) / jnp.where(denom > 0, denom, 1.0), 0.0)


def effective_number(shares: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """Effective number of contributors, ``1 / sum_i s_i^2`` with ``s_i = x_i / sum_j x_j``.

    ``shares`` may be shares or raw non-negative amounts (tiles cleaned per agent): they are
    normalised here, so both give the same number. It runs from 1 (one agent did everything) to
    n (all did equally). Convention: 0 when the total is zero (nobody contributed).

    Args:
        shares: float32[N], non-negative.
        mask: optional bool[N].

    Returns:
        float32[].
    """
    x = jnp.asarray(shares, jnp.float32)
    x = jnp.where(_weights(x, mask) > 0, x, 0.0)
    total = jnp.sum(x)
    sum_sq = jnp.sum(x * x)
    ok = (total > 0) & (sum_sq > 0)
    return jnp.where(ok, total * total / jnp.where(ok, sum_sq, 1.0), 0.0)


# --------------------------------------------------------------------------- episode helpers
def trial_index(trial_done: jax.Array) -> jax.Array:
    """int32[T]: the trial each step belongs to, from ``infos["trial_done"]`` (bool[T]).

    The step that ends a trial belongs to that trial; the next step starts the next one.
    """
    done = jnp.asarray(trial_done, jnp.int32)
    return jnp.cumsum(done) - done


def per_trial_sum(
    values: jax.Array, trial_done: jax.Array, valid: jax.Array, num_trials: int
) -> jax.Array:
    """Sums of ``values`` within each trial, padding ignored.

    Args:
        values: [T, ...] numbers (e.g. rewards stacked over agents, float32[T, A]).
        trial_done: bool[T].
        valid: bool[T], False on padding after the episode's end.
        num_trials: static number of trials.

    Returns:
        [num_trials, ...] float32 (int values are summed as float32).
    """
    values = jnp.asarray(values, jnp.float32)
    keep = jnp.asarray(valid, bool).reshape((-1,) + (1,) * (values.ndim - 1))
    values = jnp.where(keep, values, 0.0)
    segments = jnp.clip(trial_index(trial_done), 0, num_trials - 1)
    return jax.ops.segment_sum(values, segments, num_segments=num_trials)


def first_step(flags: jax.Array, valid: jax.Array | None = None) -> jax.Array:
    """int32[]: the first index where ``flags`` (bool[T]) is True (among valid steps), else -1."""
    flags = jnp.asarray(flags, bool)
    if valid is not None:
        flags = flags & jnp.asarray(valid, bool)
    return jnp.where(jnp.any(flags), jnp.argmax(flags), -1).astype(jnp.int32)


def last_step(flags: jax.Array, valid: jax.Array | None = None) -> jax.Array:
    """int32[]: the last index where ``flags`` (bool[T]) is True (among valid steps), else -1."""
    flags = jnp.asarray(flags, bool)
    if valid is not None:
        flags = flags & jnp.asarray(valid, bool)
    size = flags.shape[0]
    return jnp.where(jnp.any(flags), size - 1 - jnp.argmax(flags[::-1]), -1).astype(jnp.int32)


def safe_divide(numerator: jax.Array, denominator: jax.Array, default: float = 0.0) -> jax.Array:
    """``numerator / denominator`` elementwise, ``default`` where the denominator is zero."""
    numerator = jnp.asarray(numerator, jnp.float32)
    denominator = jnp.asarray(denominator, jnp.float32)
    nonzero = denominator != 0
    return jnp.where(nonzero, numerator / jnp.where(nonzero, denominator, 1.0), default)


# --------------------------------------------------------------------------- axes
AGENT = "agent"  # the env's agents, in ``env.agents`` order
TRIAL = "trial"  # the episode's trials, first to last
RANK = "rank"  # the agents ordered by starting wealth, 0 the poorest (consequence)
BACKGROUND = "background"  # a scenario's background seats, in seat order

Axes = tuple[str, ...]
SCALAR: Axes = ()
PER_AGENT: Axes = (AGENT,)
PER_TRIAL: Axes = (TRIAL,)
PER_TRIAL_AGENT: Axes = (TRIAL, AGENT)
PER_RANK: Axes = (RANK,)
PER_BACKGROUND: Axes = (BACKGROUND,)
AXES = (SCALAR, PER_AGENT, PER_TRIAL, PER_TRIAL_AGENT, PER_RANK, PER_BACKGROUND)

# The metrics of :meth:`dilemmax.envs.base.MultiAgentEnv.episode_metrics`' default.
BASE_METRIC_AXES: Mapping[str, Axes] = {"return": PER_AGENT, "length": SCALAR}


class MetricAxesError(UsageError, ValueError):
    """A metric the env does not declare, or whose value does not have its declared axes."""


def axes_of(declaration: Mapping[str, Axes], name: str, shape: Sequence[int] | None = None) -> Axes:
    """The declared axes of metric ``name``; with ``shape`` (one episode's value), checked to
    have one dimension per axis.

    Raises:
        MetricAxesError: ``name`` is not declared, or ``shape`` has another number of axes.
    """
    axes = declaration.get(name)
    if axes is None:
        raise MetricAxesError(
            f"metric {name!r} declares no axes (add it to its game's METRIC_AXES, the env's "
            "metric_axes)"
        )
    if shape is not None and len(shape) != len(axes):
        raise MetricAxesError(
            f"metric {name!r} is declared {axes_text(axes)} but has shape {tuple(shape)}"
        )
    return tuple(axes)


def axes_text(axes: Axes) -> str:
    """``"scalar"``, ``"per trial"``, ``"per trial and agent"``."""
    return "per " + " and ".join(axes) if axes else "scalar"


def entry_label(axis: str, index: int) -> str:
    """The name of entry ``index`` along ``axis``: ``trial_1`` for the first trial (trials
    count from 1, as the pages and prompts show them), ``agent_0``, ``rank_0``,
    ``background_0`` (counted from 0, as agent ids are)."""
    return f"{axis}_{index + 1}" if axis == TRIAL else f"{axis}_{index}"


def entry_names(
    name: str, axes: Axes, shape: Sequence[int], agents: Sequence[str] | None = None
) -> dict[tuple[int, ...], str]:
    """index -> the name one episode's entry is reported under, for a metric of ``axes`` and
    ``shape``: ``gini`` (scalar), ``gini[trial_1]``, ``apples_per_trial[trial_1][agent_0]``
    (with ``agents``, the agent axis is named by them: the env's agent names)."""

    def label(axis: str, i: int) -> str:
        return agents[i] if axis == AGENT and agents is not None else entry_label(axis, i)

    return {
        index: name + "".join(f"[{label(a, i)}]" for a, i in zip(axes, index, strict=True))
        for index in itertools.product(*(range(int(n)) for n in shape))
    }
