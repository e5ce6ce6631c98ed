"""Whole episodes inside JAX: jittable policies, ``lax.scan`` over steps, ``vmap`` over episodes.

This is the fast path of the arena and what the games' evaluation sweeps use: a batch of
configurations x episodes runs as one compiled program and returns the stacked
:class:`~dilemmax.envs.base.Rollout` and the env's per-episode metrics.

Carried policies (a recurrent network, say :class:`dilemmax.agents.trained.RecurrentPolicy`)
keep a memory: they have ``initial_carry() -> carry``, ``step(carry, key, observation) ->
(action, carry)`` and ``record(carry, seat, action, rewards float32[A], trial_done) -> carry``.
The rollout starts each episode from ``initial_carry()``, and after every env step records the
seat's action, all rewards and whether a trial ended, so the memory spans the episode's trials.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
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


def is_carried(policy) -> bool:
    """Whether ``policy`` keeps a memory the rollout must carry (see the module docstring)."""
    return callable(getattr(policy, "initial_carry", None))


def initial_carries(policies: list) -> list:
    """Each seat's carry at an episode start (``()`` for stateless policies)."""
    return [p.initial_carry() if is_carried(p) else () for p in policies]


class PolicyError(TypeError):
    """A policy returned something that is not an action."""


def traced_action(action, agent: str) -> jax.Array:
    """int32[] of a jittable policy's action (a traced value), or :class:`PolicyError` naming
    the seat.

    Inside JAX only the type is known, so the check is on dtype and shape: an integer with one
    element passes (its value, even out of range, is the env's to judge); None, floats, bools
    and other shapes are refused, since casting them would play a move nobody chose.
    """
    dtype, size = None, 0
    if action is not None and not isinstance(action, str | bytes):  # result_type(None): float
        with contextlib.suppress(Exception):  # not an array-like at all (an object): refused
            dtype, size = jnp.result_type(action), int(np.prod(jnp.shape(action)))
    if dtype is None or not jnp.issubdtype(dtype, jnp.integer) or size != 1:
        what = f"{dtype}{list(jnp.shape(action))}" if dtype is not None else repr(action)[:60]
        raise PolicyError(f"the policy of seat {agent} returned {what}; expected an integer action")
    return jnp.reshape(action, ()).astype(jnp.int32)


def act_carried(
    env: MultiAgentEnv, policies: list, key: jax.Array, obs, state, carries: list
) -> tuple[dict, list]:
    """Like :func:`act` (same keys per seat), stepping the carried policies' memories."""
    views = observations_for(env, obs, state)
    keys = jax.random.split(key, env.num_agents)
    actions, new = {}, []
    for agent, policy, k, carry in zip(env.agents, policies, keys, carries, strict=True):
        if is_carried(policy):
            action, carry = policy.step(carry, k, views[agent])
        else:
            action = policy(k, views[agent])
        actions[agent] = traced_action(action, agent)
        new.append(carry)
    return actions, new


def record_step(env: MultiAgentEnv, policies: list, carries: list, actions, rewards, infos, dones):
    """The carries after a step: each carried seat records its action, the rewards float32[A]
    and the trial-done flag (``infos["trial_done"]``, else the episode end)."""
    all_rewards = jnp.stack([jnp.asarray(rewards[a], jnp.float32) for a in env.agents])
    trial_done = infos.get("trial_done", dones["__all__"])
    return [
        p.record(c, i, actions[a], all_rewards, trial_done) if is_carried(p) else c
        for i, (a, p, c) in enumerate(zip(env.agents, policies, carries, strict=True))
    ]


def act(env: MultiAgentEnv, policies: list[PolicyFn], key: jax.Array, obs, state) -> dict:
    """agent -> int32 action, each seat's policy on its own observation."""
    views = observations_for(env, obs, state)
    keys = jax.random.split(key, env.num_agents)
    return {
        agent: traced_action(policy(k, views[agent]), agent)
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
        obs, state, finished, memories = carry
        key_act, key_step = jax.random.split(step_key)
        actions, next_memories = act_carried(env, seats, key_act, obs, state, memories)
        next_obs, next_state, rewards, dones, infos = env.step_env(key_step, state, actions)
        next_memories = record_step(env, seats, next_memories, actions, rewards, infos, dones)
        keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(finished, o, n), new, old)
        next_obs, next_state, next_memories = keep(
            (next_obs, next_state, next_memories), (obs, state, memories)
        )
        out = (actions, rewards, dones, infos, ~finished)
        return (next_obs, next_state, finished | dones["__all__"], next_memories), out

    start = (obs, state, jnp.bool_(False), initial_carries(seats))
    (_, final_state, _, _), (actions, rewards, dones, infos, valid) = jax.lax.scan(
        one_step, start, jax.random.split(key_run, num_steps)
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
