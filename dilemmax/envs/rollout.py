"""Whole episodes inside JAX: jittable policies, ``lax.scan`` over steps, ``vmap`` over episodes.

This is the fast path of the arena and what the games' evaluation sweeps use: a batch of
configurations x episodes runs as one compiled program and returns the stacked
:class:`~dilemmax.envs.base.Rollout` and the env's per-episode metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from dilemmax.envs.base import MultiAgentEnv, Rollout


@struct.dataclass
class Observation:
    """What one agent receives at one step (the input of every policy).

    Attributes:
        array: the agent's observation (shape and dtype of ``env.observation_space(agent)``).
        mask: bool[num_actions], the legal actions.
        agent_index: int32[], the agent's position in ``env.agents``.
        state: the full env state. Privileged: only oracle references (say, a cleaner that knows
            the recipes) may read it; learned and language-model agents must not.
        text_fn: returns the agent's text view; set by the Python arena, None inside JAX.
    """

    array: jax.Array
    mask: jax.Array
    agent_index: jax.Array
    state: Any = None
    text_fn: Callable[[], str] | None = struct.field(pytree_node=False, default=None)

    def text(self) -> str:
        if self.text_fn is None:
            raise RuntimeError("no text view here: text is rendered by the Python arena only")
        return self.text_fn()


PolicyFn = Callable[[jax.Array, Observation], jax.Array]


def observations_for(env: MultiAgentEnv, obs: Mapping[str, jax.Array], state) -> dict:
    """agent -> :class:`Observation` built from ``env.get_obs``-style ``obs`` and ``state``."""
    masks = env.action_mask(state)
    return {
        agent: Observation(obs[agent], masks[agent], jnp.int32(i), state)
        for i, agent in enumerate(env.agents)
    }


def seat_policies(env: MultiAgentEnv, policies) -> list[PolicyFn]:
    """One policy per seat, from a single policy, a sequence, or a dict keyed by agent name."""
    if isinstance(policies, Mapping):
        missing = [a for a in env.agents if a not in policies]
        if missing:
            raise ValueError(f"no policy for agent(s) {missing}; agents are {env.agents}")
        return [policies[a] for a in env.agents]
    if isinstance(policies, Sequence):
        if len(policies) != env.num_agents:
            raise ValueError(f"got {len(policies)} policies for {env.num_agents} agents")
        return list(policies)
    return [policies] * env.num_agents


def act(env: MultiAgentEnv, policies: list[PolicyFn], key: jax.Array, obs, state) -> dict:
    """agent -> int32 action, each seat's policy on its own observation."""
    views = observations_for(env, obs, state)
    keys = jax.random.split(key, env.num_agents)
    return {
        agent: jnp.asarray(policy(k, views[agent]), jnp.int32)
        for agent, policy, k in zip(env.agents, policies, keys, strict=True)
    }


def run_episode(
    env: MultiAgentEnv, policies, key: jax.Array, config=None, num_steps: int | None = None
) -> Rollout:
    """One episode of at most ``num_steps`` (default ``env.max_steps``) steps; jittable.

    After the terminal step the state is frozen and the remaining steps are padding
    (``valid`` False), so every episode has the same static length.
    """
    seats = seat_policies(env, policies)
    num_steps = env.max_steps if num_steps is None else num_steps
    key_config, key_reset, key_run = jax.random.split(key, 3)
    if config is None:
        config = env.sample_config(key_config)
    obs, state = env.reset_to(key_reset, config)

    def one_step(carry, step_key):
        obs, state, finished = carry
        key_act, key_step = jax.random.split(step_key)
        actions = act(env, seats, key_act, obs, state)
        next_obs, next_state, rewards, dones, infos = env.step_env(key_step, state, actions)
        keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(finished, o, n), new, old)
        next_obs, next_state = keep((next_obs, next_state), (obs, state))
        out = (actions, rewards, dones, infos, ~finished)
        return (next_obs, next_state, finished | dones["__all__"]), out

    (_, final_state, _), (actions, rewards, dones, infos, valid) = jax.lax.scan(
        one_step, (obs, state, jnp.bool_(False)), jax.random.split(key_run, num_steps)
    )
    return Rollout(actions, rewards, dones, infos, valid, final_state)


def run_episodes(
    env: MultiAgentEnv,
    policies,
    key: jax.Array,
    num_episodes: int,
    configs=None,
    num_steps: int | None = None,
    jit: bool = True,
) -> tuple[Rollout, dict[str, jax.Array]]:
    """``num_episodes`` episodes per configuration, all in one vmapped program.

    Args:
        configs: None (each episode samples its configuration), or a batched configuration
            pytree with leading axis C (say ``context_grid()`` of the consequence game).

    Returns:
        (rollouts, metrics): leaves with leading axes [E, ...] without configs, [C, E, ...] with.
    """

    def episodes_on(config, config_key):
        keys = jax.random.split(config_key, num_episodes)
        rollouts = jax.vmap(lambda k: run_episode(env, policies, k, config, num_steps))(keys)
        return rollouts, jax.vmap(env.episode_metrics)(rollouts)

    if configs is None:
        fn = lambda k: episodes_on(None, k)
    else:
        num_configs = jax.tree.leaves(configs)[0].shape[0]
        fn = lambda k: jax.vmap(episodes_on)(configs, jax.random.split(k, num_configs))
    return (jax.jit(fn) if jit else fn)(key)
