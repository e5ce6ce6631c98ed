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


# ----------------------------------------------------------------------------- bootstrap_rows
def test_a_row_of_a_table_gets_the_interval_it_gets_alone_whatever_the_padding():
    # Column j's draw is the hash of j alone, so neither the other rows nor the padding to
    # powers of two (5 x 37 -> 8 x 64; one row -> 1 x 64; 67 columns -> 128) moves a row's
    # interval: the same key gives the same numbers, bit for bit.
    import jax

    rng = np.random.default_rng(0)
    table = rng.normal(size=(5, 37)).astype(np.float32)
    table[2, 30:] = np.nan  # a seat that played 30 of the 37 episodes
    table[4] = np.nan  # a metric no episode has
    key = jax.random.key(7)
    together = stats.bootstrap_rows(table, key, 2_000)
    for r in range(4):
        alone = stats.bootstrap_rows(table[r : r + 1], key, 2_000)
        wider = stats.bootstrap_rows(np.pad(table[r : r + 1], ((0, 0), (0, 30)),
                                                 constant_values=np.nan), key, 2_000)  # fmt: skip
        for part, one, two in zip(together, alone, wider, strict=True):
            assert part[r] == one[0] == two[0]
    assert all(math.isnan(part[4]) for part in together)
    # The estimate is the row's mean, inside its interval; a constant row's interval is a point.
    valid = ~np.isnan(table[:4])
    means = [table[r][valid[r]].mean() for r in range(4)]
    np.testing.assert_allclose(together.mean[:4], means, rtol=1e-6)
    assert (together.low[:4] <= together.mean[:4]).all()
    assert (together.mean[:4] <= together.high[:4]).all()
    assert tuple(p[0] for p in stats.bootstrap_rows(np.full((1, 9), 2.5), key)) == (2.5,) * 3
    assert tuple(p[0] for p in stats.bootstrap_rows([[4.0]], key)) == (4.0,) * 3  # one decision
    for bad in ({"values": [1.0, 2.0]}, {"values": [[1.0]], "num_resamples": 0},
                {"values": [[1.0]], "confidence": 1.5}):  # fmt: skip
        with pytest.raises(ValueError, match="table|resample|confidence"):
            stats.bootstrap_rows(**{"key": key, **bad})


def test_bootstrap_rows_matches_the_numpy_bootstrap_and_normal_theory():
    import jax

    rng = np.random.default_rng(1)
    table = np.stack([rng.normal(0.0, 1.0, 400), rng.exponential(2.0, 400)]).astype(np.float32)
    mean, low, high = stats.bootstrap_rows(table, jax.random.key(3), 10_000)
    ref = stats.bootstrap_ci(table.astype(np.float64), rng=0, num_resamples=20_000)
    half = 1.959964 * table.std(axis=1, ddof=1).astype(float) / math.sqrt(400)
    for r in range(2):
        assert low[r] == pytest.approx(ref.low[r], abs=0.1 * float(half[r]))
        assert high[r] == pytest.approx(ref.high[r], abs=0.1 * float(half[r]))
        assert high[r] - low[r] == pytest.approx(2 * float(half[r]), rel=0.1)


def test_an_index_below_n_is_the_exact_floor_of_bits_times_n_over_2_to_the_32():
    import jax.numpy as jnp

    from dilemmax.statistics.resampling import _below

    rng = np.random.default_rng(2)
    ends = np.array([0, 2**32 - 1], np.uint64)
    bits = np.concatenate([rng.integers(0, 2**32, 4_000, dtype=np.uint64), ends])
    for n in (1, 2, 3, 228, 2**16 - 1, 2**16, 2**16 + 1, 1_000_003, 2**31, 2**32 - 1):
        got = np.asarray(_below(jnp.asarray(bits, jnp.uint32), jnp.uint32(n)), np.uint64)
        np.testing.assert_array_equal(got, (bits * np.uint64(n)) >> np.uint64(32), err_msg=n)
