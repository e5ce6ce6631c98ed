"""Intervals and tests over many episodes, runs, contexts or models: the one home every layer
uses (the games' metrics, evaluations, play results, red-teaming, scenarios, the papers' tables).

Randomness is named by the ``rng`` argument, and it decides where a function runs:

- a JAX PRNG key: in JAX (float32, jittable and vmappable; one row of samples, vmap for more;
  ``mask`` marks the valid entries);
- a seed (int) or a ``numpy.random.Generator``: in float64 numpy over the last axis of
  ``values`` [..., N], every leading row on the same draws (paired), NaNs dropped. A Generator
  is advanced, so the calls sharing one draw one stream.

Intervals (every one holds its estimate: ``low <= estimate <= high``, even where every value is
equal and the resampled means differ from the mean by an ulp):

- :func:`bootstrap_ci`: percentile bootstrap of a mean (Monte Carlo), as :class:`Interval`;
- :func:`exact_bootstrap`: the same with every one of the n^n resamples counted (n <= 10);
- :func:`cluster_share_ci`: shares of labelled items with a bootstrap over their clusters;
- :func:`t_interval`: the 95% Student t interval of a mean; :func:`standard_error` of a mean;
- :func:`wilson_interval` and :func:`clopper_pearson`: a binomial rate's (low, high).

Tests: :func:`sign_flip_test` (paired, two-sided; exact or Monte Carlo),
:func:`population_rule_test` (a population x rule interaction, labels permuted within contexts),
:func:`benjamini_hochberg` and :func:`holm` (multiplicity), :func:`paired_dz` (effect size);
:func:`isotonic` and :func:`level_crossing` (where a noisy rising rate reaches a level).

Only what runs vectorised over many cells or resamples (the bootstraps, the sign-flip and
permutation tests) is written here; the rest is scipy's: ``binomtest(...).proportion_ci``, ``t``,
``sem``, ``false_discovery_control`` (``scipy.stats``) and ``optimize.isotonic_regression``.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats as scipy_stats
from scipy.optimize import isotonic_regression

NUM_RESAMPLES = 10_000  # bootstrap resamples and Monte Carlo sign flips, unless told otherwise
EXACT_BOOTSTRAP_MAX = 10  # C(19, 10) = 92,378 multisets; above it the bootstrap is Monte Carlo
EXACT_SIGN_FLIP_MAX = 20  # 2^20 sign assignments
# Cluster indices :func:`cluster_share_ci` draws per block (int64: 8 MB; its counts the same).
BOOTSTRAP_BLOCK = 1 << 20

# Two-sided 95% Student t quantiles at the printed tables' degrees of freedom, to three decimals
# (12.706 at 1, 2.228 at 10, 2.042 at 30); beyond 30 the normal's 1.96 is within 4% of t's.
T95_DOF = (*range(1, 11), 12, 15, 20, 25, 30)
T95 = {dof: round(float(scipy_stats.t.ppf(0.975, dof)), 3) for dof in T95_DOF}

# A JAX key (new-style or a legacy uint32[2]; a tracer inside jit / vmap), a seed or a Generator.
Rng = jax.Array | np.random.Generator | int


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


# --------------------------------------------------------------------------- the bootstrap
def bootstrap_ci(
    values,
    rng: Rng = 0,
    num_resamples: int = NUM_RESAMPLES,
    confidence: float = 0.95,
    *,
    mask=None,
    batch_size: int = 1_000,
) -> Interval:
    """Percentile bootstrap confidence interval of the mean of ``values``.

    Each resample draws the n valid values with replacement; the interval is the
    ``(1 -+ confidence) / 2`` quantiles (linear interpolation, as ``numpy.quantile``) of the
    resampled means, widened to hold the mean. NaN where there is no valid value.

    Args:
        values: with a JAX key, float32[N]; with a seed or Generator, [..., N] (each leading row
            resampled on the same draws, NaN entries dropped from every mean).
        rng: a JAX key, a seed or a ``numpy.random.Generator`` (see the module docstring).
        num_resamples: static number of resamples.
        confidence: static level in (0, 1).
        mask: JAX only; optional bool[N], only True entries are values.
        batch_size: JAX only; resamples computed this many at a time to bound memory.

    Returns :class:`Interval` ``(mean, low, high)``, each of the leading shape.
    """
    if isinstance(rng, jax.Array):  # a JAX key
        return _bootstrap_jax(rng, values, num_resamples, confidence, mask, batch_size)
    return _bootstrap_numpy(values, rng, num_resamples, confidence)


@functools.lru_cache(maxsize=16)
def bootstrap_ci_program(num_resamples: int, confidence: float, depth: int = 1):
    """The JAX :func:`bootstrap_ci` over ``depth`` leading axes, jitted once per process and
    (resamples, confidence, depth): (keys, values float32[..., N], mask bool[..., N])."""
    fn = lambda key, x, mask: _bootstrap_jax(key, x, num_resamples, confidence, mask, 1_000)
    return jax.jit(functools.reduce(lambda batched, _: jax.vmap(batched), range(depth), fn))


def _bootstrap_jax(key, samples, num_resamples, confidence, mask, batch_size) -> Interval:
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
    return Interval(*(jnp.where(n == 0, jnp.float32(jnp.nan), v) for v in (mean, low, high)))


def _bootstrap_numpy(values, rng, num_resamples, confidence) -> Interval:
    normal_quantile(confidence)  # checks the level
    values = np.atleast_1d(np.asarray(values, np.float64))
    if values.shape[-1] == 0:
        return Interval(*[np.full(values.shape[:-1], np.nan)[()]] * 3)
    rng = np.random.default_rng(rng) if isinstance(rng, int) else rng
    picks = rng.integers(0, values.shape[-1], size=(num_resamples, values.shape[-1]))
    resampled = np.nanmean(values[..., picks], axis=-1)  # [..., B]
    tail = (1.0 - confidence) / 2.0
    low, high = np.nanquantile(resampled, [tail, 1.0 - tail], axis=-1)
    return _holding(np.nanmean(values, axis=-1), low, high)


def _holding(estimate, low, high) -> Interval:
    """The interval widened to hold its estimate: resampled means summed in another order can
    miss an all-equal mean by an ulp (fmin / fmax keep NaN only where both are NaN)."""
    return Interval(estimate, np.fmin(low, estimate), np.fmax(high, estimate))


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
    resamples (``exact`` False). Returns mean, low, high, p_positive (floats; NaN for no values)
    and exact (bool).
    """
    x = np.asarray(values, np.float64).reshape(-1)
    if x.size == 0:
        return dict.fromkeys(("mean", "low", "high", "p_positive"), math.nan) | {"exact": True}
    normal_quantile(confidence)  # checks the level
    tail = (1.0 - confidence) / 2.0
    exact = x.size <= EXACT_BOOTSTRAP_MAX
    if exact:
        means, weights = _resample_distribution(x)
    else:
        rng = np.random.default_rng(0)
        means = x[rng.integers(0, x.size, size=(NUM_RESAMPLES, x.size))].mean(axis=1)
        weights = np.full(NUM_RESAMPLES, 1.0 / NUM_RESAMPLES)
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


