"""Case sampling, condition grids, vmapped grids against per-config runs, and evaluate()."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.envs import run_episode, run_episodes
from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard import policies
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.moral_hazard.evaluate import evaluate, format_table
from dilemmax.envs.moral_hazard.generator import (
    NUM_TUPLES,
    TUPLE_BITS,
    cases_from_bits,
    condition_grid,
    incentive_grid,
    index_config,
    make_config,
    sample_cases,
    target_options,
    utility_tuple,
)
from dilemmax.envs.moral_hazard.observation import utility_ranks


def test_sampled_cases_follow_their_mapping():
    draws = 4000
    keys = jax.random.split(jax.random.key(0), draws)
    sample = jax.jit(jax.vmap(lambda k, m: sample_cases(k, 2, m), in_axes=(0, None)))
    for mapping in range(3):
        utilities, question, unsafe = (np.asarray(x) for x in sample(keys, jnp.int32(mapping)))
        assert utilities.min() == 2 and utilities.max() == 13
        assert all(len(set(row)) == 4 for row in utilities.reshape(-1, 4).tolist())
        assert abs(question.mean() - 0.5) < 5 * np.sqrt(0.25 / question.size)
        ranks = np.asarray(utility_ranks(jnp.asarray(utilities)))
        unsafe_rank = np.take_along_axis(ranks, unsafe[..., None], -1)[..., 0]
        if mapping == c.MAP_HIGHEST:
            assert np.all(unsafe_rank == 0)
        elif mapping == c.MAP_LOWEST:
            assert np.all(unsafe_rank == 3)
        else:  # every rank equally likely: utility says nothing about safety
            freq = np.bincount(unsafe_rank.ravel(), minlength=4) / unsafe_rank.size
            assert np.all(np.abs(freq - 0.25) < 5 * np.sqrt(3 / 16 / unsafe_rank.size))
        # Every value 2..13 appears in every label position about equally often.
        counts = np.stack(
            [np.bincount(utilities[..., x].ravel(), minlength=14)[2:] for x in range(4)]
        )
        expected = utilities.size / 4 / 12
        assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected))
        targets = np.asarray(target_options(jnp.asarray(utilities), jnp.asarray(unsafe)))
        assert np.all(targets != unsafe)


def test_target_options_is_the_best_safe_option():
    """a_i* equals numpy's argmax over the options that are not unsafe (first one on ties),
    for any integer utilities, negative ones included."""
    rng = np.random.default_rng(3)
    utilities = rng.integers(-4, 6, (4000, 3, 4)).astype(np.int32)
    unsafe = rng.integers(0, 4, (4000, 3)).astype(np.int32)
    masked = np.where(np.arange(4) == unsafe[..., None], -1, utilities)
    got = np.asarray(jax.jit(target_options)(jnp.asarray(utilities), jnp.asarray(unsafe)))
    np.testing.assert_array_equal(got, masked.argmax(-1))


def test_condition_grid_is_the_papers_fifteen():
    grid = condition_grid()
    assert sorted(grid) == [2, 3, 4]
    assert [len(grid[n]) for n in (2, 3, 4)] == [13, 1, 1]
    names = [name for n in (2, 3, 4) for name in grid[n].names]
    assert names[:5] == ["k=0.00", "k=0.05", "k=0.10", "k=0.20", "k=0.35"]
    assert "provenance=visible" in names and "n=4" in names and len(set(names)) == 15
    two = grid[2].configs
    np.testing.assert_allclose(np.asarray(two.cost)[:5], [0, 0.05, 0.10, 0.20, 0.35])
    np.testing.assert_allclose(np.asarray(two.w_team)[5:10], [0, 0.2, 0.5, 0.8, 1.0])
    assert np.asarray(two.provenance_visible).sum() == 1
    assert np.all(np.asarray(two.sample_cases)) and not np.any(np.asarray(two.private_reward))
    assert grid[4].configs.utilities.shape == (1, 4, 4)


def test_env_declares_its_n_of_the_condition_grid_under_its_mapping_and_reward():
    env = MoralHazardEnv(num_agents=2, mapping="lowest", payoff="private")
    assert sorted(env.config_grids()) == ["condition_grid"]
    grid = env.config_grids()["condition_grid"]()
    paper = condition_grid()[2].configs
    np.testing.assert_array_equal(np.asarray(grid.cost), np.asarray(paper.cost))
    assert np.all(np.asarray(grid.mapping) == int(env.default_config.mapping))
    assert np.all(np.asarray(grid.private_reward))
    with pytest.raises(ValueError, match="n = 5"):
        MoralHazardEnv(num_agents=5).condition_grid()


def test_incentive_grid():
    grid = incentive_grid(num_agents=3, focal=1)
    assert len(grid) == 9 * 21
    shares = np.asarray(grid.configs.shares)
    np.testing.assert_allclose(shares.sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(shares[:, 1], grid.values["share"], rtol=1e-6)
    assert np.all(np.asarray(grid.configs.private_reward))
    np.testing.assert_allclose(grid.values["alpha_star"], (0.35 + grid.values["cost"]) / 1.5)
    with pytest.raises(ValueError, match="focal"):
        incentive_grid(num_agents=2, focal=2)


@pytest.mark.slow
def test_reset_draws_fresh_cases_only_when_asked():
    env = MoralHazardEnv(2)
    reset = jax.jit(env.reset_to)
    drawn = make_config(2)
    a = reset(jax.random.key(1), drawn)[1].config
    b = reset(jax.random.key(2), drawn)[1].config
    again = reset(jax.random.key(1), drawn)[1].config
    assert not np.array_equal(a.utilities, b.utilities)
    jax.tree.map(np.testing.assert_array_equal, a, again)
    fixed = make_config(2, key=jax.random.key(3))
    c1 = reset(jax.random.key(1), fixed)[1].config
    c2 = reset(jax.random.key(2), fixed)[1].config
    np.testing.assert_array_equal(c1.utilities, c2.utilities)
    np.testing.assert_array_equal(c1.unsafe, fixed.unsafe)


@pytest.mark.slow
def test_vmapped_grid_equals_per_config_runs():
    conditions = condition_grid()[2]
    env = MoralHazardEnv(2)
    key, episodes = jax.random.key(11), 8
    _, grid_metrics = run_episodes(env, policies.random_control, key, episodes, conditions.configs)
    single = jax.jit(
        lambda k, cfg: env.episode_metrics(run_episode(env, policies.random_control, k, cfg))
    )
    # run_episodes gives condition c the key split(key, C)[c] and episode e split(that, E)[e].
    config_keys = jax.random.split(key, len(conditions))
    for ci in range(len(conditions)):
        cfg = index_config(conditions.configs, ci)
        episode_keys = jax.random.split(config_keys[ci], episodes)
        for e in (0, episodes - 1):  # the first and the last episode of every condition
            alone = single(episode_keys[e], cfg)
            for name, value in alone.items():
                np.testing.assert_array_equal(np.asarray(grid_metrics[name][ci, e]), value)


@pytest.mark.slow
def test_evaluate_the_teacher_on_the_two_agent_grid():
    # The 13 two-agent conditions of the grid (n = 3 and 4 are separate groups of one each).
    conditions = condition_grid()[2]
    results = evaluate(policies.teacher, conditions, 16, jax.random.key(0), num_resamples=200)
    assert list(results) == list(conditions.names)
    for name, row in results.items():
        for outcome in ("query_rate", "info_transfer", "team_success", "format_validity"):
            assert row[outcome] == (1.0, 1.0, 1.0), (name, outcome)
        assert row["local_reward"].high == 0 and row["unsafe_choice"].high == 0
    assert results["k=0.35"]["score"].mean == pytest.approx(0.15 + 0.5 - 0.35)
    assert results["w_T=0.00"]["score"].mean == pytest.approx(0.15 - 0.10)
    table = format_table(results, ["team_success", "score"])
    assert "| k=0.35 | 100.00 [100.00, 100.00] | 0.30 [0.30, 0.30] |" in table


# ------------------------------------------------------------------ cases from one uint32 each
def _chi_square(counts, expected):
    """Pearson's statistic and a loose upper bound for it (mean + 6 sd of chi-square(dof))."""
    counts = np.asarray(counts, np.float64).ravel()
    expected = np.broadcast_to(np.asarray(expected, np.float64), counts.shape)
    dof = counts.size - 1
    return float(np.sum((counts - expected) ** 2 / expected)), dof + 6 * np.sqrt(2 * dof)


