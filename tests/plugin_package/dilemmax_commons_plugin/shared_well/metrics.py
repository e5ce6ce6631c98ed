"""Per-episode outcomes of the Shared Well, in JAX, from the env's ``infos``.

Each event sits at the step where it happens, so every outcome is a sum over the played steps
(``rollout.valid``) and padding after the end is ignored.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from dilemmax.envs import Rollout
from dilemmax.envs import metrics as M

METRIC_AXES = {
    "total_take": M.SCALAR,
    "final_stock": M.SCALAR,
    "dried_up": M.SCALAR,
    "rationed_rounds": M.SCALAR,
    "format_validity": M.SCALAR,
    "take_by_agent": M.PER_AGENT,
    "return": M.PER_AGENT,
    "length": M.SCALAR,
}


def _played(rollout: Rollout, name: str) -> jax.Array:
    """``infos[name]`` summed over the played steps (float32; an agent axis is kept)."""
    x = rollout.infos[name].astype(jnp.float32)
    valid = rollout.valid.reshape(rollout.valid.shape + (1,) * (x.ndim - 1))
    return jnp.sum(jnp.where(valid, x, 0.0), axis=0)


def episode_metrics(rollout: Rollout, agents: Sequence[str]) -> dict[str, jax.Array]:
    """One episode's outcomes (an unbatched rollout, leaves [T, ...]).

    total_take: units drawn by everyone. final_stock: the stock at the end. dried_up: 1.0 if the
    well ran empty. rationed_rounds: rounds whose requests exceeded the stock.
    format_validity: legal actions / actions. take_by_agent, return: float32[A] (equal here:
    the reward is the take). length: int32[], rounds played.
    """
    length = jnp.sum(rollout.valid).astype(jnp.int32)
    take = _played(rollout, "take")
    return {
        "total_take": jnp.sum(take),
        "final_stock": rollout.final_state.stock.astype(jnp.float32),
        "dried_up": _played(rollout, "dry"),
        "rationed_rounds": _played(rollout, "rationed"),
        "format_validity": jnp.sum(_played(rollout, "valid")) / (len(agents) * length),
        "take_by_agent": take,
        "return": jnp.stack(
            [jnp.sum(jnp.where(rollout.valid, rollout.rewards[a], 0.0)) for a in agents]
        ),
        "length": length,
    }
