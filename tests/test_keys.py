"""Every public function taking a key accepts both kinds: ``jax.random.key`` (typed) and the legacy
``jax.random.PRNGKey`` (uint32[2]) most JAX code still passes.

Shape checks run under ``jax.eval_shape`` (traced, not compiled) so the whole sweep stays cheap;
``moral_hazard.evaluate`` (which reshapes split keys in Python) runs for real.
"""

import jax
import numpy as np
import pytest

import dilemmax
from dilemmax.agents.policy import random_policy
from dilemmax.envs.base import typed_key
from dilemmax.envs.rollout import run_episode, run_episodes
from dilemmax.train.configure import make_config
from dilemmax.train.ppo import make_train

KEYS = {"typed": jax.random.key(0), "legacy": jax.random.PRNGKey(0)}


def test_typed_key_wraps_legacy_keys_and_refuses_other_arrays():
    legacy = jax.random.PRNGKey(3)
    np.testing.assert_array_equal(jax.random.key_data(typed_key(legacy)), legacy)
    assert typed_key(KEYS["typed"]) is KEYS["typed"]
    assert typed_key(jax.random.split(legacy, 4)).shape == (4,)
    with pytest.raises(TypeError, match="PRNG key"):
        typed_key(np.zeros(3, np.float32))


@pytest.mark.slow
@pytest.mark.parametrize("kind", KEYS)
@pytest.mark.parametrize("env_id", dilemmax.registered_envs())
def test_env_functions_accept_both_key_kinds(env_id, kind):
    env = dilemmax.make(env_id)
    key = KEYS[kind]
    obs, state = jax.eval_shape(env.reset, key)
    config = jax.eval_shape(env.sample_config, key)
    jax.eval_shape(env.reset_to, key, config)
    actions = {a: jax.ShapeDtypeStruct((), np.int32) for a in env.agents}
    jax.eval_shape(env.step, key, state, actions)
    jax.eval_shape(env.step_env, key, state, actions)
    for agent in env.agents[:1]:
        jax.eval_shape(env.action_space(agent).sample, key)
        jax.eval_shape(env.observation_space(agent).sample, key)


@pytest.mark.parametrize("kind", KEYS)
def test_rollout_functions_accept_both_key_kinds(kind):
    env = dilemmax.make("moral_hazard")
    jax.eval_shape(lambda k: run_episode(env, random_policy, k), KEYS[kind])
    jax.eval_shape(lambda k: run_episodes(env, random_policy, k, 2, jit=False), KEYS[kind])


@pytest.mark.slow
@pytest.mark.parametrize("kind", KEYS)
def test_moral_hazard_evaluate_accepts_both_key_kinds(kind):
    from dilemmax.envs.moral_hazard.evaluate import evaluate

    configs = dilemmax.make("moral_hazard").sample_config(jax.random.key(1))
    results = evaluate(random_policy, configs, 2, KEYS[kind], num_resamples=16)
    assert set(results) == {"condition_0"}


@pytest.mark.slow
@pytest.mark.parametrize("kind", KEYS)
def test_make_train_accepts_both_key_kinds(kind):
    config = make_config("moral_hazard", overrides={"num_envs": 4, "num_steps": 3})
    jax.eval_shape(make_train(config), KEYS[kind])
