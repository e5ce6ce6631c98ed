"""The statistics that resample: bootstraps (Monte Carlo, exact, over clusters) and the sign-flip
and permutation tests, in JAX under a key and in numpy under a seed or Generator (see
:mod:`dilemmax.statistics`)."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.statistics.closed_form import Interval, normal_quantile

NUM_RESAMPLES = 10_000  # bootstrap resamples and Monte Carlo sign flips, unless told otherwise
EXACT_BOOTSTRAP_MAX = 10  # C(19, 10) = 92,378 multisets; above it the bootstrap is Monte Carlo
EXACT_SIGN_FLIP_MAX = 20  # 2^20 sign assignments
# Draws per block: the cluster indices :func:`cluster_share_ci` draws at a time (int64: 8 MB; its
# counts the same), and the resamples x rows x samples :func:`bootstrap_rows` picks at a time.
BOOTSTRAP_BLOCK = 1 << 20

# A JAX key (new-style or a legacy uint32[2]; a tracer inside jit / vmap), a seed or a Generator.
Rng = jax.Array | np.random.Generator | int


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
    if isinstance(rng, jax.Array):  # a JAX key: one row of :func:`bootstrap_rows`' kernel
        x = jnp.asarray(values, jnp.float32)
        valid = jnp.ones(x.shape, bool) if mask is None else jnp.asarray(mask, bool)
        rows = _bootstrap_rows_jax(num_resamples, confidence, rng, x[None], valid[None], batch_size)
        return Interval(*(part[0] for part in rows))
    return _bootstrap_numpy(values, rng, num_resamples, confidence)


def bootstrap_rows(
    values, key: jax.Array, num_resamples: int = NUM_RESAMPLES, confidence: float = 0.95
) -> Interval:
    """:func:`bootstrap_ci` of each row of ``values`` [M, N] in JAX, NaN entries dropped, every
    row resampled on the same draws (paired, as the numpy path): a resample hashes N counters
    whatever M, where a row at a time hashed M x N. Rows and columns are padded to powers of two
    (the padding masked out), so one compiled program serves every table of a similar size; it
    changes no result, since column j's draw is the hash of j alone. Numpy in and out (not
    jittable: the padding is decided from the shape): :class:`Interval` of float32[M]."""
    values = np.asarray(values, np.float32)
    if values.ndim != 2 or num_resamples < 1:
        raise ValueError(
            f"bootstrap_rows takes a table [rows, samples] and at least one resample, got shape "
            f"{values.shape} and {num_resamples} resamples"
        )
    normal_quantile(confidence)  # checks the level
    shape = tuple(1 << max(size - 1, 0).bit_length() for size in values.shape)
    padded = np.full(shape, np.nan, np.float32)
    padded[: values.shape[0], : values.shape[1]] = values
    program = _bootstrap_rows_program(num_resamples, confidence)
    interval = program(key, np.nan_to_num(padded), ~np.isnan(padded))
    return Interval(*(np.asarray(part)[: values.shape[0]] for part in interval))


@functools.lru_cache(maxsize=16)
def _bootstrap_rows_program(num_resamples: int, confidence: float):
    return jax.jit(functools.partial(_bootstrap_rows_jax, num_resamples, confidence))


def _bootstrap_rows_jax(num_resamples, confidence, key, x, valid, batch=None) -> Interval:
    rows, size = x.shape
    # Each row's valid samples first, so its resample draws indices in [0, n).
    order = jnp.argsort(~valid, axis=1, stable=True)
    x = jnp.take_along_axis(jnp.where(valid, x, 0.0), order, axis=1)
    n = jnp.sum(valid, axis=1).astype(jnp.uint32)
    safe_n = jnp.maximum(n, 1)[:, None]
    used = jnp.arange(size) < n[:, None]

    def resampled_means(k):  # float32[M]
        picks = _below(jax.random.bits(k, (size,), jnp.uint32), safe_n).astype(jnp.int32)
        picked = jnp.where(used, jnp.take_along_axis(x, picks, axis=1), 0.0)
        return jnp.sum(picked, axis=1) / safe_n[:, 0]

    batch = min(batch or max(1, BOOTSTRAP_BLOCK // (rows * size)), num_resamples)
    keys = jax.random.split(key, num_resamples)
    means = jax.lax.map(resampled_means, keys, batch_size=batch)  # [resamples, M]
    alpha = (1.0 - confidence) / 2.0
    low, high = jnp.quantile(means, jnp.array([alpha, 1.0 - alpha]), axis=0)
    mean = jnp.sum(x, axis=1) / safe_n[:, 0]
    # The interval holds its estimate: the resampled means are summed in another order and
    # can miss an all-equal mean by an ulp.
    low, high = jnp.minimum(low, mean), jnp.maximum(high, mean)
    return Interval(*(jnp.where(n == 0, jnp.float32(jnp.nan), v) for v in (mean, low, high)))


def _below(bits: jax.Array, n: jax.Array) -> jax.Array:
    """floor(bits * n / 2^32) in uint32 arithmetic (16-bit halves and their carry): a uniform
    index in [0, n) from 32 random bits, off uniform by at most n / 2^32."""
    bits_hi, bits_lo, n_hi, n_lo = bits >> 16, bits & 0xFFFF, n >> 16, n & 0xFFFF
    cross_a, cross_b, low = bits_hi * n_lo, bits_lo * n_hi, bits_lo * n_lo
    carry = ((cross_a & 0xFFFF) + (cross_b & 0xFFFF) + (low >> 16)) >> 16
    return bits_hi * n_hi + (cross_a >> 16) + (cross_b >> 16) + carry


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
