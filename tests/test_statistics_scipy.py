"""What dilemmax.statistics takes from scipy, at the edges its callers reach: a count summed as
floats, a test that could not be run among the p-values, one value's standard error; and the
population x rule permutation test, which moved here from the red-teaming package."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dilemmax import statistics as stats


def test_a_count_summed_as_floats_is_a_count_and_a_fraction_is_refused():
    # isolation.py sums 0/1 queries as floats: 3.0 of 10 is the interval of 3 of 10.
    assert stats.wilson_interval(3.0, 10.0) == stats.wilson_interval(3, 10)
    assert stats.clopper_pearson(3.0, 10) == stats.clopper_pearson(3, 10)
    for successes, trials in [(2.5, 10), (11, 10), (-1, 10)]:
        with pytest.raises(ValueError, match="whole and in 0..trials"):
            stats.wilson_interval(successes, trials)
    with pytest.raises(ValueError, match="confidence must lie in"):
        stats.clopper_pearson(1, 2, level=1.5)


def test_benjamini_hochberg_leaves_a_test_not_run_out():
    # 0.01, 0.04 among m = 2 (the NaN not counted): q = 0.02 and 0.04.
    q = stats.benjamini_hochberg([0.01, math.nan, 0.04])
    assert q[0] == pytest.approx(0.02) and math.isnan(q[1]) and q[2] == pytest.approx(0.04)
    assert stats.benjamini_hochberg([]).size == 0
    assert stats.holm([]).size == 0


def test_standard_error_by_hand():
    # sd of (1, 2, 4) is sqrt(7/3); over sqrt(3): sqrt(7) / 3.
    assert stats.standard_error([1.0, 2.0, 4.0]) == pytest.approx(math.sqrt(7) / 3, rel=1e-12)
    assert stats.standard_error([5.0]) == 0.0  # one value shows no spread


def test_population_rule_test_by_hand():
    # Two populations, two rules, one context: population a's rule effects are (-1, +1),
    # b's (+1, -1). The mean profile is 0, so the statistic is 4 x 1^2 = 4; swapping the labels
    # gives 4 as well: every one of the R permutations ties, p = 1.
    a = np.array([[0.0], [2.0]])
    b = np.array([[2.0], [0.0]])
    out = stats.population_rule_test([a, b], np.random.default_rng(0), 50)
    assert out == {"statistic": 4.0, "p_value": 1.0, "num_permutations": 50}
    with pytest.raises(ValueError, match="every"):
        stats.population_rule_test([a, np.full((2, 1), np.nan)], np.random.default_rng(0), 5)
