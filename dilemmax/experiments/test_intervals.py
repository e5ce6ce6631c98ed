"""Every interval the project reports holds its own estimate, at the edges above all: a rate of
exactly 0 or 1, every value equal, a single value. (A Wilson upper bound of 0.9999999999999999
for 13 / 13 queries once made Figure 3's error bar negative and the experiment die after its
results were written.)"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dilemmax import statistics as stats
from dilemmax.redteam.rationale_labels import share_row

FAST = settings(max_examples=30, deadline=None)
# Values that sum with rounding error when repeated (0.1, 1/3) as well as exact ones.
VALUES = st.sampled_from([0.0, 1.0, 0.1, 1 / 3, 0.7, -2.5, 100.0])


def holds(low, estimate, high) -> bool:
    return low <= estimate <= high


@FAST
@given(st.integers(1, 5000), st.data())
def test_wilson_holds_the_rate_and_meets_it_at_0_and_1(trials, data):
    successes = data.draw(st.integers(0, trials))
    low, high = stats.wilson_interval(successes, trials)
    rate = successes / trials
    assert 0.0 <= low <= rate <= high <= 1.0
    if successes == trials:
        assert high == 1.0 and rate - low > 0
    if successes == 0:
        assert low == 0.0 and high > 0


def test_wilson_at_the_reported_cases():
    assert stats.wilson_interval(13, 13)[1] == 1.0  # 0.9999999999999999 before
    assert stats.wilson_interval(0, 5)[0] == 0.0  # 2.8e-17 before
    assert stats.wilson_interval(405, 405)[1] == 1.0
    assert all(math.isnan(v) for v in stats.wilson_interval(0, 0))


@FAST
@given(VALUES, st.integers(1, 40))
def test_bootstraps_of_equal_values_are_the_value(value, n):
    mean, low, high = stats.bootstrap_ci([value] * n, num_resamples=200)
    assert holds(low, mean, high) and high - low <= 1e-9 * max(1.0, abs(value))
    boot = stats.exact_bootstrap([value] * min(n, 6))
    assert holds(boot["low"], boot["mean"], boot["high"])
    ci = stats.bootstrap_ci(np.full((2, n), value), np.random.default_rng(0), 200)
    assert np.all(ci.low <= ci.mean) and np.all(ci.mean <= ci.high)


@FAST
@given(st.lists(VALUES, min_size=1, max_size=12))
def test_bootstraps_hold_their_mean(values):
    mean, low, high = stats.bootstrap_ci(values, num_resamples=300)
    assert holds(low, mean, high)
    boot = stats.exact_bootstrap(values[:6])
    assert holds(boot["low"], boot["mean"], boot["high"])
    cells = np.asarray([values, values[::-1]])
    ci = stats.bootstrap_ci(cells, np.random.default_rng(1), 300)
    assert np.all(ci.low <= ci.mean) and np.all(ci.mean <= ci.high)
    m, lo, hi = stats.t_interval(np.asarray(values))
    assert holds(lo, m, hi)


def test_context_bootstrap_with_an_empty_row_stays_nan():
    ci = stats.bootstrap_ci(
        np.asarray([[np.nan, np.nan], [0.1, 0.1]]), np.random.default_rng(0), 50
    )
    assert np.isnan(ci.mean[0]) and np.isnan(ci.low[0]) and np.isnan(ci.high[0])
    assert ci.low[1] <= ci.mean[1] <= ci.high[1]


@pytest.mark.slow
def test_jax_bootstraps_hold_their_mean_at_equal_values():
    key = jax.random.key(0)
    for value in (0.1, 1 / 3, 1.0, 0.0):
        for n in (1, 33):  # one compile per length
            x = np.full(n, value, np.float32)
            mean, low, high = (float(v) for v in stats.bootstrap_ci(x, key, num_resamples=64))
            assert holds(low, mean, high), (value, n, low, mean, high)
            masked = stats.bootstrap_ci(x, key, num_resamples=64, mask=np.ones(n, bool))
            mean, low, high = (float(v) for v in masked)
            assert holds(low, mean, high), (value, n, low, mean, high)


@FAST
@given(st.lists(st.booleans(), min_size=1, max_size=30), st.integers(1, 5))
def test_share_intervals_hold_the_share(labelled, games):
    names = [f"g{i % games}" for i in range(len(labelled))]
    ci = share_row(np.asarray(labelled), names, np.random.default_rng(0), 200)
    assert holds(ci["low"], ci["share"], ci["high"])


@FAST
@given(st.integers(1, 400), st.data())
def test_clopper_pearson_holds_the_rate(trials, data):
    successes = data.draw(st.integers(0, trials))
    low, high = stats.clopper_pearson(successes, trials)
    assert 0.0 <= low <= successes / trials <= high <= 1.0
