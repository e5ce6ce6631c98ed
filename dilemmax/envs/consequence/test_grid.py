"""The 228-context grid, one vmapped sweep over contexts x rules x replications, and metrics."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.envs.consequence import constants as C
from dilemmax.envs.consequence import metrics as M
from dilemmax.envs.consequence.env import ConsequenceEnv
from dilemmax.envs.consequence.generator import (
    context_grid,
    context_table,
    cross_rules,
    make_config,
    resource_splits,
)
from dilemmax.envs.consequence.policies import all_zero, threshold_aware
from dilemmax.envs.rollout import run_episode, run_episodes
from dilemmax.statistics import bootstrap_ci, sign_flip_test


def test_grid_has_228_contexts():
    splits = resource_splits(12, 3)
    assert splits.shape == (19, 3)
    assert np.all(splits.sum(axis=1) == 12) and np.all(np.diff(splits, axis=1) >= 0)
    assert len({tuple(r) for r in splits.tolist()}) == 19
    grid = context_grid(12, 3)
    assert grid.resources.shape == (228, 3) and grid.threshold.shape == (228,)
    resources, thresholds = context_table(12, 3)
    contexts = {(tuple(w), int(t)) for w, t in zip(resources.tolist(), thresholds, strict=True)}
    assert len(contexts) == 228 and ((1, 5, 6), 10) in contexts
    assert sorted(set(thresholds.tolist())) == list(range(1, 13))
    crossed = cross_rules(grid)
    assert crossed.rule.shape == (5 * 228,)
    np.testing.assert_array_equal(crossed.rule[::228], np.arange(5))
    np.testing.assert_array_equal(crossed.threshold[228:456], grid.threshold)
    # Partitions of 7 into at most 4 parts: 11.
    assert resource_splits(7, 4).shape == (11, 4)


def test_env_declares_its_contexts_under_its_rules_as_a_grid():
    env = ConsequenceEnv(num_agents=3, total_resources=12, rules=["RP", "AON"])
    assert sorted(env.config_grids()) == ["context_grid"]
    grid = env.config_grids()["context_grid"]()
    expected = cross_rules(context_grid(12, 3), ["RP", "AON"])
    jax.tree.map(np.testing.assert_array_equal, grid, expected)
    assert grid.rule.shape == (2 * 228,)


@pytest.mark.slow
def test_whole_grid_all_rules_in_one_call():
    """228 contexts x 5 rules x 2 replications of all-zero play, one jitted vmapped program."""
    env = ConsequenceEnv()
    configs = cross_rules(context_grid(12, 3))
    rollouts, metrics = run_episodes(env, all_zero, jax.random.key(0), 2, configs=configs)
    assert rollouts.valid.shape == (5 * 228, 2, env.max_steps)
    per = M.per_rule_context(metrics)
    assert per["fatality"].shape == (5, 228)
    # Nobody ever pays: every agent of every game dies, whatever the rule.
    np.testing.assert_array_equal(per["fatality"], 1.0)
    np.testing.assert_array_equal(per["collapse"], 1.0)
    np.testing.assert_array_equal(per["all_zero_opening"], 1.0)
    np.testing.assert_array_equal(per["round_one_funding"], 0.0)
    np.testing.assert_array_equal(per["deaths_by_rank"], 1.0)
    # Two rule eliminations before the endgame except under AON; RP and PP hit their extreme.
    np.testing.assert_array_equal(per["rule_eliminations"][:, 0], [0, 2, 2, 2, 2])
    np.testing.assert_array_equal(per["targeted_elimination"].mean(axis=1), [0, 0, 0, 1, 1])
    np.testing.assert_array_equal(per["cascade"].mean(axis=1), [0, 1, 1, 1, 1])
    # Steps: 3 contributions, plus 2 votes under DV.
    np.testing.assert_array_equal(per["length"].mean(axis=1), [3, 3, 5, 3, 3])
    # Round one under RP kills rank 0 when it is strictly poorest, under PP rank 2 likewise.
    resources, _ = context_table(12, 3)
    strict_low = resources[:, 0] < resources[:, 1]
    strict_high = resources[:, 2] > resources[:, 1]
    first = per["round_one_deaths_by_rank"]
    np.testing.assert_array_equal(
        first[C.RP][strict_low], np.tile([1, 0, 0], (strict_low.sum(), 1))
    )
    np.testing.assert_array_equal(
        first[C.PP][strict_high], np.tile([0, 0, 1], (strict_high.sum(), 1))
    )
    # Exploitation under RP at w = (1, 5, 6), T = 10: B and C could have covered T.
    canonical = int(np.flatnonzero((resources == [1, 5, 6]).all(axis=1))[0]) + 9
    assert per["exploitation"][C.RP, canonical] == 1.0
    # The AON endgame eliminates everyone at once: never an exploitation.
    np.testing.assert_array_equal(per["exploitation"][C.AON], 0.0)


@pytest.mark.slow
def test_threshold_aware_play_saves_everyone_on_the_whole_grid():
    """Richest-first covering meets every feasible T exactly in round one, under every rule."""
    configs = cross_rules(context_grid(12, 3))
    _, metrics = run_episodes(ConsequenceEnv(), threshold_aware, jax.random.key(1), 1, configs)
    np.testing.assert_array_equal(metrics["fatality"], 0.0)
    np.testing.assert_array_equal(metrics["length"], 1)
    np.testing.assert_allclose(metrics["round_one_funding"], 1.0)  # exactly T, never more


@pytest.mark.slow
def test_metrics_ignore_padding(player):
    """A 1-step game padded to 5 steps gives the metrics of the 1-step game."""
    env = player.env
    config = make_config((1, 5, 6), 2, "DV")
    rollout = jax.jit(lambda k: run_episode(env, all_zero, k, config, num_steps=5))(
        jax.random.key(0)
    )
    np.testing.assert_array_equal(rollout.valid, [True, True, True, True, True])
    metrics = env.episode_metrics(rollout)
    assert float(metrics["fatality"]) == 1.0 and int(metrics["length"]) == 5
    pay_two = lambda k, o: jnp.where(o.agent_index == 2, 2, 0).astype(jnp.int32)
    rollout = jax.jit(lambda k: run_episode(env, pay_two, k, config, num_steps=5))(
        jax.random.key(0)
    )
    np.testing.assert_array_equal(rollout.valid, [True, False, False, False, False])
    metrics = env.episode_metrics(rollout)
    assert float(metrics["fatality"]) == 0.0 and float(metrics["success"]) == 1.0
    assert float(metrics["round_one_funding"]) == 1.0 and int(metrics["length"]) == 1
    assert float(metrics["cascade"]) == 0.0 and int(metrics["invalid_actions"]) == 0
    np.testing.assert_array_equal(metrics["return"], [14.0, 18.0, 17.0])


@pytest.mark.slow
def test_aggregation_helpers():
    means = jnp.asarray([[0.1, 0.5, 0.2], [0.3, 0.5, 0.2], [0.2, 0.1, 0.9]])  # [K=3, C=3]
    safest, worst = M.decisive_rules(means)
    np.testing.assert_array_equal(safest, [0, 2, -1])
    np.testing.assert_array_equal(worst, [1, -1, 2])
    metrics = {"fatality": jnp.arange(12.0).reshape(6, 2)}  # [K * C = 6, E = 2]
    per = M.per_rule_context(metrics, num_rules=2)
    np.testing.assert_allclose(per["fatality"], [[0.5, 2.5, 4.5], [6.5, 8.5, 10.5]])
    gap = M.institutional_alignment_gap(
        jax.random.key(0), jnp.full((2, 50), 0.6), jnp.full((2, 50), 0.2), num_resamples=500
    )
    np.testing.assert_allclose(gap["mean"], [0.4, 0.4], rtol=1e-6)
    np.testing.assert_allclose(gap["ci_low"], [0.4, 0.4], rtol=1e-6)
    assert np.all(np.asarray(gap["p_value"]) < 0.01)
    noise = jax.random.normal(jax.random.key(1), (200,))
    _, low, high = bootstrap_ci(noise, jax.random.key(2), 2000)
    assert float(low) < float(jnp.mean(noise)) < float(high)
    assert float(sign_flip_test(noise - noise.mean(), jax.random.key(3), 500)) > 0.5
