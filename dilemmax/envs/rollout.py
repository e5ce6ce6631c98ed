"""The one episode driver: key schedule, jobs, seat loop, action check; whole episodes in JAX.

Every way of playing an episode goes through the functions here, so they all play the same
episodes from the same key:

- :func:`run_episode` / :func:`run_episodes`, the fast path: jittable policies, ``lax.scan`` over
  steps, ``vmap`` over episodes; a batch of configurations x episodes is one compiled program
  returning the stacked :class:`~dilemmax.envs.base.Rollout` and the env's per-episode metrics;
- :class:`dilemmax.envs.loop.EpisodeLoop`, the same steps as one jitted call each, with a hook
  for the seats played outside JAX (the arena's Python policies, batched language-model play).

The key schedule (:func:`episode_keys`, :func:`step_keys`, :func:`step_parts`,
:func:`job_keys`) and the step (:func:`start_episode`, :func:`act_seats`, :func:`advance`) are
written once, here; a driver only chooses how to loop over them.

Carried policies (a recurrent network, say :class:`dilemmax.agents.trained.RecurrentPolicy`)
keep a memory: they have ``initial_carry() -> carry``, ``step(carry, key, observation) ->
(action, carry)`` and ``record(carry, seat, action, rewards float32[A], trial_done) -> carry``.
Each episode starts from ``initial_carry()``, and after every env step the seat records its
action, all rewards and whether a trial ended, so the memory spans the episode's trials.

A seat given as ``None`` is a placeholder: it plays action 0 inside JAX and a hook outside JAX
fills in its real action before the env steps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from dilemmax.envs.base import MultiAgentEnv, Rollout
from dilemmax.envs.guards import INVALID_ACTION
from dilemmax.envs.option_spec import INT32_MAX, INT32_MIN, shown

EPISODE_AXIS = "episodes"  # the axis of the mesh :func:`run_episodes` spreads episodes over


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


# ----------------------------------------------------------------------------- the key schedule
def episode_keys(key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(key_config, key_reset, key_run) of one episode: its configuration (when sampled), its
    reset, and the run the step keys come from."""
    key_config, key_reset, key_run = jax.random.split(key, 3)
    return key_config, key_reset, key_run


def step_keys(key_run: jax.Array, num_steps: int) -> jax.Array:
    """key[num_steps], one per step. With JAX's default (partitionable) threefry, step ``t``'s key
    does not depend on ``num_steps``, so a shorter episode plays the first steps of a longer one."""
    return jax.random.split(key_run, num_steps)


def step_parts(step_key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(key_act, key_env) of one step: the seats' keys come from the first, ``step_env``'s is the
    second."""
    key_act, key_env = jax.random.split(step_key)
    return key_act, key_env


def seat_keys(key_act: jax.Array, num_agents: int) -> jax.Array:
    """key[A]: seat ``i`` acts with ``seat_keys(...)[i]``."""
    return jax.random.split(key_act, num_agents)


def job_keys(key: jax.Array, num_episodes: int, num_configs: int | None = None) -> jax.Array:
    """Each episode's key: key[E] without configurations, key[C, E] with C of them (one key per
    configuration, split into its episodes); jittable."""
    if num_configs is None:
        return jax.random.split(key, num_episodes)
    per_config = jax.random.split(key, num_configs)
    return jax.vmap(lambda k: jax.random.split(k, num_episodes))(per_config)


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to play outside one compiled program.

    Attributes:
        episode: int, its position in the run (configuration-major: ``c * E + e``).
        key: its key (the one :func:`run_episodes` gives the same episode).
        config_index: int, the configuration it plays (an index into ``configs``), or None when
            the episode samples its own.
    """

    episode: int
    key: jax.Array
    config_index: int | None


