"""LogWrapper (JaxMARL info keys) and VecEnv (resets only when an episode ended)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from toy_env import ToyConfig, ToyEnv

from dilemmax.wrappers.log import LogWrapper
from dilemmax.wrappers.vec import VecEnv


def _spend(amounts):
    return {f"agent_{i}": jnp.int32(a) for i, a in enumerate(amounts)}


@pytest.mark.slow
def test_log_wrapper_reports_returns_at_episode_end():
    env = LogWrapper(ToyEnv(num_agents=2, horizon=3))
    _, state = env.reset_to(jax.random.key(0), ToyConfig(jnp.array([3, 3])))
    key = jax.random.key(1)
    plays = [(1, 0), (1, 2), (0, 1)]  # returns (2, 3) over a 3-step episode
    for t, amounts in enumerate(plays):
        _, state, _, dones, infos = env.step(key, state, _spend(amounts))
        assert bool(infos["returned_episode"][0]) == (t == 2)
    np.testing.assert_allclose(infos["returned_episode_returns"], [2.0, 3.0])
    np.testing.assert_array_equal(infos["returned_episode_lengths"], [3, 3])
    np.testing.assert_allclose(state.episode_returns, [0.0, 0.0])  # running totals restart
    assert int(state.episode_lengths) == 0
    # without trials, a trial is the episode
    np.testing.assert_allclose(infos["returned_trial_returns"], [2.0, 3.0])


def test_step_resets_only_at_the_end_and_auto_reset_starts_fresh():
    env = ToyEnv(num_agents=2, horizon=2)
    _, state = env.reset_to(jax.random.key(0), ToyConfig(jnp.array([3, 3])))
    step = jax.jit(env.step)
    _, state, *_ = step(jax.random.key(1), state, _spend((1, 1)))
    assert int(state.t) == 1
    _, state, _, dones, _ = step(jax.random.key(2), state, _spend((1, 1)))
    assert bool(dones["__all__"]) and int(state.t) == 0  # a new episode


@pytest.mark.slow
def test_vec_env_matches_per_env_steps_and_reuses_fresh_starts():
    base = ToyEnv(num_agents=2, horizon=3)
    vec = VecEnv(LogWrapper(base), num_envs=4)
    obs, vstate = vec.reset(jax.random.key(0))
    assert obs["agent_0"].shape == (4, 2)
    step = jax.jit(vec.step)
    key = jax.random.key(5)
    for _ in range(7):
        key, k_act, k_step = jax.random.split(key, 3)
        masks = vec.action_mask(vstate)
        actions = {
            a: jax.vmap(lambda k, m: jax.random.categorical(k, jnp.where(m, 0.0, -jnp.inf)))(
                jax.random.split(k_act, 4), masks[a]
            )
            for a in base.agents
        }
        fresh_before = vstate.fresh
        _, vstate, _, dones, infos = step(k_step, vstate, actions)
        # envs that ended restart from their buffered fresh start
        done = np.asarray(dones["__all__"])
        remaining = np.asarray(vstate.env_states.env_state.remaining)
        np.testing.assert_array_equal(remaining[done], np.asarray(fresh_before[1].remaining)[done])
        assert set(infos) >= {"returned_episode_returns", "returned_episode", "spent"}


# ---------------------------------------------------------------- the JaxMARL layout of step
def test_step_infos_are_per_agent_and_full_infos_is_the_opt_in():
    from dilemmax.envs.base import agent_infos

    infos = {
        "score": jnp.float32(2.0),
        "hit": jnp.array([True, False]),
        "cells": jnp.zeros((2, 4)),
        "nested": {"pay": jnp.array([1.0, 3.0])},
    }
    layout = agent_infos(infos, 2)
    assert set(layout) == {"score", "hit", "nested/pay"}  # the [2, 4] leaf is left out
    np.testing.assert_array_equal(layout["score"], [2.0, 2.0])
    np.testing.assert_array_equal(layout["nested/pay"], [1.0, 3.0])

    env = ToyEnv(num_agents=2, horizon=3)
    _, state = env.reset_to(jax.random.key(0), ToyConfig(jnp.array([3, 3])))
    _, _, _, _, infos = env.step(jax.random.key(1), state, _spend((1, 2)))
    assert all(leaf.shape == (2,) for leaf in jax.tree.leaves(infos))
    _, _, _, _, full = env.step(jax.random.key(1), state, _spend((1, 2)), full_infos=True)
    _, _, _, _, raw = env.step_env(jax.random.key(1), state, _spend((1, 2)))
    jax.tree.map(np.testing.assert_array_equal, full, raw)


def test_step_accepts_one_element_actions_and_legacy_keys():
    env = ToyEnv(num_agents=2, horizon=3)
    _, state = env.reset_to(jax.random.PRNGKey(0), ToyConfig(jnp.array([3, 3])))
    actions = {"agent_0": jnp.array([2]), "agent_1": jnp.array([1])}  # JaxMARL's (1,) shape
    _, after, rewards, _, _ = jax.jit(env.step)(jax.random.PRNGKey(1), state, actions)
    np.testing.assert_array_equal(after.remaining, [1, 2])
    assert float(rewards["agent_0"]) == 2.0


def test_jaxmarl_names_and_space_dicts():
    env = ToyEnv(num_agents=2)
    _, state = env.reset(jax.random.key(0))
    jax.tree.map(
        np.testing.assert_array_equal, env.get_avail_actions(state), env.action_mask(state)
    )
    assert set(env.action_spaces) == set(env.observation_spaces) == set(env.agents)
    assert env.action_spaces["agent_0"].n == 4
    assert env.observation_spaces["agent_1"].shape == (2,)


def test_log_wrapper_keeps_full_infos_on_request_and_trial_done_per_agent():
    env = LogWrapper(ToyEnv(num_agents=2, horizon=3))
    _, state = env.reset_to(jax.random.key(0), ToyConfig(jnp.array([3, 3])))
    _, _, _, _, infos = env.step(jax.random.key(1), state, _spend((1, 0)))
    assert all(leaf.shape == (2,) for leaf in jax.tree.leaves(infos))
    _, _, _, _, full = env.step(jax.random.key(1), state, _spend((1, 0)), full_infos=True)
    assert "spent" in full and "returned_episode" in full


def test_spaces_default_to_the_first_agent():
    env = ToyEnv(num_agents=2)
    assert env.action_space() == env.action_space("agent_0")
    assert env.observation_space().shape == env.observation_space("agent_1").shape
