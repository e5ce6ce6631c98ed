"""JaxMARL's own wrappers drive every dilemmax env, the way JaxMARL's baselines do.

JaxMARL's IPPO scripts are not part of its wheel or sdist, so they cannot run in CI as files.
``_ippo_ff`` below is a compact feed-forward IPPO that talks to the env exactly as JaxMARL's
``ippo_ff_mpe.py`` / ``ippo_ff_overcooked.py`` do: ``jaxmarl.wrappers.baselines.LogWrapper``
(or ``MPELogWrapper``) around the env, ``jax.random.PRNGKey`` keys, observations stacked over
``env.agents`` and reshaped to ``[num_agents * num_envs, -1]`` (which flattens the grid games'
image observations, as the overcooked script does), actions unbatched to ``(1,)``-shaped arrays,
and every info leaf reshaped to ``num_agents * num_envs``. The Q-learning baselines'
``CTRolloutManager`` runs unchanged on every env too.
"""

from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dilemmax

# JaxMARL (4 s to import, with gymnax and what that pulls in) is imported by the fixture below
# when a test runs, not when the suite is collected (tests/test_collection_imports.py). Only its
# top-level package is looked up here: finding jaxmarl.wrappers.baselines would import jaxmarl.
pytestmark = [
    pytest.mark.integration,  # CI may deselect: -m 'not integration'
    pytest.mark.skipif(importlib.util.find_spec("jaxmarl") is None, reason="needs jaxmarl"),
]

ENV_IDS = ["consequence", "moral_hazard", "open_cleanup", "open_harvest"]
NUM_ENVS, NUM_STEPS, NUM_UPDATES = 2, 8, 2


def _batchify(x: dict, agents, num_actors):
    return jnp.stack([x[a] for a in agents]).reshape((num_actors, -1))


def _unbatchify(x, agents, num_envs, num_agents):
    x = x.reshape((num_agents, num_envs, -1))
    return {a: x[i] for i, a in enumerate(agents)}


def _mlp(params, x):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return h @ params["pi"], (h @ params["v"])[:, 0]


def _ippo_ff(env, key):
    """A few IPPO updates with JaxMARL's batching; returns the stacked info of every step."""
    num_actors = env.num_agents * NUM_ENVS
    n_actions = env.action_space(env.agents[0]).n
    obs_dim = int(np.prod(env.observation_space(env.agents[0]).shape))
    k1, k2, k3, key = jax.random.split(key, 4)
    params = {
        "w1": jax.random.normal(k1, (obs_dim, 32)) * 0.05,
        "b1": jnp.zeros(32),
        "pi": jax.random.normal(k2, (32, n_actions)) * 0.01,
        "v": jax.random.normal(k3, (32, 1)) * 0.01,
    }
    key, key_reset = jax.random.split(key)
    obs, state = jax.vmap(env.reset)(jax.random.split(key_reset, NUM_ENVS))

    def env_step(carry, _):
        params, state, obs, key = carry
        key, key_act, key_step = jax.random.split(key, 3)
        obs_batch = _batchify(obs, env.agents, num_actors).astype(jnp.float32)
        logits, value = _mlp(params, obs_batch)
        action = jax.random.categorical(key_act, logits)
        log_prob = jax.nn.log_softmax(logits)[jnp.arange(num_actors), action]
        env_act = _unbatchify(action, env.agents, NUM_ENVS, env.num_agents)
        obs, state, reward, done, info = jax.vmap(env.step)(
            jax.random.split(key_step, NUM_ENVS), state, env_act
        )
        info = jax.tree.map(lambda x: x.reshape(num_actors), info)
        done = _batchify(done, env.agents, num_actors).squeeze()
        reward = _batchify(reward, env.agents, num_actors).squeeze()
        return (params, state, obs, key), (obs_batch, action, log_prob, value, reward, done, info)

    def update(carry, _):
        carry, (x, a, old_lp, v, r, d, info) = jax.lax.scan(env_step, carry, None, NUM_STEPS)
        params = carry[0]
        adv = r - v  # one-step advantage: enough to exercise the gradient path
        x, a, old_lp, adv = (z.reshape((-1,) + z.shape[2:]) for z in (x, a, old_lp, adv))

        def loss(p):
            logits, value = _mlp(p, x)
            lp = jax.nn.log_softmax(logits)[jnp.arange(a.shape[0]), a]
            ratio = jnp.exp(lp - old_lp)
            return -jnp.mean(jnp.minimum(ratio * adv, jnp.clip(ratio, 0.8, 1.2) * adv))

        grads = jax.grad(loss)(params)
        params = jax.tree.map(lambda p, g: p - 1e-3 * g, params, grads)
        return (params, *carry[1:]), info

    _, infos = jax.lax.scan(update, (params, state, obs, key), None, NUM_UPDATES)
    return infos


