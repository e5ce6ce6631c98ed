"""Guards every game's step applies: actions as int32 indices, with anything that is not a whole
number turned into an index no game accepts.

Every game flags an out-of-range action as invalid (and plays its no-op). A float, NaN or
infinite action must be flagged the same way: a cast would truncate 2.7 into move 2 and NaN into
move 0, real moves nobody chose. :func:`action_indices` maps every such value to
:data:`INVALID_ACTION` (-1, out of every game's range), keeps whole numbers (``3`` and ``3.0``),
and accepts JaxMARL's ``(1,)``-shaped per-agent actions.

:func:`freeze_finished` makes a step after the end of an episode a no-op in every game.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.envs.option_spec import INT32_MAX, INT32_MIN

INVALID_ACTION = -1


def action_index(action) -> jax.Array:
    """int32[] of one agent's action; non-integral, non-finite or out-of-int32 values -> -1.

    Accepts Python numbers, numpy values and (traced) JAX arrays of shape () or (1,); anything
    else that is concrete (a string, None) is invalid too.
    """
    if not isinstance(action, jax.Array):  # a concrete value (tracers are jax.Arrays)
        try:
            concrete = np.asarray(action)
        except Exception:  # noqa: BLE001 - whatever numpy cannot read is not an action
            concrete = np.asarray(INVALID_ACTION)
        action = _concrete_index(concrete)
    x = jnp.asarray(action).reshape(())
    if jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == jnp.bool_:
        return x.astype(jnp.int32)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        return jnp.int32(INVALID_ACTION)  # complex or other: not an action
    whole = jnp.isfinite(x) & (x == jnp.floor(x)) & (x >= INT32_MIN) & (x <= INT32_MAX)
    return jnp.where(whole, x, INVALID_ACTION).astype(jnp.int32)


def _concrete_index(arr: np.ndarray) -> np.ndarray:
    """A concrete value checked in numpy (before JAX could wrap a 64-bit int or overflow)."""
    arr = arr.reshape(()) if arr.size == 1 else arr
    if arr.dtype.kind in "iu":
        inside = (arr >= INT32_MIN) & (arr <= INT32_MAX)
        return np.where(inside, arr, INVALID_ACTION).astype(np.int32)
    if arr.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            whole = np.isfinite(arr) & (arr == np.floor(arr))
            whole &= (arr >= INT32_MIN) & (arr <= INT32_MAX)
        return np.where(whole, np.where(whole, arr, 0).astype(np.int64), INVALID_ACTION).astype(
            np.int32
        )
    if arr.dtype.kind == "b":
        return arr.astype(np.int32)
    return np.full(arr.shape, INVALID_ACTION, np.int32)


def action_indices(actions: Mapping[str, object], agents: Sequence[str]) -> jax.Array:
    """int32[A]: :func:`action_index` of each agent's action, in ``agents`` order."""
    return jnp.stack([action_index(actions[a]) for a in agents])


def freeze_finished(was_done, state, next_state, rewards, dones, infos):
    """A step taken after the episode ended changes nothing: ``(next_state, rewards, dones,
    infos)`` with the old state kept, zero rewards, every agent still done and the infos zeroed
    (their structure kept) wherever ``was_done`` (bool[]) holds.

    The games call it last in ``step_env``, so ``step_env`` on a finished episode is a no-op as
    the JAX fast path (which scans ``max_steps`` steps) assumes.
    """
    keep = lambda old, new: jnp.where(was_done, old, new)
    next_state = jax.tree.map(keep, state, next_state)
    rewards = {a: jnp.where(was_done, jnp.zeros_like(r), r) for a, r in rewards.items()}
    dones = {a: d | was_done for a, d in dones.items()}
    infos = jax.tree.map(lambda x: jnp.where(was_done, jnp.zeros_like(x), x), infos)
    return next_state, rewards, dones, infos
