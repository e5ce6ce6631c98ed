"""PettingZoo's own API and seed tests on every registered env, plus the wrapper's guarantees."""

import numpy as np
import pytest
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test

import dilemmax
from dilemmax.wrappers.pettingzoo import aec_env, parallel_env

ENV_IDS = dilemmax.registered_envs()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_parallel_api(env_id):
    parallel_api_test(parallel_env(env_id), num_cycles=60)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_aec_api(env_id):
    api_test(aec_env(env_id), num_cycles=60)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_parallel_seed(env_id):
    parallel_seed_test(lambda: parallel_env(env_id), num_cycles=60)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_aec_seed(env_id):
    seed_test(lambda: aec_env(env_id), num_cycles=60)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_types_spaces_and_masks(env_id):
    env = parallel_env(env_id)
    obs, infos = env.reset(seed=3)
    for agent in env.agents:
        space = env.observation_space(agent)
        assert space is env.observation_space(agent)  # the same object on every call
        assert env.action_space(agent) is env.action_space(agent)
        assert obs[agent].dtype == space.dtype and space.contains(obs[agent])
        mask = infos[agent]["action_mask"]
        assert mask.dtype == np.int8 and mask.shape == (env.action_space(agent).n,)
        assert mask.any()
    actions = {a: env.action_space(a).sample() for a in env.agents}
    _, rewards, terms, truncs, infos = env.step(actions)
    assert all(type(r) is float for r in rewards.values())
    assert all(type(t) is bool for t in terms.values())
    assert all(type(t) is bool for t in truncs.values())


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_illegal_action_raises_and_leaves_episode_as_it_was(env_id):
    env = parallel_env(env_id)
    env.reset(seed=0)
    agent = env.agents[0]
    before = env.jax_state
    n = env.action_space(agent).n
    with pytest.raises(ValueError, match=rf"{agent}.*legal actions"):
        env.step({a: (n if a == agent else env.action_space(a).sample()) for a in env.agents})
    assert env.jax_state is before
    aec = aec_env(env_id)
    aec.reset(seed=0)
    with pytest.raises(ValueError, match="legal actions"):
        aec.step(-1)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_ansi_render(env_id):
    env = parallel_env(env_id, render_mode="ansi")
    env.reset(seed=1)
    text = env.render()
    assert isinstance(text, str) and text


def test_masked_illegal_action_names_the_legal_set():
    env = parallel_env("toy")
    env.reset(seed=0)
    budget = int(env.jax_state.remaining[0])
    with pytest.raises(ValueError) as err:
        env.step({"agent_0": budget + 1, "agent_1": 0})
    assert str(list(range(budget + 1))) in str(err.value)
    assert "agent_0" in str(err.value)


def test_done_agents_are_removed():
    env = parallel_env("toy", horizon=4)
    env.reset(seed=0)
    first = env.agents[0]
    budget = int(env.jax_state.remaining[0])
    _, _, terms, _, _ = env.step({a: (budget if a == first else 0) for a in env.agents})
    assert terms[first] and first not in env.agents
    assert env.agents  # the other agent still plays


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_rgb_render_where_supported(env_id):
    if "rgb_array" not in dilemmax.make(env_id).render_modes:
        with pytest.raises(ValueError, match="render_mode"):
            parallel_env(env_id, render_mode="rgb_array")
        return
    env = parallel_env(env_id, render_mode="rgb_array")
    env.reset(seed=1)
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3