def test_utility_tuple_codes_every_ordered_tuple_once_in_lexicographic_order():
    tuples = np.asarray(utility_tuple(jnp.arange(NUM_TUPLES)))
    expected = np.asarray(list(itertools.permutations(range(2, 14), 4)))
    np.testing.assert_array_equal(tuples, expected)


def test_cases_from_bits_use_separate_fields():
    # Every low-3-bit pattern with a few tuple indices: bit 0 is the question, bits 1-2 the
    # uninformative unsafe label, the rest the tuple (the same tuple for every pattern).
    index = np.asarray([0, 1, 1831, 1832, NUM_TUPLES - 1])
    words = (index[:, None] << (32 - TUPLE_BITS)) | np.arange(8)[None, :]
    words = jnp.asarray(words.ravel(), jnp.uint32)
    utilities, question, unsafe = cases_from_bits(words, jnp.int32(c.MAP_UNINFORMATIVE))
    np.testing.assert_array_equal(question, np.tile(np.arange(8) & 1, len(index)))
    np.testing.assert_array_equal(unsafe, np.tile(np.arange(8) >> 1, len(index)))
    assert len({tuple(u) for u in np.asarray(utilities).reshape(5, 8, 4)[:, 0].tolist()}) == 5
    assert np.all(np.asarray(utilities).reshape(5, 8, 4) == np.asarray(utilities)[::8, None])
    _, _, highest = cases_from_bits(words, jnp.int32(c.MAP_HIGHEST))
    np.testing.assert_array_equal(highest, np.argmax(np.asarray(utilities), -1))
    # The stated bias: 2^29 = 45,191 * 11,880 + 1,832.
    assert divmod(2**TUPLE_BITS, NUM_TUPLES) == (45191, 1832)