def episode_jobs(key: jax.Array, num_episodes: int, num_configs: int | None) -> list[EpisodeJob]:
    """The episodes of a run, in order, keyed exactly as :func:`run_episodes` keys them."""
    keys = job_keys(key, num_episodes, num_configs)
    if num_configs is None:
        return [EpisodeJob(e, keys[e], None) for e in range(num_episodes)]
    return [
        EpisodeJob(c * num_episodes + e, keys[c, e], c)
        for c in range(num_configs)
        for e in range(num_episodes)
    ]


def num_configs_of(configs) -> int | None:
    """C of a batched configuration pytree (leading axis C), or None for no configurations."""
    return None if configs is None else jax.tree.leaves(configs)[0].shape[0]


# ----------------------------------------------------------------------------- seats
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


def is_jittable(policy) -> bool:
    """Whether ``policy`` runs inside JAX (Python policies, such as a model, set ``jittable``
    False)."""
    return bool(getattr(policy, "jittable", True))


def is_carried(policy) -> bool:
    """Whether ``policy`` keeps a memory the rollout must carry (see the module docstring)."""
    return callable(getattr(policy, "initial_carry", None))


def initial_carries(policies: list) -> list:
    """Each seat's carry at an episode start (``()`` for stateless policies and placeholders)."""
    return [p.initial_carry() if is_carried(p) else () for p in policies]


def observations_for(env: MultiAgentEnv, obs: Mapping[str, jax.Array], state) -> dict:
    """agent -> :class:`Observation` built from ``env.get_obs``-style ``obs`` and ``state``."""
    masks = env.action_mask(state)
    return {
        agent: Observation(obs[agent], masks[agent], jnp.int32(i), state)
        for i, agent in enumerate(env.agents)
    }


# ----------------------------------------------------------------------------- the action check
class PolicyError(TypeError):
    """A policy returned something that is not an action."""


def policy_action(action: Any, agent: str) -> jax.Array:
    """int32[] of a policy's returned action, or :class:`PolicyError` naming the seat.

    The one check of every policy, inside JAX (a traced value) and outside (a Python policy's
    return). Integers (Python, numpy, JAX; 0-d or one element) pass, even out of range: the env
    flags those as invalid moves, as it does for a model's illegal reply. None, floats, bools,
    strings and other shapes are refused, since casting them would play a move nobody chose.
    Outside JAX a value beyond int32 becomes the invalid action; inside, int32 is already the
    widest integer unless x64 is on.
    """
    dtype, shape = _dtype_and_shape(action)
    if dtype is None or dtype.kind not in "iu" or int(np.prod(shape)) != 1:
        what = f"{dtype}{list(shape)}" if hasattr(action, "dtype") else shown(action)
        raise PolicyError(f"the policy of seat {agent} returned {what}; expected an integer action")
    if isinstance(action, jax.core.Tracer):
        return jnp.reshape(action, ()).astype(jnp.int32)
    value = int(np.asarray(action).reshape(()))
    if not INT32_MIN <= value <= INT32_MAX:
        value = INVALID_ACTION  # out of int32: an invalid action, flagged by the env
    return jnp.int32(value)


def _dtype_and_shape(action: Any) -> tuple[np.dtype | None, tuple]:
    """(dtype, shape) of an array-like action; (None, ()) for what is none (None, an object)."""
    if hasattr(action, "dtype") and hasattr(action, "shape"):  # numpy, JAX, traced values
        return np.dtype(action.dtype), tuple(action.shape)
    if action is None:
        return None, ()
    with contextlib.suppress(Exception):  # an object numpy cannot read is not an action
        array = np.asarray(action)
        return array.dtype, array.shape
    return None, ()


# ----------------------------------------------------------------------------- the seat loop
def act_carried(
    env: MultiAgentEnv, policies: list, key_act: jax.Array, obs, state, carries: list
) -> tuple[dict, list]:
    """agent -> int32 action and the seats' carries after acting: each seat's policy on its own
    observation and key (a carried policy steps its memory; a ``None`` seat plays 0)."""
    views = observations_for(env, obs, state)
    keys = seat_keys(key_act, env.num_agents)
    actions, new = {}, []
    for agent, policy, k, carry in zip(env.agents, policies, keys, carries, strict=True):
        if policy is None:  # played outside JAX: the hook overwrites it
            action = jnp.int32(0)
        elif is_carried(policy):
            action, carry = policy.step(carry, k, views[agent])
        else:
            action = policy(k, views[agent])
        actions[agent] = policy_action(action, agent)
        new.append(carry)
    return actions, new