@pytest.fixture(scope="module")
def jaxmarl_baselines():
    """JaxMARL's baseline wrappers (skipped, as before, where they do not import)."""
    return pytest.importorskip("jaxmarl.wrappers.baselines")


@pytest.fixture(scope="module", params=ENV_IDS)
def env_id(request):
    return request.param


@pytest.mark.slow
@pytest.mark.parametrize("log_wrapper", ["LogWrapper", "MPELogWrapper"])
def test_ippo_ff_runs_under_jaxmarls_log_wrapper(env_id, log_wrapper, jaxmarl_baselines):
    if log_wrapper == "MPELogWrapper" and env_id != "moral_hazard":
        pytest.skip("one env is enough for the reward-scaling variant")
    env = getattr(jaxmarl_baselines, log_wrapper)(dilemmax.make(env_id))
    infos = jax.jit(lambda k: _ippo_ff(env, k))(jax.random.PRNGKey(0))
    shape = (NUM_UPDATES, NUM_STEPS, env.num_agents * NUM_ENVS)
    assert infos["returned_episode_returns"].shape == shape
    assert all(leaf.shape == shape for leaf in jax.tree.leaves(infos))
    assert np.isfinite(np.asarray(infos["returned_episode_returns"])).all()


@pytest.mark.slow
def test_ippo_ff_trains_focal_agents_on_a_scenario_set_under_jaxmarls_log_wrapper(
    jaxmarl_baselines,
):
    """A scenario set is an env like the games: JaxMARL's wrapper and batching drive its focal
    seats while the background plays inside the step."""
    env = jaxmarl_baselines.LogWrapper(
        dilemmax.make("scenarios", game="moral_hazard", scenario_set="test")
    )
    assert env.agents == ["agent_0"]
    infos = jax.jit(lambda k: _ippo_ff(env, k))(jax.random.PRNGKey(0))
    assert infos["returned_episode_returns"].shape == (NUM_UPDATES, NUM_STEPS, NUM_ENVS)
    assert np.isfinite(np.asarray(infos["returned_episode_returns"])).all()


@pytest.mark.slow
def test_episode_returns_logged_by_jaxmarl_match_the_rewards(jaxmarl_baselines):
    """moral_hazard ends every 3 steps: JaxMARL's LogWrapper reports the summed rewards. The
    episode is one compiled program (a scan over the wrapper's own step), not one per op."""
    env = jaxmarl_baselines.LogWrapper(dilemmax.make("moral_hazard"))

    @jax.jit
    def episode(key):
        _, state = env.reset(jax.random.PRNGKey(1))

        def step(state, key_step):
            mask = env.get_avail_actions(state.env_state)
            actions = {a: jnp.argmax(mask[a])[None] for a in env.agents}  # (1,)-shaped
            _, state, rewards, dones, info = env.step(key_step, state, actions)
            return state, (jnp.stack([rewards[a] for a in env.agents]), dones, info)

        return jax.lax.scan(step, state, jax.random.split(key, 3))[1]

    rewards, dones, info = jax.tree.map(np.asarray, episode(jax.random.PRNGKey(2)))
    assert dones["__all__"][-1] and not dones["__all__"][:-1].any()
    assert info["returned_episode"][-1].all()
    np.testing.assert_allclose(info["returned_episode_returns"][-1], rewards.sum(0), rtol=1e-6)


@pytest.mark.slow
def test_ct_rollout_manager(env_id, jaxmarl_baselines):
    """The rollout manager of JaxMARL's Q-learning baselines, unchanged, on every env: its
    batched reset, samplers and step, traced into one program per env."""
    env = dilemmax.make(env_id)
    manager = jaxmarl_baselines.CTRolloutManager(env, batch_size=2)
    obs_dim = int(np.prod(env.observation_space(env.agents[0]).shape))
    assert manager.max_obs_length == obs_dim
    assert manager.max_action_space == env.action_space(env.agents[0]).n

    @jax.jit
    def rollout(key):
        key_reset, key = jax.random.split(key)
        obs, state = manager.batch_reset(key_reset)

        def step(state, key):
            key_act, key_step = jax.random.split(key)
            actions = {a: manager.batch_sample(key_act, a) for a in env.agents}
            _, state, rewards, _, infos = manager.batch_step(key_step, state, actions)
            return state, (rewards, infos)

        return obs, jax.lax.scan(step, state, jax.random.split(key, 2))[1]

    obs, (rewards, infos) = rollout(jax.random.PRNGKey(1))
    assert obs[env.agents[0]].shape == (2, obs_dim + env.num_agents)
    assert rewards["__all__"].shape == (2, 2)  # (steps, batch)
    assert all(leaf.shape == (2, 2, env.num_agents) for leaf in jax.tree.leaves(infos))
