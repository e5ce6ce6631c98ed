"""A batch of environments that pays for resets only on steps where an episode ended.

``jax.vmap(env.step)`` turns the auto-reset ``lax.cond`` into a select, so every step computes a
reset for every env. :class:`VecEnv` instead keeps a buffer of fresh starts, one per env, and
hands an env its buffered start when that env's episode ends (through ``step``'s ``reset_state``
argument); the buffer is refilled behind a batch-level ``lax.cond`` that runs only when some env
consumed its start. For fixed-horizon games (all episodes end together) a reset is paid once per
episode; for short variable-length games it is paid on the steps where anything finished.

``benchmarks/autoreset.py`` measures the difference.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import struct

from dilemmax.envs.base import PyTree, typed_key
from dilemmax.wrappers.legal import MAX_NUM_ENVS, check_count


@struct.dataclass
class VecState:
    """Attributes:
    env_states: the wrapped env's states, leaves with a leading batch axis [N, ...].
    fresh: (obs, state) of the unwrapped env's next episodes, one per env, [N, ...].
    """

    env_states: PyTree
    fresh: PyTree


class VecEnv:
    """``num_envs`` copies of ``env`` stepped together.

    ``env`` may be a base env or a :class:`~dilemmax.wrappers.log.LogWrapper` around one (any
    wrapper whose ``step`` forwards ``reset_state`` to the base env). Observations, rewards, dones
    and infos are dicts of arrays with a leading axis of size ``num_envs``.
    """

    def __init__(self, env, num_envs: int):
        self.env = env
        self.num_envs = check_count("num_envs", num_envs, high=MAX_NUM_ENVS)
        self._base = getattr(env, "unwrapped", env)

    def __getattr__(self, name):
        return getattr(self.env, name)

    def _fresh_starts(self, key: jax.Array) -> PyTree:
        return jax.vmap(self._base.reset)(jax.random.split(key, self.num_envs))

    def reset(self, key: jax.Array) -> tuple[dict, VecState]:
        key_now, key_next = jax.random.split(typed_key(key))
        obs, env_states = jax.vmap(self.env.reset)(jax.random.split(key_now, self.num_envs))
        return obs, VecState(env_states, self._fresh_starts(key_next))

    def step(self, key: jax.Array, state: VecState, actions: dict, *, full_infos: bool = False):
        """One step of every env; ``full_infos`` is forwarded to the wrapped env's ``step``."""
        key_step, key_refill = jax.random.split(typed_key(key))
        keys = jax.random.split(key_step, self.num_envs)
        env_step = functools.partial(self.env.step, full_infos=full_infos)
        obs, env_states, rewards, dones, infos = jax.vmap(env_step)(
            keys, state.env_states, actions, state.fresh
        )
        fresh = jax.lax.cond(
            jnp.any(dones["__all__"]),
            lambda: self._fresh_starts(key_refill),
            lambda: state.fresh,
        )
        return obs, VecState(env_states, fresh), rewards, dones, infos

    def action_mask(self, state: VecState) -> dict:
        base_states = getattr(state.env_states, "env_state", state.env_states)
        return jax.vmap(self._base.action_mask)(base_states)
