"""Metric helpers shared by the games' ``episode_metrics`` and by evaluations, all in JAX.

Everything here is jittable and vmappable (over episodes, configurations or seeds). Inputs with
padding take a ``mask`` / ``valid`` array; masked entries never influence a result, whatever
values they hold.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np


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


# --------------------------------------------------------------------------- uncertainty
def bootstrap_ci(
    key: jax.Array,
    samples: jax.Array,
    num_resamples: int = 10_000,
    confidence: float = 0.95,
    mask: jax.Array | None = None,
    batch_size: int = 1_000,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Percentile bootstrap confidence interval of the mean.

    Each resample draws ``n`` of the ``n`` valid samples with replacement; the interval is the
    ``(1 - confidence) / 2`` and ``(1 + confidence) / 2`` quantiles (linear interpolation, as
    ``numpy.quantile``) of the resampled means.

    Args:
        key: PRNG key.
        samples: float32[N].
        num_resamples: static number of bootstrap resamples.
        confidence: static level in (0, 1).
        mask: optional bool[N]; only True entries are samples (n = their count).
        batch_size: static; resamples are computed this many at a time to bound memory.

    Returns:
        ``(mean, low, high)``, float32[] each, ``low <= mean <= high``; NaN when there is no
        valid sample.
    """
    x = jnp.asarray(samples, jnp.float32)
    size = x.shape[0]
    valid = jnp.ones(size, bool) if mask is None else jnp.asarray(mask, bool)
    # Valid samples first, so a resample draws indices in [0, n).
    order = jnp.argsort(~valid, stable=True)
    x = jnp.where(valid, x, 0.0)[order]
    n = jnp.sum(valid).astype(jnp.int32)
    safe_n = jnp.maximum(n, 1)
    used = jnp.arange(size) < n

    def resampled_mean(k):
        idx = jax.random.randint(k, (size,), 0, safe_n)
        return jnp.sum(jnp.where(used, x[idx], 0.0)) / safe_n

    keys = jax.random.split(key, num_resamples)
    means = jax.lax.map(resampled_mean, keys, batch_size=min(batch_size, num_resamples))
    alpha = (1.0 - confidence) / 2.0
    low, high = jnp.quantile(means, jnp.array([alpha, 1.0 - alpha]))
    mean = jnp.sum(x) / safe_n
    # The interval holds its estimate: the resampled means are summed in another order and
    # can miss an all-equal mean by an ulp.
    low, high = jnp.minimum(low, mean), jnp.maximum(high, mean)
    nan = jnp.float32(jnp.nan)
    empty = n == 0
    return jnp.where(empty, nan, mean), jnp.where(empty, nan, low), jnp.where(empty, nan, high)


def _all_signs(size: int) -> np.ndarray:
    """float32[2**size, size]: every vector of +-1 signs."""
    return np.array(list(itertools.product((1.0, -1.0), repeat=size)), np.float32).reshape(
        2**size, size
    )


def paired_sign_flip_test(
    key: jax.Array,
    differences: jax.Array,
    num_permutations: int = 10_000,
    mask: jax.Array | None = None,
    exact: bool | None = None,
) -> jax.Array:
    """Two-sided paired permutation (sign-flip) test of a zero mean difference.

    Under the null each paired difference is as likely to carry either sign. The statistic is
    ``|sum_i d_i|``; the p-value is the share of sign assignments whose statistic is at least the
    observed one.

    - Exact: all ``2**N`` assignments are enumerated (the default when ``2**N`` does not exceed
      ``num_permutations``); the p-value is exact.
    - Monte Carlo: ``num_permutations`` random assignments, and ``p = (1 + hits) / (1 + R)``, which
      counts the observed assignment and never returns 0 (a valid p-value).

    Args:
        key: PRNG key (unused by the exact test).
        differences: float32[N], e.g. per-seed return of method A minus method B.
        num_permutations: static number of random assignments.
        mask: optional bool[N]; masked entries are treated as absent.
        exact: static; None picks exact enumeration when it is no larger than the Monte Carlo run.

    Returns:
        float32[], the p-value in (0, 1]; 1 when every difference is zero.
    """
    d = jnp.asarray(differences, jnp.float32)
    size = d.shape[0]
    d = jnp.where(_weights(d, mask) > 0, d, 0.0)  # a zero is unchanged by a sign flip
    observed = jnp.abs(jnp.sum(d))
    # Float sums of the same multiset in another order can differ in the last bits: count ties.
    tolerance = 1e-5 * jnp.sum(jnp.abs(d))
    if exact is None:
        exact = size <= 20 and 2**size <= num_permutations
    if exact:
        stats = jnp.abs(jnp.asarray(_all_signs(size)) @ d)
        return jnp.mean((stats >= observed - tolerance).astype(jnp.float32))
    signs = jax.random.rademacher(key, (num_permutations, size), dtype=jnp.float32)
    hits = jnp.sum(jnp.abs(signs @ d) >= observed - tolerance)
    return (1.0 + hits) / (1.0 + num_permutations)


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