def act(env: MultiAgentEnv, policies: list[PolicyFn], key_act: jax.Array, obs, state) -> dict:
    """agent -> int32 action of stateless policies (the seat loop of :func:`act_carried`)."""
    return act_carried(env, policies, key_act, obs, state, [()] * env.num_agents)[0]


def record_step(env: MultiAgentEnv, policies: list, carries: list, actions, rewards, infos, dones):
    """The carries after a step: each carried seat records its action, the rewards float32[A]
    and the trial-done flag (``infos["trial_done"]``, else the episode end)."""
    all_rewards = jnp.stack([jnp.asarray(rewards[a], jnp.float32) for a in env.agents])
    trial_done = infos.get("trial_done", dones["__all__"])
    return [
        p.record(c, i, actions[a], all_rewards, trial_done) if is_carried(p) else c
        for i, (a, p, c) in enumerate(zip(env.agents, policies, carries, strict=True))
    ]


# ----------------------------------------------------------------------------- one step
@struct.dataclass
class Playing:
    """An episode between steps (the scan's carry).

    Attributes:
        obs: agent -> the agent's observation.
        state: the env state (frozen once the episode ended).
        finished: bool[], the episode ended at an earlier step: later steps are padding.
        carries: per seat, the carried policy's memory (``()`` for the others).
    """

    obs: dict
    state: Any
    finished: jax.Array
    carries: list


def start_episode(
    env: MultiAgentEnv, seats: list, key: jax.Array, config=None, num_steps: int | None = None
) -> tuple[Playing, jax.Array]:
    """(the episode after reset, its step keys key[num_steps]); the configuration is sampled
    from the episode's key when ``config`` is None. Jittable."""
    key_config, key_reset, key_run = episode_keys(key)
    if config is None:
        config = env.sample_config(key_config)
    obs, state = env.reset_to(key_reset, config)
    num_steps = env.max_steps if num_steps is None else num_steps
    playing = Playing(obs, state, jnp.bool_(False), initial_carries(seats))
    return playing, step_keys(key_run, num_steps)


def act_seats(
    env: MultiAgentEnv, seats: list, step_key: jax.Array, playing: Playing
) -> tuple[dict, list]:
    """Every jittable seat's action at this step and the carries after acting. Jittable."""
    key_act, _ = step_parts(step_key)
    return act_carried(env, seats, key_act, playing.obs, playing.state, playing.carries)


def advance(
    env: MultiAgentEnv, seats: list, step_key: jax.Array, playing: Playing, actions, acted: list
) -> tuple[Playing, tuple]:
    """(the episode after ``actions``, (rewards, dones, infos)). The carries ``acted`` (after
    acting) record the step; a finished episode keeps its state and pre-step carries. Jittable."""
    _, key_env = step_parts(step_key)
    obs, state, rewards, dones, infos = env.step_env(key_env, playing.state, actions)
    carries = record_step(env, seats, acted, actions, rewards, infos, dones)
    old = (playing.obs, playing.state, playing.carries)
    keep = jax.tree.map(lambda n, o: jnp.where(playing.finished, o, n), (obs, state, carries), old)
    finished = playing.finished | dones["__all__"]
    return Playing(*keep[:2], finished, keep[2]), (rewards, dones, infos)


