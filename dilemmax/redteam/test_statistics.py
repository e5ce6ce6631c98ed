"""Statistics of the gap against known answers."""

import numpy as np
import pytest

from dilemmax import statistics
from dilemmax.redteam import statistics as S

B = 2_000


def synthetic(name, rates, num_contexts=40, episodes=6, seed=0):
    """A population whose fatality at rule k is Bernoulli(rates[k]) / 3 per agent, per episode."""
    rng = np.random.default_rng(seed)
    rows = len(rates) * num_contexts * episodes
    rule = np.repeat(np.arange(len(rates)), num_contexts * episodes)
    context = np.tile(np.repeat(np.arange(num_contexts), episodes), len(rates))
    deaths = rng.binomial(3, np.asarray(rates)[rule]) / 3.0
    metrics = {
        "fatality": deaths,
        "survivors": 3 - 3 * deaths,
        "collapse": (deaths == 1.0).astype(float),
        "targeted_elimination": rng.random(rows) < 0.5,
        "exploitation": rng.random(rows) < 0.2,
        "cascade": np.zeros(rows),
        "deaths_by_rank": np.zeros((rows, 3)),
    }
    rules = tuple("ABCDE"[: len(rates)])
    return S.Population(name, metrics, rule, context, num_contexts, rules)


def test_cell_means_and_missing_cells():
    values = np.array([1.0, 0.0, 1.0, 0.5])
    means = S.cell_means(values, np.array([0, 0, 1, 1]), np.array([0, 0, 1, 1]), 2, 3)
    assert means[0, 0] == 0.5 and means[1, 1] == 0.75
    assert np.isnan(means[0, 1]) and np.isnan(means[1, 2])


def test_bootstrap_of_a_constant_is_the_constant_and_ci_covers_the_mean():
    rng = np.random.default_rng(0)
    ci = statistics.bootstrap_ci(np.full((2, 50), 0.3), rng, B)
    assert np.allclose([ci.mean, ci.low, ci.high], 0.3)
    values = rng.normal(1.0, 1.0, size=400)
    ci = statistics.bootstrap_ci(values, rng, B)
    se = values.std() / np.sqrt(len(values))
    assert ci.low < values.mean() < ci.high
    assert ci.high - ci.low == pytest.approx(2 * 1.96 * se, rel=0.15)


def test_gap_of_a_shifted_population_is_the_shift():
    rng = np.random.default_rng(1)
    reference = rng.random((5, 30)) * 0.2
    gap = S.alignment_gap(reference + 0.1, reference, rng, B)
    assert np.allclose(gap["mean"], 0.1) and np.allclose(gap["low"], 0.1)
    assert np.allclose(gap["p_value"], 1 / (B + 1))


def test_sign_flip_identical_not_significant_shifted_significant():
    rng = np.random.default_rng(2)
    a = synthetic("a", [0.2, 0.2], seed=3).cell_means("fatality")
    same = statistics.sign_flip_test(a[0] - a[0], rng, B)
    assert same == 1.0  # every flip of all-zero differences ties the observed 0
    noise = statistics.sign_flip_test(rng.normal(0, 1, 200), rng, B)
    assert noise > 0.05
    shifted = statistics.sign_flip_test(rng.normal(0.5, 1, 200), rng, B)
    assert shifted < 0.01


def test_rule_contrasts_find_the_shifted_rule_only():
    pop = synthetic("p", [0.1, 0.1, 0.5], num_contexts=60, seed=4)
    rows = S.rule_contrasts(
        pop.cell_means("fatality"), np.random.default_rng(5), ("A", "B", "C"), B
    )
    by_pair = {(r["a"], r["b"]): r for r in rows}
    assert by_pair[("A", "B")]["p_value"] > 0.05
    assert by_pair[("A", "C")]["p_value"] < 0.01 and by_pair[("A", "C")]["high"] < 0


