"""An episode replayed from its record: the env it was played in, its key, its configuration and
its actions give back every state it passed through.

The same key, configuration and actions give the same trajectory (the episode driver's
invariant, :mod:`dilemmax.envs.rollout`), so a writer records only what it cannot recompute:
:func:`episode_start` (the env's id and options, the episode's key and its configuration when
it did not sample one) beside the actions it already writes. :func:`replay_states` plays the
actions again through ``start_episode`` and ``advance`` in one jitted scan and returns the state
before every step and after the last, with the rewards, dones and infos on the way, which is
what the replay page (``dilemmax view``) draws.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.option_spec import shown
from dilemmax.envs.registry import build_key
from dilemmax.envs.rollout import advance, start_episode
from dilemmax.envs.typecheck import field_problem


def episode_start(env: MultiAgentEnv, key: jax.Array, config=None) -> dict[str, Any]:
    """JSON of what an episode starts from: ``env`` (registered id, None for an env not built by
    ``dilemmax.make``), ``options`` (its constructor options), ``key`` (the episode key's data)
    and ``config`` (the configuration's leaves as nested lists, None when it was sampled from
    the key)."""
    made = getattr(env, "made_as", None) or {"env": None, "options": {}}
    leaves = None
    if config is not None:
        leaves = [np.asarray(leaf).tolist() for leaf in jax.tree.leaves(config)]
    return {
        "env": made["env"],
        "options": _jsonable(made["options"]),
        "key": np.asarray(jax.random.key_data(key)).tolist(),
        "config": leaves,
    }


# What each field of an episode start holds (docs/transcripts.md), checked before a start read
# from a file is replayed.
START_FIELDS: dict[str, Any] = {
    "env": str,
    "options": Mapping[str, Any] | None,
    "key": list[int],
    "config": list | None,
}


def start_problem(start: Any) -> str | None:
    """What is wrong with an episode start read from a file ("start.key=[1] is not allowed:
    ..."), None when nothing: its fields' kinds, and a key of as many uint32 words as JAX's
    default key has. Its configuration is checked against the env's by :func:`start_config`."""
    problem = field_problem("start", start, Mapping[str, Any])
    if problem:
        return problem
    if not start.get("env"):
        return "start names no env (its registered id)"
    for name, hint in START_FIELDS.items():
        problem = field_problem(f"start.{name}", start.get(name), hint) if name in start else None
        if problem:
            return problem
    words = int(np.asarray(jax.random.key_data(jax.random.key(0))).size)
    key = start.get("key")
    if not isinstance(key, list) or len(key) != words or not all(0 <= k < 2**32 for k in key):
        return (
            f"start.key={shown(key)} is not allowed: expected {words} integers in 0..4294967295 "
            "(jax.random.key_data of the episode key)"
        )
    return None


def start_key(start: dict) -> jax.Array:
    """The episode key recorded by :func:`episode_start`."""
    return jax.random.wrap_key_data(np.asarray(start["key"], np.uint32))


def start_config(env: MultiAgentEnv, start: dict):
    """The configuration recorded by :func:`episode_start` (None when it was sampled), with the
    structure and dtypes of ``env``'s configurations."""
    leaves = start.get("config")
    if leaves is None:
        return None
    template = env.sample_config(jax.random.key(0))
    flat, treedef = jax.tree.flatten(template)
    if len(flat) != len(leaves):
        raise ValueError(
            f"the recorded configuration has {len(leaves)} leaves, the env's {len(flat)}"
        )
    typed = [
        jnp.asarray(np.asarray(v).astype(t.dtype)).reshape(t.shape)
        for v, t in zip(leaves, flat, strict=True)
    ]
    return jax.tree.unflatten(treedef, typed)


def replay_states(env: MultiAgentEnv, key: jax.Array, config, actions: np.ndarray):
    """Plays ``actions`` int32[T, A] (agents in ``env.agents`` order) from the episode ``key``.

    Returns:
        (states, rewards, dones, infos): ``states`` leaves [T + 1, ...], the state before each
        step and after the last; ``rewards`` float32[T, A]; ``dones`` bool[T] (the episode's
        end); ``infos`` leaves [T, ...].
    """
    actions = jnp.asarray(np.asarray(actions, np.int32))
    return _replay_fn(env, config is None)(key, config, actions)


_REPLAYS: dict[tuple, Any] = {}


def _replay_fn(env: MultiAgentEnv, sampled: bool):
    """The jitted replay of ``env``: one per configuration kind and env made alike
    (:func:`~dilemmax.envs.registry.build_key`), so a page replaying many runs of one game
    compiles it once."""
    cache = (build_key(env), sampled)
    if cache in _REPLAYS:
        return _REPLAYS[cache][1]
    seats = [None] * env.num_agents

    def replay(key, config, actions):
        playing, keys = start_episode(env, seats, key, None if sampled else config)
        keys = keys[: actions.shape[0]]

        def one_step(playing, inputs):
            step_key, row = inputs
            acted = {agent: row[i] for i, agent in enumerate(env.agents)}
            after, (rewards, dones, infos) = advance(
                env, seats, step_key, playing, acted, playing.carries
            )
            reward_row = jnp.stack([jnp.asarray(rewards[a], jnp.float32) for a in env.agents])
            return after, (after.state, reward_row, dones["__all__"], infos)

        _, (states, rewards, dones, infos) = jax.lax.scan(one_step, playing, (keys, actions))
        first = jax.tree.map(lambda x: x[None], playing.state)
        states = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), first, states)
        return states, rewards, dones, infos

    fn = jax.jit(replay)
    if len(_REPLAYS) >= 16:
        _REPLAYS.clear()
    _REPLAYS[cache] = (env, fn)  # the env kept alive, so an id in its key stays its own
    return fn


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, np.generic | np.ndarray):
        return np.asarray(value).tolist()
    return repr(value)
