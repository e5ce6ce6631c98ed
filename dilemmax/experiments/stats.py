"""Small-sample statistics the papers' tables use, in float64 numpy (reproducible, no JAX).

- :func:`wilson_interval`: the Wilson score interval of a binomial proportion (the moral-hazard
  isolation bars);
- :func:`bootstrap_ci`: percentile bootstrap of a mean, Monte Carlo with a seeded generator
  (paired contrasts: resample the matched pairs' differences);
- :func:`exact_bootstrap`: the same bootstrap with every one of the n^n resamples counted, via
  the C(2n - 1, n) distinct multisets and their multinomial weights (model-level diagnostics over
  a handful of model pairs, where Monte Carlo noise would be visible);
- :func:`sign_flip_p`: the exact two-sided paired sign-flip p-value (all 2^n sign assignments);
- :func:`benjamini_hochberg` and :func:`holm`: multiplicity-adjusted p-values;
- :func:`paired_dz`: the standardised mean paired difference;
- :func:`isotonic` and :func:`level_crossing`: where a noisy, rising rate first reaches a level
  (the empirical 50% query boundary).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from statistics import NormalDist

import jax
import numpy as np

from dilemmax.envs.metrics import paired_sign_flip_test

NUM_RESAMPLES = 10_000
EXACT_BOOTSTRAP_MAX = 10  # C(19, 10) = 92,378 multisets; above it the bootstrap is Monte Carlo


def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def wilson_interval(
    successes: float, trials: float, confidence: float = 0.95
) -> tuple[float, float]:
    """(low, high) of the Wilson score interval for ``successes`` out of ``trials``.

    Unlike the normal-approximation interval it stays inside [0, 1] and is not empty at 0 or
    ``trials`` successes (0 / 405 gives [0, 0.0094]). It always holds the estimate
    ``successes / trials``: at 0 and ``trials`` successes the rounded formula can miss it by one
    ulp (13 / 13 gave 0.9999999999999999), so the ends are clamped to it. NaNs for zero trials.
    """
    if trials <= 0:
        return math.nan, math.nan
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must lie in 0..trials, got {successes} of {trials}")
    z = _z(confidence)
    p = successes / trials
    denominator = 1.0 + z * z / trials
    center = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return min(max(0.0, center - half), p), max(min(1.0, center + half), p)


def bootstrap_ci(
    values: Sequence[float],
    confidence: float = 0.95,
    num_resamples: int = NUM_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float, float]:
    """(mean, low, high): percentile bootstrap of the mean of ``values`` (Monte Carlo).

    Each resample draws len(values) values with replacement; the interval is the
    (1 -+ confidence) / 2 quantiles of the resampled means (numpy's linear interpolation).
    NaNs for no values.
    """
    x = np.asarray(values, np.float64).reshape(-1)
    if x.size == 0:
        return math.nan, math.nan, math.nan
    _z(confidence)  # checks the level
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(num_resamples, x.size))].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    mean = float(x.mean())
    # The resampled means are summed in another order than the mean: with every value equal
    # they can differ from it by an ulp, and the interval must still hold its estimate.
    return mean, min(float(low), mean), max(float(high), mean)


def _resample_distribution(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(means, probabilities) of the bootstrap mean over all n^n equally likely resamples."""
    n = x.size
    log_n_factorial = math.lgamma(n + 1)
    means, weights = [], []
    for multiset in itertools.combinations_with_replacement(range(n), n):
        counts = np.bincount(np.asarray(multiset), minlength=n)
        log_weight = log_n_factorial - sum(math.lgamma(c + 1) for c in counts) - n * math.log(n)
        means.append(float(counts @ x) / n)
        weights.append(math.exp(log_weight))
    return np.asarray(means), np.asarray(weights)


def exact_bootstrap(values: Sequence[float], confidence: float = 0.95) -> dict[str, float | bool]:
    """The percentile bootstrap of the mean with every resample counted (n <= 10).

    The n^n ordered resamples are grouped into multisets; a multiset with counts c_1..c_n has
    probability n! / (c_1! ... c_n! n^n). ``low`` / ``high`` are the inverse-CDF quantiles of
    that distribution (the smallest resampled mean whose cumulative probability reaches
    (1 -+ confidence) / 2) and ``p_positive`` the probability of a resampled mean above zero.
    Above ``EXACT_BOOTSTRAP_MAX`` values the same quantities come from 10,000 Monte Carlo
    resamples (``exact`` False).

    Returns:
        mean, low, high, p_positive (floats; NaN for no values) and exact (bool).
    """
    x = np.asarray(values, np.float64).reshape(-1)
    if x.size == 0:
        nan = math.nan
        return {"mean": nan, "low": nan, "high": nan, "p_positive": nan, "exact": True}
    _z(confidence)  # checks the level
    tail = (1.0 - confidence) / 2.0
    if x.size <= EXACT_BOOTSTRAP_MAX:
        means, weights = _resample_distribution(x)
        exact = True
    else:
        rng = np.random.default_rng(0)
        means = x[rng.integers(0, x.size, size=(NUM_RESAMPLES, x.size))].mean(axis=1)
        weights = np.full(NUM_RESAMPLES, 1.0 / NUM_RESAMPLES)
        exact = False
    order = np.argsort(means, kind="stable")
    means, cumulative = means[order], np.cumsum(weights[order])
    eps = 1e-12  # the weights' float sum can miss a quantile by a rounding error

    def quantile(level: float) -> float:
        return float(means[min(np.searchsorted(cumulative, level - eps), means.size - 1)])

    scale = max(1.0, float(np.max(np.abs(x))))
    positive = float(np.sum(weights[order][means > 1e-12 * scale]))
    mean = float(x.mean())
    return {  # the interval holds its estimate (see bootstrap_ci)
        "mean": mean,
        "low": min(quantile(tail), mean),
        "high": max(quantile(1.0 - tail), mean),
        "p_positive": positive,
        "exact": exact,
    }


def sign_flip_p(differences: Sequence[float]) -> float:
    """Exact two-sided paired sign-flip p-value of a zero mean (all 2^n sign assignments).

    The share of assignments whose |sum| is at least the observed one (ties counted), so with n
    pairs the smallest possible value is 2 / 2^n (0.0156 for seven pairs, all of one sign).
    1 for no differences. At most 20 differences (2^20 assignments).
    """
    d = np.asarray(differences, np.float64).reshape(-1)
    if d.size == 0:
        return 1.0
    if d.size > 20:
        raise ValueError(f"the exact sign-flip test enumerates 2^n assignments; n = {d.size} > 20")
    # The enumeration is the env library's (float32 with a tie tolerance); p is a multiple of
    # 2^-n, which float32 holds exactly.
    return float(paired_sign_flip_test(jax.random.key(0), d, exact=True))


def benjamini_hochberg(p_values: Sequence[float]) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (q-values), in the input order.

    q_(i) = min over j >= i of m p_(j) / j, capped at 1, for the sorted p_(1) <= ... <= p_(m).
    """
    p = np.asarray(p_values, np.float64).reshape(-1)
    m = p.size
    if m == 0:
        return p
    order = np.argsort(p, kind="stable")
    scaled = p[order] * m / np.arange(1, m + 1)
    q_sorted = np.minimum.accumulate(scaled[::-1])[::-1]
    q = np.empty(m)
    q[order] = np.minimum(q_sorted, 1.0)
    return q


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm step-down adjusted p-values: max over j <= i of (m - j + 1) p_(j), capped at 1."""
    p = np.asarray(p_values, np.float64).reshape(-1)
    m = p.size
    if m == 0:
        return p
    order = np.argsort(p, kind="stable")
    scaled = p[order] * (m - np.arange(m))
    adjusted = np.empty(m)
    adjusted[order] = np.minimum(np.maximum.accumulate(scaled), 1.0)
    return adjusted


def paired_dz(differences: Sequence[float]) -> float:
    """Mean paired difference over its sample standard deviation (NaN when it is undefined)."""
    d = np.asarray(differences, np.float64).reshape(-1)
    if d.size < 2:
        return math.nan
    sd = float(np.std(d, ddof=1))
    if sd == 0.0:
        return 0.0 if float(np.mean(d)) == 0.0 else math.copysign(math.inf, float(np.mean(d)))
    return float(np.mean(d)) / sd


def isotonic(values: Sequence[float], weights: Sequence[float] | None = None) -> np.ndarray:
    """The weighted least-squares non-decreasing fit of ``values`` (pool adjacent violators)."""
    y = np.asarray(values, np.float64).reshape(-1)
    w = np.ones_like(y) if weights is None else np.asarray(weights, np.float64).reshape(-1)
    if y.size == 0:
        return y
    blocks: list[list[float]] = []  # [mean, weight, length]
    for value, weight in zip(y, w, strict=True):
        blocks.append([value, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            mean_b, weight_b, len_b = blocks.pop()
            mean_a, weight_a, len_a = blocks.pop()
            total = weight_a + weight_b
            mean = (mean_a * weight_a + mean_b * weight_b) / total if total > 0 else mean_b
            blocks.append([mean, total, len_a + len_b])
    return np.concatenate([np.full(int(length), mean) for mean, _, length in blocks])


def level_crossing(
    xs: Sequence[float],
    rates: Sequence[float],
    weights: Sequence[float] | None = None,
    level: float = 0.5,
) -> float | None:
    """The x where a rising rate first reaches ``level``, or None when it never crosses it.

    The rates (at increasing ``xs``) are first made non-decreasing by :func:`isotonic` (weighted
    by ``weights``, e.g. decisions per cell), so one noisy cell cannot create a second crossing;
    the crossing is then interpolated linearly between the last x below the level and the first
    at or above it. None when the fit starts above the level (the crossing is below the smallest
    x) or never reaches it (above the largest x); the smallest x when the fit starts exactly at
    the level.
    """
    x = np.asarray(xs, np.float64).reshape(-1)
    if x.size == 0:
        return None
    order = np.argsort(x, kind="stable")
    x = x[order]
    w = None if weights is None else np.asarray(weights, np.float64).reshape(-1)[order]
    fit = isotonic(np.asarray(rates, np.float64).reshape(-1)[order], w)
    at_or_above = np.flatnonzero(fit >= level - 1e-12)
    if at_or_above.size == 0:
        return None
    j = int(at_or_above[0])
    if j == 0:
        return float(x[0]) if abs(fit[0] - level) <= 1e-12 else None
    x0, x1, f0, f1 = x[j - 1], x[j], fit[j - 1], fit[j]
    return float(x0 + (level - f0) / (f1 - f0) * (x1 - x0))
