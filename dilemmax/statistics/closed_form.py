"""The statistics with a closed form: Student t and binomial intervals, standard errors, the
multiplicity corrections and effect sizes, isotonic fits (the rest of :mod:`dilemmax.statistics`
resamples: :mod:`dilemmax.statistics.resampling`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from scipy import stats as scipy_stats
from scipy.optimize import isotonic_regression

# Two-sided 95% Student t quantiles at the printed tables' degrees of freedom, to three decimals
# (12.706 at 1, 2.228 at 10, 2.042 at 30); beyond 30 the normal's 1.96 is within 4% of t's.
T95_DOF = (*range(1, 11), 12, 15, 20, 25, 30)
T95 = {dof: round(float(scipy_stats.t.ppf(0.975, dof)), 3) for dof in T95_DOF}


class Interval(NamedTuple):
    """An estimate with its interval (floats, numpy arrays or JAX arrays, as computed)."""

    mean: float
    low: float
    high: float


def normal_quantile(confidence: float) -> float:
    """The two-sided normal quantile of ``confidence`` (1.96 at 0.95); ValueError outside (0, 1)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    return float(scipy_stats.norm.ppf(0.5 + confidence / 2.0))


# --------------------------------------------------------------------------- parametric
def t95(dof: int) -> float:
    """The two-sided 95% Student t quantile at ``dof`` degrees of freedom (conservative between
    table entries: the next lower entry's)."""
    if dof < 1:
        return math.inf
    return 1.96 if dof > 30 else T95[max(d for d in T95 if d <= dof)]


def t_interval(values) -> Interval:
    """(mean, low, high) of a 95% Student t interval over ``values`` (float[N]); an infinite
    interval for fewer than two values."""
    values = np.asarray(values, dtype=np.float64)
    mean = float(values.mean())
    if values.size < 2:
        return Interval(mean, -math.inf, math.inf)
    half = t95(values.size - 1) * float(values.std(ddof=1)) / math.sqrt(values.size)
    return Interval(mean, mean - half, mean + half)


def standard_error(values) -> float:
    """The standard error of the mean of ``values`` (float[N]): their sample standard deviation
    over sqrt(N) (``scipy.stats.sem``); 0.0 for fewer than two values, where no spread is seen."""
    values = np.asarray(values, np.float64).reshape(-1)
    return float(scipy_stats.sem(values)) if values.size > 1 else 0.0


def _binomial(successes: float, trials: float, confidence: float):
    """``scipy.stats.binomtest`` of a count (whole numbers; a count summed as floats, 3.0, is)."""
    normal_quantile(confidence)  # checks the level
    if not (0 <= successes <= trials and all(float(x).is_integer() for x in (successes, trials))):
        raise ValueError(f"successes must be whole and in 0..trials, got {successes} of {trials}")
    return scipy_stats.binomtest(int(successes), int(trials))


def wilson_interval(
    successes: float, trials: float, confidence: float = 0.95
) -> tuple[float, float]:
    """(low, high) of the Wilson score interval for ``successes`` out of ``trials`` (NaNs for
    zero trials). Unlike the normal approximation it stays inside [0, 1] and is not empty at 0
    or ``trials`` successes (0 / 405 gives [0, 0.0094]); its ends are clamped to hold the rate
    ``successes / trials``, which a rounded formula can miss by an ulp (13 / 13 once gave
    0.9999999999999999)."""
    if trials <= 0:
        return math.nan, math.nan
    ci = _binomial(successes, trials, confidence).proportion_ci(confidence, method="wilson")
    p = successes / trials
    return min(max(0.0, float(ci.low)), p), max(min(1.0, float(ci.high)), p)


def clopper_pearson(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) two-sided interval of a binomial rate; (0, 1) for no trials."""
    if trials <= 0:
        return 0.0, 1.0
    ci = _binomial(successes, trials, level).proportion_ci(level, method="exact")
    return float(ci.low), float(ci.high)


def benjamini_hochberg(p_values: Sequence[float]) -> np.ndarray:
    """Benjamini-Hochberg q-values, in the input order (``scipy.stats.false_discovery_control``).

    q_(i) = min over j >= i of m p_(j) / j, capped at 1, for the sorted p_(1) <= ... <= p_(m). A
    NaN p-value (a test that could not be run) stays NaN and is not counted among the m tests.
    """
    p = np.asarray(p_values, np.float64).reshape(-1)
    q = np.full(p.shape, np.nan)
    run = ~np.isnan(p)
    if run.any():
        q[run] = scipy_stats.false_discovery_control(p[run])
    return q


def holm(p_values: Sequence[float]) -> np.ndarray:
    """Holm step-down adjusted p-values: max over j <= i of (m - j + 1) p_(j), capped at 1."""
    p = np.asarray(p_values, np.float64).reshape(-1)
    order = np.argsort(p, kind="stable")
    scaled = p[order] * (p.size - np.arange(p.size))
    adjusted = np.empty(p.size)
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


# --------------------------------------------------------------------------- level crossing
def isotonic(values: Sequence[float], weights: Sequence[float] | None = None) -> np.ndarray:
    """The weighted least-squares non-decreasing fit of ``values`` (pool adjacent violators,
    ``scipy.optimize.isotonic_regression``; weights must be positive)."""
    y = np.asarray(values, np.float64).reshape(-1)
    if y.size == 0:
        return y
    w = None if weights is None else np.asarray(weights, np.float64).reshape(-1)
    return isotonic_regression(y, weights=w, increasing=True).x


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
    at or above it. None when the fit starts above the level or never reaches it (the crossing
    lies outside the xs); the smallest x when the fit starts exactly at the level.
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
