"""Tests of the shared metric helpers against closed forms and numpy."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax import statistics
from dilemmax.envs import metrics


def _gini_numpy(x):
    """Sorted-values formula of the Gini coefficient for non-negative values."""
    x = np.sort(np.asarray(x, np.float64))
    n = x.size
    return float(np.sum((2 * np.arange(1, n + 1) - n - 1) * x) / (n * x.sum()))


# --------------------------------------------------------------------------- gini
@pytest.mark.slow
@pytest.mark.parametrize(
    "values, expected",
    [
        ([0.0, 0.0, 1.0], 2.0 / 3.0),  # one of three holds everything: (n - 1) / n
        ([1.0, 1.0, 1.0], 0.0),
        ([1.0, 2.0, 3.0, 4.0], 0.25),  # sum |diffs| = 20 over 2 * 4 * 10
        ([0.0, 0.0, 0.0], 0.0),  # all zero: 0 by convention
        ([5.0], 0.0),
        ([-1.0, 1.0], 0.5),  # negatives: |x| in the denominator
    ],
)
def test_gini_closed_forms(values, expected):
    assert float(metrics.gini(jnp.array(values))) == pytest.approx(expected, abs=1e-6)


def test_gini_matches_numpy_and_is_scale_invariant():
    rng = np.random.default_rng(0)
    for _ in range(5):
        x = rng.exponential(size=9).astype(np.float32)
        assert float(metrics.gini(x)) == pytest.approx(_gini_numpy(x), rel=1e-5)
        assert float(metrics.gini(7 * x)) == pytest.approx(_gini_numpy(x), rel=1e-5)


def test_gini_mask_ignores_padding_even_inf():
    x = jnp.array([0.0, 0.0, 1.0, jnp.inf, 123.0])
    mask = jnp.array([True, True, True, False, False])
    assert float(metrics.gini(x, mask)) == pytest.approx(2.0 / 3.0, abs=1e-6)
    assert float(metrics.gini(x, jnp.zeros(5, bool))) == 0.0


# --------------------------------------------------------------------------- effective number
def test_effective_number():
    assert float(metrics.effective_number(jnp.array([0.0, 0.0, 5.0]))) == pytest.approx(1.0)
    assert float(metrics.effective_number(jnp.array([0.2] * 5))) == pytest.approx(5.0)
    assert float(metrics.effective_number(jnp.array([3.0, 3.0, 0.0, 0.0]))) == pytest.approx(2.0)
    # raw counts (3, 1): shares (0.75, 0.25), 1 / (0.5625 + 0.0625) = 1.6
    assert float(metrics.effective_number(jnp.array([3.0, 1.0]))) == pytest.approx(1.6)
    assert float(metrics.effective_number(jnp.zeros(4))) == 0.0
    masked = metrics.effective_number(jnp.array([1.0, 1.0, 50.0]), jnp.array([True, True, False]))
    assert float(masked) == pytest.approx(2.0)


# --------------------------------------------------------------------------- bootstrap
def _bootstrap_numpy(x, num_resamples, confidence, seed):
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, (num_resamples, x.size))
    means = x[idx].mean(axis=1)
    alpha = (1 - confidence) / 2
    return x.mean(), *np.quantile(means, [alpha, 1 - alpha])


def test_bootstrap_matches_numpy_and_normal_theory():
    rng = np.random.default_rng(1)
    x = rng.normal(2.0, 1.0, 40).astype(np.float32)
    mean, low, high = jax.jit(statistics.bootstrap_ci)(x, jax.random.key(0))
    ref_mean, ref_low, ref_high = _bootstrap_numpy(x, 20_000, 0.95, 0)
    assert float(mean) == pytest.approx(ref_mean, abs=1e-5)
    se = x.std() / np.sqrt(x.size)  # Monte Carlo noise of the quantiles is ~0.02 se
    assert float(low) == pytest.approx(ref_low, abs=0.1 * se)
    assert float(high) == pytest.approx(ref_high, abs=0.1 * se)
    assert float(high - low) == pytest.approx(2 * 1.96 * se, rel=0.1)


@pytest.mark.slow
def test_bootstrap_mask_padding_has_no_effect_and_edge_cases():
    x = jnp.array([1.0, 4.0, 2.0, 0.0, 0.0, 7.0])
    mask = jnp.array([True, True, True, False, False, True])
    key = jax.random.key(3)
    fn = jax.jit(lambda s, m: statistics.bootstrap_ci(s, key, 2_000, 0.9, mask=m))
    a = fn(x, mask)
    b = fn(x.at[3].set(1e6).at[4].set(-5.0), mask)
    assert [float(v) for v in a] == [float(v) for v in b]
    assert float(a[0]) == pytest.approx(3.5)
    assert float(a[1]) < 3.5 < float(a[2]) and float(a[1]) >= 1.0 and float(a[2]) <= 7.0
    constant = fn(jnp.full(6, 2.5), jnp.ones(6, bool))
    assert [float(v) for v in constant] == [2.5, 2.5, 2.5]
    empty = fn(x, jnp.zeros(6, bool))
    assert all(np.isnan(float(v)) for v in empty)


# --------------------------------------------------------------------------- sign-flip test
def _sign_flip_numpy(d):
    d = np.asarray(d, np.float64)
    stats = [abs(np.dot(s, d)) for s in itertools.product((1, -1), repeat=d.size)]
    return float(np.mean(np.array(stats) >= abs(d.sum()) - 1e-9))


def test_sign_flip_closed_forms():
    key = jax.random.key(0)
    # all five differences positive: only all-plus and all-minus are as extreme, 2 / 32
    assert float(statistics.sign_flip_test(jnp.ones(5), key)) == pytest.approx(1 / 16)
    assert float(statistics.sign_flip_test(jnp.array([1.0, -1.0]), key)) == 1.0
    assert float(statistics.sign_flip_test(jnp.zeros(4), key)) == 1.0


def test_sign_flip_exact_and_monte_carlo_match_numpy():
    rng = np.random.default_rng(2)
    d = rng.normal(0.6, 1.0, 10).astype(np.float32)
    expected = _sign_flip_numpy(d)
    key = jax.random.key(1)
    exact = statistics.sign_flip_test(d, key, exact=True)
    assert float(exact) == pytest.approx(expected, abs=1e-6)
    monte_carlo = jax.jit(lambda k, x: statistics.sign_flip_test(x, k, 20_000, exact=False))
    assert float(monte_carlo(key, d)) == pytest.approx(expected, abs=0.01)


def test_sign_flip_mask_equals_subset():
    key = jax.random.key(0)
    d = jnp.array([1.0, 2.0, 0.5, 99.0, -99.0])
    mask = jnp.array([True, True, True, False, False])
    masked = statistics.sign_flip_test(d, key, mask=mask)
    assert float(masked) == pytest.approx(_sign_flip_numpy([1.0, 2.0, 0.5]))


# --------------------------------------------------------------------------- episode helpers
def test_trial_index_and_per_trial_sum():
    trial_done = jnp.array([False, True, False, False, True, False, True, False])
    valid = jnp.array([True] * 7 + [False])
    assert metrics.trial_index(trial_done).tolist() == [0, 0, 1, 1, 1, 2, 2, 3]
    rewards = jnp.array([[1, 0], [2, 1], [0, 0], [3, 3], [1, 0], [5, 5], [0, 1], [100, 100]])
    sums = metrics.per_trial_sum(rewards, trial_done, valid, num_trials=3)
    assert sums.tolist() == [[3.0, 1.0], [4.0, 3.0], [5.0, 6.0]]


def test_first_and_last_step():
    flags = jnp.array([False, True, False, True, True])
    valid = jnp.array([True, True, True, True, False])
    assert int(metrics.first_step(flags, valid)) == 1
    assert int(metrics.last_step(flags, valid)) == 3
    assert int(metrics.first_step(jnp.zeros(4, bool))) == -1
    assert int(metrics.last_step(jnp.zeros(4, bool))) == -1


def test_safe_divide():
    assert metrics.safe_divide(jnp.array([1.0, 2.0]), jnp.array([2.0, 0.0]), -1.0).tolist() == [
        0.5,
        -1.0,
    ]