def cluster_share_ci(
    labelled,
    clusters: Sequence[str],
    rng: np.random.Generator,
    num_resamples: int = NUM_RESAMPLES,
    confidence: float = 0.95,
) -> Interval:
    """The share of True in each column of ``labelled`` (bool[N, L]: L labels of N items), with a
    percentile bootstrap over the items' ``clusters`` (N names, say the game each item came
    from): each resample draws the G clusters with replacement and takes hits / items over them,
    every column on the same draws.

    The draws are the rows of ``rng.integers(0, G, (num_resamples, G))``, made in blocks of at
    most :data:`BOOTSTRAP_BLOCK` draws, each block's draws turned into how often each cluster was
    drawn: memory is O(L x G + block), never O(resamples x clusters), and all L labels cost one
    product. Returns :class:`Interval` of float64[L] (N > 0).
    """
    normal_quantile(confidence)  # checks the level
    labelled = np.asarray(labelled, bool).reshape(len(clusters), -1)
    names, index = np.unique(np.asarray(clusters, dtype=object).astype(str), return_inverse=True)
    sizes = np.bincount(index, minlength=len(names)).astype(np.float64)
    hits = np.stack(
        [np.bincount(index, weights=column, minlength=len(names)) for column in labelled.T]
    )
    resampled = _resampled_shares(hits, sizes, rng, num_resamples)  # [L, B]
    # 0.025 itself at 95% (not 0.025000000000000022): the label shares' numbers stay as reported.
    tail = round((1.0 - confidence) / 2.0, 12)
    low, high = np.quantile(resampled, [tail, 1.0 - tail], axis=-1)
    return _holding(labelled.mean(axis=0), low, high)