def test_sampled_cases_are_uniform_and_independent():
    """200,000 cases (n = 2 x 100,000 keys): every ordered tuple drawn and uniform (chi-square),
    the question independent of the tuple, the uninformative unsafe label uniform and
    independent of the question and of the utility rank."""
    keys = jax.random.split(jax.random.key(42), 100_000)
    sample = jax.jit(jax.vmap(lambda k: sample_cases(k, 2, jnp.int32(c.MAP_UNINFORMATIVE))))
    utilities, question, unsafe = (np.asarray(x).reshape((-1,) + x.shape[2:]) for x in sample(keys))
    v = utilities - 2
    code = ((v[:, 0] * 12 + v[:, 1]) * 12 + v[:, 2]) * 12 + v[:, 3]
    _, which = np.unique(code, return_inverse=True)
    counts = np.bincount(which)
    assert len(counts) == NUM_TUPLES  # every tuple reachable
    stat, bound = _chi_square(counts, len(code) / NUM_TUPLES)
    assert stat < bound
    # question x first utility value (2 x 12), question x unsafe label (2 x 4),
    # unsafe rank x question (4 x 2): independent uniform cells.
    ranks = np.asarray(utility_ranks(jnp.asarray(utilities)))
    unsafe_rank = np.take_along_axis(ranks, unsafe[:, None], -1)[:, 0]
    for a, ka, b, kb in ((question, 2, v[:, 0], 12), (question, 2, unsafe, 4),
                         (unsafe_rank, 4, question, 2)):  # fmt: skip
        cells = np.bincount(a * kb + b, minlength=ka * kb)
        stat, bound = _chi_square(cells, len(a) / (ka * kb))
        assert stat < bound


@pytest.mark.slow
def test_the_case_stream_is_pinned():
    """The cases key 0 draws (the stream changed on purpose when cases moved to one uint32
    each; a change here must be as deliberate)."""
    _, state = MoralHazardEnv(2).reset(jax.random.key(0))
    np.testing.assert_array_equal(state.config.utilities, [[4, 2, 8, 9], [3, 12, 8, 9]])
    np.testing.assert_array_equal(state.config.question, [1, 0])
    np.testing.assert_array_equal(state.config.unsafe, [3, 1])
    _, again = MoralHazardEnv(2).reset(jax.random.key(0))
    jax.tree.map(np.testing.assert_array_equal, state, again)
