"""The generic statistics against numbers computed by hand or by scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from dilemmax import statistics as stats


def test_wilson_interval_by_hand_and_against_scipy():
    # 0 of 405: low 0, high z^2 / (n + z^2) with z = 1.959964 (the paper's "never below" bar).
    z = 1.959963984540054
    low, high = stats.wilson_interval(0, 405)
    assert low == 0.0 and high == pytest.approx(z * z / (405 + z * z), rel=1e-12)
    # 5 of 10: symmetric about 1/2, half-width z sqrt(1/40 + z^2/400) / (1 + z^2/10).
    low, high = stats.wilson_interval(5, 10)
    half = z * math.sqrt(0.25 / 10 + z * z / 400) / (1 + z * z / 10)
    assert (low, high) == pytest.approx((0.5 - half, 0.5 + half), rel=1e-12)
    for k, n in [(279, 405), (1, 3), (45, 45)]:
        want = scipy_stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
        assert stats.wilson_interval(k, n) == pytest.approx((want.low, want.high), abs=1e-12)
    assert all(math.isnan(v) for v in stats.wilson_interval(0, 0))


def test_exact_bootstrap_by_hand():
    # Two values 0 and 1: resample means 0, 1/2, 1 with probabilities 1/4, 1/2, 1/4.
    out = stats.exact_bootstrap([0.0, 1.0])
    assert out["exact"] and out["mean"] == 0.5
    assert (out["low"], out["high"]) == (0.0, 1.0)
    assert out["p_positive"] == pytest.approx(0.75)
    # Three values 0, 0, 3: the mean is 3 c / 3 = c where c ~ Binomial(3, 1/3) counts the 3s;
    # P(c = 0) = 8/27 > 2.5%, so low = 0; P(c <= 2) = 26/27 < 97.5%, so high = 3.
    out = stats.exact_bootstrap([0.0, 0.0, 3.0])
    assert (out["low"], out["high"]) == (0.0, 3.0)
    assert out["p_positive"] == pytest.approx(1 - 8 / 27)
    assert stats.exact_bootstrap([2.0] * 7)["low"] == stats.exact_bootstrap([2.0] * 7)["high"] == 2


def test_monte_carlo_bootstrap_agrees_with_the_exact_one():
    x = [0.0, 1.0, 4.0, 2.0, -1.0]
    exact = stats.exact_bootstrap(x)
    mean, low, high = stats.bootstrap_ci(x, rng=1, num_resamples=40_000)
    assert mean == pytest.approx(1.2)
    assert low == pytest.approx(exact["low"], abs=0.25) and high == pytest.approx(
        exact["high"], abs=0.25
    )
    assert stats.bootstrap_ci([3.0] * 4) == (3.0, 3.0, 3.0)
    assert stats.bootstrap_ci([], rng=0)[0] != stats.bootstrap_ci([], rng=0)[0]  # NaN


def test_sign_flip_p_exact_values():
    assert stats.sign_flip_test([1.0] * 7) == pytest.approx(2 / 128)  # all of one sign
    # Six of seven positive, the negative one the smallest: |sum| is beaten only by the
    # assignments flipping nothing or everything, or just that one: 4 / 128 = 0.031 (Table 5).
    assert stats.sign_flip_test([1, 1, 1, 1, 1, 1, -0.5]) == pytest.approx(4 / 128)
    assert stats.sign_flip_test([0.0, 0.0, 0.0]) == 1.0
    assert stats.sign_flip_test([]) == 1.0


def test_multiplicity_adjustments_by_hand_and_against_scipy():
    p = [0.01, 0.04, 0.03, 0.2]
    q = stats.benjamini_hochberg(p)
    assert q == pytest.approx([0.04, 0.04 * 4 / 3, 0.04 * 4 / 3, 0.2])
    rng = np.random.default_rng(0)
    many = rng.uniform(0, 0.3, 25)
    assert stats.benjamini_hochberg(many) == pytest.approx(
        scipy_stats.false_discovery_control(many)
    )
    # sorted 0.01, 0.03, 0.04, 0.2 -> 4 x 0.01, 3 x 0.03, max(0.09, 2 x 0.04), 0.2
    assert stats.holm(p) == pytest.approx([0.04, 0.09, 0.09, 0.2])
    # The paper's Holm p for GEPA: 25 tests, smallest p = 4/128 -> 25 * 0.03125 = 0.781.
    assert stats.holm([4 / 128] + [0.9] * 24)[0] == pytest.approx(0.78125)


def test_paired_dz_and_isotonic_crossing():
    assert stats.paired_dz([1.0, 2.0, 3.0]) == pytest.approx(2.0)
    assert stats.isotonic([0.0, 0.6, 0.2, 1.0]) == pytest.approx([0.0, 0.4, 0.4, 1.0])
    assert stats.isotonic([1.0, 0.0], weights=[3, 1]) == pytest.approx([0.75, 0.75])
    # Rates 0, 0, 1 at 0.3, 0.35, 0.4: the crossing is half-way between 0.35 and 0.4.
    assert stats.level_crossing([0.4, 0.3, 0.35], [1.0, 0.0, 0.0]) == pytest.approx(0.375)
    # 0 at 0.30, 0.689 at 0.35: 0.30 + 0.05 * 0.5 / 0.689.
    assert stats.level_crossing([0.3, 0.35], [0.0, 0.689]) == pytest.approx(0.3 + 0.025 / 0.689)
    assert stats.level_crossing([0.1, 0.2], [0.0, 0.2]) is None  # never reaches 50%
    assert stats.level_crossing([0.1, 0.2], [0.9, 1.0]) is None  # crossed below the grid
    assert stats.level_crossing([0.1, 0.2], [0.5, 1.0]) == 0.1
