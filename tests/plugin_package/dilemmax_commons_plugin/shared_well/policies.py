"""Scripted, jittable policies of the Shared Well: ``policy(key, observation) -> int32``.

They read only the observation's ``array`` (see ``SharedWellEnv.get_obs``) and ``mask`` (legal
while the well holds the amount), so they work for any number of agents and any capacity.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dilemmax.envs import Observation
from dilemmax_commons_plugin.shared_well import constants as c

OTHERS_MEAN = 3  # index of the other agents' mean take last round / MAX_TAKE


def _most_legal(mask: jax.Array) -> jax.Array:
    return jnp.max(jnp.where(mask, jnp.arange(c.NUM_ACTIONS), 0)).astype(jnp.int32)


def greedy(key: jax.Array, observation: Observation) -> jax.Array:
    """The most the well allows: min(3, stock)."""
    del key
    return _most_legal(observation.mask)


def restrained(key: jax.Array, observation: Observation) -> jax.Array:
    """One unit a round while the well holds one."""
    del key
    return jnp.where(observation.mask[1], 1, 0).astype(jnp.int32)


def reciprocal(key: jax.Array, observation: Observation) -> jax.Array:
    """Restrained while the others took at most one unit each on average last round, greedy
    once they took more (tit for tat on the commons)."""
    others = observation.array[OTHERS_MEAN] * c.MAX_TAKE
    return jnp.where(others > 1.0 + 1e-4, greedy(key, observation), restrained(key, observation))


SCRIPTED_POLICIES = {"greedy": greedy, "restrained": restrained, "reciprocal": reciprocal}