# ----------------------------------------------------------------------------- whole episodes
def run_episode(
    env: MultiAgentEnv, policies, key: jax.Array, config=None, num_steps: int | None = None
) -> Rollout:
    """One episode of at most ``num_steps`` (default ``env.max_steps``) steps; jittable.

    After the terminal step the state is frozen and the remaining steps are padding
    (``valid`` False), so every episode has the same static length.
    """
    seats = seat_policies(env, policies)

    def one_step(playing, step_key):
        actions, acted = act_seats(env, seats, step_key, playing)
        after, (rewards, dones, infos) = advance(env, seats, step_key, playing, actions, acted)
        return after, (actions, rewards, dones, infos, ~playing.finished)

    start, keys = start_episode(env, seats, key, config, num_steps)
    final, (actions, rewards, dones, infos, valid) = jax.lax.scan(one_step, start, keys)
    return Rollout(actions, rewards, dones, infos, valid, final.state)


def run_episodes(
    env: MultiAgentEnv,
    policies,
    key: jax.Array,
    num_episodes: int,
    configs=None,
    num_steps: int | None = None,
    jit: bool = True,
    mesh: Mesh | str | None = "auto",
) -> tuple[Rollout, dict[str, jax.Array]]:
    """``num_episodes`` episodes per configuration, all in one vmapped program.

    Args:
        configs: None (each episode samples its configuration), or a batched configuration
            pytree with leading axis C (say ``context_grid()`` of the consequence game).
        mesh: spreads the episodes over the devices of a one-axis mesh (:func:`spread_episodes`);
            "auto": over this process's devices when it has more than one and ``jit`` is True
            (a caller tracing this function passes its own mesh, or None).

    Returns:
        (rollouts, metrics): leaves with leading axes [E, ...] without configs, [C, E, ...] with.
    """

    def episodes_on(config, keys):
        rollouts = jax.vmap(lambda k: run_episode(env, policies, k, config, num_steps))(keys)
        return rollouts, jax.vmap(env.episode_metrics)(rollouts)

    num_configs = num_configs_of(configs)
    if isinstance(mesh, str):
        mesh = episode_mesh() if jit else None

    def fn(k):
        keys = job_keys(k, num_episodes, num_configs)
        if mesh is not None:
            return spread_episodes(episodes_on, configs, keys, mesh)
        if configs is None:
            return episodes_on(None, keys)
        return jax.vmap(episodes_on)(configs, keys)

    return (jax.jit(fn) if jit else fn)(key)


def episode_mesh() -> Mesh | None:
    """A one-axis mesh over this process's devices, None when it has only one."""
    devices = jax.local_devices()
    return Mesh(np.asarray(devices), (EPISODE_AXIS,)) if len(devices) > 1 else None


def spread_episodes(episodes_on, configs, keys, mesh: Mesh):
    """``episodes_on(config, keys)`` for every job of ``keys`` ([E] or [C, E] episode keys),
    the jobs spread over ``mesh``'s devices: flattened to one axis of C x E (each job with its
    configuration), padded with copies of the first job to a multiple of the devices, sharded,
    played, and cut back. Each episode has the key, configuration and program it has unsharded,
    so the results are the same; only where it runs changes."""
    lead = (num_configs_of(configs) or 1, keys.shape[1] if configs is not None else keys.shape[0])
    total = lead[0] * lead[1]
    rest = keys.shape[2:] if configs is not None else keys.shape[1:]
    flat_keys = keys.reshape((total, *rest))
    flat_configs = None
    if configs is not None:
        flat_configs = jax.tree.map(lambda x: jnp.repeat(x, lead[1], axis=0), configs)
    pad = -total % mesh.devices.size
    spread = NamedSharding(mesh, PartitionSpec(mesh.axis_names[0]))

    def padded(x):
        x = jnp.concatenate([x, jnp.broadcast_to(x[:1], (pad, *x.shape[1:]))]) if pad else x
        return jax.lax.with_sharding_constraint(x, spread)

    flat_keys = padded(flat_keys)
    flat_configs = jax.tree.map(padded, flat_configs)
    one = lambda config, key: jax.tree.map(lambda x: x[0], episodes_on(config, key[None]))
    out = jax.vmap(one)(flat_configs, flat_keys)
    shape = lead if configs is not None else lead[1:]
    return jax.tree.map(lambda x: x[:total].reshape((*shape, *x.shape[1:])), out)
