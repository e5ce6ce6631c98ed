"""The environment contract (docs/architecture.md, "The design in brief"), checked on every
registered env.

Parametrised over ``dilemmax.registered_envs()`` so a newly registered game is covered with no new
test code. Each env is made once per module (:func:`game`), with its jitted reset and step: the
tests that play it jitted share those programs instead of compiling their own.
"""

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dilemmax
from dilemmax.agents.policy import random_policy
from dilemmax.envs.rollout import run_episode, run_episodes
from dilemmax.wrappers.log import LogWrapper

ENV_IDS = dilemmax.registered_envs()


@dataclass(frozen=True)
class Game:
    """One registered env and its jitted ``reset`` and ``step``, shared by this module's tests."""

    env_id: str
    env: object
    reset: object
    step: object
    actions: object  # (key, state) -> random legal actions, jitted: the player, not the env


@pytest.fixture(scope="module", params=ENV_IDS)
def game(request) -> Game:
    """Module-scoped, so pytest runs every test of one env before making the next one."""
    env = dilemmax.make(request.param)
    actions = jax.jit(lambda key, state: _random_actions(env, key, state))
    return Game(request.param, env, jax.jit(env.reset), jax.jit(env.step), actions)


def _random_actions(env, key, state):
    masks = env.action_mask(state)
    keys = jax.random.split(key, env.num_agents)
    return {
        a: jax.random.categorical(k, jnp.where(masks[a], 0.0, -jnp.inf)).astype(jnp.int32)
        for a, k in zip(env.agents, keys, strict=True)
    }


def _play(game, key, num_steps, reset_fn, step_fn):
    """``reset_fn`` then ``num_steps`` of ``step_fn``; the actions come from ``game.actions``
    (jitted) whichever the env's functions are, so an eager play runs only the env eagerly."""
    key, key_reset = jax.random.split(key)
    obs, state = reset_fn(key_reset)
    trace = [obs]
    for _ in range(num_steps):
        key, key_act, key_step = jax.random.split(key, 3)
        obs, state, rewards, dones, _ = step_fn(key_step, state, game.actions(key_act, state))
        trace.append((obs, rewards, dones))
    return trace


def test_unknown_env_and_option_errors_list_the_valid_ones():
    with pytest.raises(ValueError, match="registered: .*consequence"):
        dilemmax.make("no_such_game")
    with pytest.raises(TypeError, match="valid options"):
        dilemmax.make("toy", no_such_option=1)


@pytest.mark.slow
def test_spaces_masks_and_observations(game):
    env = game.env
    obs, state = game.reset(jax.random.key(0))
    masks = env.action_mask(state)
    assert list(obs) == env.agents
    for agent in env.agents:
        space = env.observation_space(agent)
        assert obs[agent].shape == space.shape and obs[agent].dtype == space.dtype
        assert bool(space.contains(obs[agent]))
        assert masks[agent].shape == (env.action_space(agent).n,) and masks[agent].dtype == bool
        assert bool(masks[agent].any())
        assert bool(space.contains(space.sample(jax.random.key(1))))
        assert bool(
            env.action_space(agent).contains(env.action_space(agent).sample(jax.random.key(2)))
        )


@pytest.mark.slow
def test_same_key_same_trajectory_jitted_or_not(game):
    env = game.env
    # Eager, each primitive of reset and step is its own program (compiled once, whatever the
    # number of steps): three steps cover reset and transitions.
    steps = 3
    eager = _play(game, jax.random.key(3), steps, env.reset, env.step)
    jitted = _play(game, jax.random.key(3), steps, game.reset, game.step)
    again = _play(game, jax.random.key(3), steps, game.reset, game.step)  # same key, same result
    for a, b, c in zip(jitted, again, eager, strict=True):
        jax.tree.map(np.testing.assert_array_equal, a, b)
        jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-6), a, c)


@pytest.mark.slow
def test_reset_to_a_config_is_reproducible_and_vmaps(game):
    env = game.env

    # Jitted: eager dispatch of a grid reset costs seconds per call, and vmap is what is tested.
    # Sampling and the batched reset are one program; the single reset is another.
    def sample_and_reset(key_config, key_reset):
        config = env.sample_config(key_config)
        return config, env.reset_to(key_reset, config)[0]

    keys = jax.random.split(jax.random.key(4), 3), jax.random.split(jax.random.key(5), 3)
    configs, obs = jax.jit(jax.vmap(sample_and_reset))(*keys)
    one = jax.tree.map(lambda x: x[1], configs)
    obs1, _ = jax.jit(env.reset_to)(jax.random.split(jax.random.key(5), 3)[1], one)
    for agent in env.agents:
        np.testing.assert_array_equal(obs[agent][1], obs1[agent])


@pytest.mark.slow
def test_random_episodes_end_and_report_metrics(game):
    rollouts, metrics = run_episodes(game.env, random_policy, jax.random.key(6), num_episodes=2)
    assert bool(rollouts.valid[:, 0].all())
    ended = rollouts.dones["__all__"] & rollouts.valid
    assert np.asarray(ended.sum(axis=1)).tolist() == [1, 1], "every episode ends exactly once"
    for name, value in metrics.items():
        assert value.shape[0] == 2, name
        assert bool(jnp.all(jnp.isfinite(jnp.asarray(value, jnp.float32)))), name


@pytest.mark.slow
def test_scripted_policies_play(game):
    # Two seats: each seat inlines every policy into the program (a seat is a switch over them
    # all), so its size grows with the seats; the default size plays in the tests above.
    env = dilemmax.make(game.env_id, num_agents=2) if game.env.num_agents > 2 else game.env
    policies = list(env.scripted_policies().values())
    if not policies:
        pytest.skip("no scripted policies")

    # Every scripted policy in one compiled program: episode i seats policy i everywhere.
    def episode(index, key):
        policy = lambda k, o: jax.lax.switch(index, policies, k, o).astype(jnp.int32)
        rollout = run_episode(env, policy, key, num_steps=min(env.max_steps, 100))
        return rollout.valid.sum(), env.episode_metrics(rollout)

    indices = jnp.arange(len(policies))
    keys = jax.random.split(jax.random.key(8), len(policies))
    lengths, metrics = jax.jit(jax.vmap(episode))(indices, keys)
    assert bool((lengths > 0).all())
    for name, value in metrics.items():
        assert bool(jnp.all(jnp.isfinite(jnp.asarray(value, jnp.float32)))), name


@pytest.mark.slow
def test_log_wrapper_under_vmap(game):
    env = LogWrapper(game.env)
    keys = jax.random.split(jax.random.key(9), 2)

    def reset_act_and_step(key):  # one program: the reset, the actions and the step
        _, state = env.reset(key)
        return env.step(key, state, _random_actions(env, jax.random.key(0), state.env_state))

    _, _, _, _, infos = jax.jit(jax.vmap(reset_act_and_step))(keys)
    assert infos["returned_episode_returns"].shape == (2, env.num_agents)
    assert infos["returned_episode"].dtype == bool