def test_population_by_rule_permutation_test():
    rng = np.random.default_rng(6)
    a = synthetic("a", [0.1, 0.3, 0.5], seed=7).cell_means("fatality")
    identical = statistics.population_rule_test([a, a.copy()], rng, B)
    assert identical["statistic"] == 0.0 and identical["p_value"] == 1.0
    b = synthetic("b", [0.1, 0.3, 0.5], seed=8).cell_means("fatality")
    same_law = statistics.population_rule_test([a, b], rng, B)
    assert same_law["p_value"] > 0.05
    # The same overall level, but rule 2 is safest for population c: an interaction.
    c = synthetic("c", [0.5, 0.3, 0.1], seed=9).cell_means("fatality")
    assert statistics.population_rule_test([a, c], rng, B)["p_value"] < 0.01
    # A shift of every rule by the same amount is no interaction.
    assert statistics.population_rule_test([a, a + 0.2], rng, B)["p_value"] == 1.0


def test_decisive_rules():
    cell = np.array([[0.1, 0.5, 0.2], [0.3, 0.5, 0.2], [0.9, 0.1, 0.2]])
    safest, worst = S.decisive_rules(cell)
    assert safest.tolist() == [0, 2, -1]
    assert worst.tolist() == [2, -1, -1]
    safest, _ = S.decisive_rules(cell, margin=0.25)
    assert safest.tolist() == [-1, 2, -1]
    counts = S.decisive_counts(cell, ("A", "B", "C"))
    assert counts["safest"] == {"A": 1, "B": 0, "C": 1}


def test_stakes_profile_groups_by_threshold():
    thresholds = np.tile(np.arange(1, 5), 3)
    cell = np.stack([thresholds / 4.0, np.zeros(12)])
    prof = S.stakes_profile(cell, thresholds, 4, np.random.default_rng(0), 200)
    assert prof["tau"].tolist() == [0.25, 0.5, 0.75, 1.0]
    assert np.allclose(prof["mean"][0], prof["tau"]) and np.allclose(prof["high"][1], 0)


def test_population_round_trip_and_validation(tmp_path):
    pop = synthetic("x", [0.2, 0.4], num_contexts=5, episodes=2)
    pop.save(tmp_path / "x.npz")
    back = S.Population.load(tmp_path / "x.npz")
    assert back.name == "x" and back.num_contexts == 5
    assert np.array_equal(back.metrics["fatality"], pop.metrics["fatality"])
    with pytest.raises(ValueError, match="context_index outside"):
        S.Population("bad", {"fatality": np.zeros(1)}, [0], [9], 5)
    with pytest.raises(ValueError, match="metric 'fatality' has 2 rows"):
        S.Population("bad", {"fatality": np.zeros(2)}, [0], [0], 5)


def test_from_grid_run_indexes_rule_major():
    metrics = {"fatality": np.arange(2 * 3 * 4, dtype=float).reshape(6, 4)}
    pop = S.from_grid_run("g", metrics, num_contexts=3, rules=("RP", "PP"))
    means = pop.cell_means("fatality")
    assert means[1, 2] == np.mean(np.arange(20, 24))


def test_from_records_locates_contexts_and_names_bad_records():
    records = [
        {"rule": "rp", "resources": [6, 1, 5], "threshold": 10, "fatality": 1 / 3},
        {"rule": "RP", "resources": [1, 5, 6], "threshold": 10, "fatality": 0.0},
    ]
    pop = S.from_records("llm", records)
    assert pop.context_index.tolist() == [11 * 12 + 9] * 2
    assert pop.cell_means("fatality")[3, 11 * 12 + 9] == pytest.approx(1 / 6)
    with pytest.raises(ValueError, match="record 0: rule 'XX'"):
        S.from_records("x", [{**records[0], "rule": "XX"}])
    with pytest.raises(ValueError, match="record 0: context"):
        S.from_records("x", [{**records[0], "resources": [1, 1, 1]}])
    with pytest.raises(ValueError, match="record 1: metric 'fatality' missing"):
        S.from_records("x", [records[0], {"rule": "RP", "resources": [1, 5, 6], "threshold": 10}])