def _resampled_shares(hits, sizes, rng: np.random.Generator, num_resamples: int) -> np.ndarray:
    """[L, num_resamples]: each label's hits / items (``hits`` [L, G], ``sizes`` [G]) over
    resamples of the G clusters, drawn in blocks (see :func:`cluster_share_ci`)."""
    count = sizes.shape[0]
    rows = max(1, BOOTSTRAP_BLOCK // count)
    weights = np.concatenate([hits, sizes[None]]).T  # [G, L + 1]
    out = np.empty((hits.shape[0], num_resamples))
    for start in range(0, num_resamples, rows):
        block = min(rows, num_resamples - start)
        picks = rng.integers(0, count, size=(block, count))
        picks += (np.arange(block) * count)[:, None]  # row r's clusters counted in bins r*G + g
        drawn = np.bincount(picks.ravel(), minlength=block * count).reshape(block, count)
        totals = drawn.astype(np.float64) @ weights  # [block, L + 1]
        out[:, start : start + block] = (totals[:, :-1] / totals[:, -1:]).T
    return out


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


# --------------------------------------------------------------------------- tests
def sign_flip_test(
    differences,
    rng: Rng | None = None,
    num_permutations: int = NUM_RESAMPLES,
    *,
    mask=None,
    exact: bool | None = None,
):
    """Two-sided paired permutation (sign-flip) test of a zero mean difference.

    Under the null each paired difference is as likely to carry either sign; the p-value is the
    share of sign assignments whose ``|sum|`` is at least the observed one (ties counted). A Monte
    Carlo p-value is ``(1 + hits) / (1 + R)``: the observed assignment counts, so it is never 0.

    - ``rng`` None: exact, all 2^n assignments (n <= 20; the smallest p is 2 / 2^n); a float,
      1 for no differences.
    - a JAX key: in JAX, float32[N] with an optional ``mask``; exact when ``exact`` is True, or
      None and 2^n does not exceed ``num_permutations``; float32[].
    - a seed or Generator: Monte Carlo in numpy over the last axis of [..., N] (NaNs dropped,
      NaN where a row has none), float64[...].
    """
    if rng is None:
        d = np.asarray(differences, np.float64).reshape(-1)
        if d.size == 0:
            return 1.0
        if d.size > EXACT_SIGN_FLIP_MAX:
            raise ValueError(
                f"the exact sign-flip test enumerates 2^n assignments; n = {d.size} > 20"
            )
        # p is a multiple of 2^-n, which float32 holds exactly.
        return float(_sign_flip_jax(jax.random.key(0), d, num_permutations, None, True))
    if isinstance(rng, jax.Array):  # a JAX key
        return _sign_flip_jax(rng, differences, num_permutations, mask, exact)
    rng = np.random.default_rng(rng) if isinstance(rng, int) else rng
    return _sign_flip_numpy(differences, rng, num_permutations)


def _sign_flip_jax(key, differences, num_permutations, mask, exact) -> jax.Array:
    d = jnp.asarray(differences, jnp.float32)
    size = d.shape[0]
    if mask is not None:
        d = jnp.where(jnp.asarray(mask, bool), d, 0.0)  # a zero is unchanged by a sign flip
    observed = jnp.abs(jnp.sum(d))
    # Float sums of the same multiset in another order can differ in the last bits: count ties.
    tolerance = 1e-5 * jnp.sum(jnp.abs(d))
    if exact is None:
        exact = size <= EXACT_SIGN_FLIP_MAX and 2**size <= num_permutations
    if exact:
        every_sign = list(itertools.product((1.0, -1.0), repeat=size))  # [2^n, n]
        flipped = jnp.abs(jnp.asarray(every_sign, jnp.float32).reshape(2**size, size) @ d)
        return jnp.mean((flipped >= observed - tolerance).astype(jnp.float32))
    signs = jax.random.rademacher(key, (num_permutations, size), dtype=jnp.float32)
    hits = jnp.sum(jnp.abs(signs @ d) >= observed - tolerance)
    return (1.0 + hits) / (1.0 + num_permutations)


def _sign_flip_numpy(differences, rng: np.random.Generator, num_permutations: int) -> np.ndarray:
    d = np.nan_to_num(np.asarray(differences, np.float64))
    used = np.sum(~np.isnan(np.asarray(differences, np.float64)), axis=-1)
    observed = np.abs(d.sum(axis=-1))
    signs = rng.choice(np.array([-1.0, 1.0]), size=(num_permutations, d.shape[-1]))
    flipped = np.abs(np.einsum("bc,...c->...b", signs, d))
    return np.where(used > 0, _monte_carlo_p(flipped, observed), np.nan)


def _monte_carlo_p(null: np.ndarray, observed) -> np.ndarray:
    """``(1 + hits) / (1 + R)`` over the last axis of ``null`` [..., R]: the observed labelling
    counts as one of the R + 1, so p is never 0; ties (within 1e-12) count as hits."""
    hits = np.sum(null >= np.asarray(observed)[..., None] - 1e-12, axis=-1)
    return (1.0 + hits) / (1.0 + null.shape[-1])


def population_rule_test(
    cells: Sequence[np.ndarray], rng: np.random.Generator, num_permutations: int = NUM_RESAMPLES
) -> dict[str, float]:
    """Permutation test of a population x rule interaction on per-(rule, context) means.

    ``cells``: one float[K, C] array per population (the same K rules and C contexts; NaN-free).
    The rule-effect profile of population p at context c is its [K] vector minus its mean over
    rules. Statistic: sum over populations and rules of the squared deviation of the
    population's context-averaged profile from the all-population average. Under the null the
    populations' profiles at a context are exchangeable, so labels are permuted within contexts
    (Monte Carlo, in numpy, 1,000 permutations at a time).
    """
    x = np.stack([np.asarray(c, np.float64) for c in cells])  # [P, K, C]
    if np.isnan(x).any():
        raise ValueError("population_rule_test needs every (population, rule, context) cell")
    profiles = (x - x.mean(axis=1, keepdims=True)).transpose(2, 0, 1)  # [C, P, K]

    def statistic(p):  # p: [..., C, P, K]
        per_pop = p.mean(axis=-3)
        return np.sum((per_pop - per_pop.mean(axis=-2, keepdims=True)) ** 2, axis=(-2, -1))

    orders = np.argsort(rng.random((num_permutations, x.shape[2], x.shape[0])), axis=-1)
    blocks = np.split(orders, range(1000, num_permutations, 1000))
    null = np.concatenate(
        [statistic(np.take_along_axis(profiles[None], o[..., None], 2)) for o in blocks]
    )
    observed = statistic(profiles)
    p_value = float(_monte_carlo_p(null, observed))
    return {"statistic": float(observed), "p_value": p_value, "num_permutations": num_permutations}


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
