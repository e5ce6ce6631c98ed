"""The policies every game has, and the one lookup of a seat's policy by name.

The generic policies are plain functions of ``(key, Observation)`` like a game's own scripts, so
they live beside the env contract: wrappers, agents, training and the CLI all look names up with
:func:`policies_for` instead of merging the two dicts themselves.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.rollout import Observation, PolicyFn


def random_policy(key: jax.Array, observation: Observation) -> jax.Array:
    """Uniform over the legal actions."""
    return jax.random.categorical(key, jnp.where(observation.mask, 0.0, -jnp.inf))


def first_legal_policy(key: jax.Array, observation: Observation) -> jax.Array:
    """The lowest-numbered legal action (a deterministic reference)."""
    del key
    return jnp.argmax(observation.mask).astype(jnp.int32)


GENERIC_POLICIES: dict[str, PolicyFn] = {"random": random_policy, "first_legal": first_legal_policy}


def policies_for(env: MultiAgentEnv) -> dict[str, PolicyFn]:
    """Every policy name a seat of ``env`` may use: the generic ones, then the game's scripts
    (a game's script of the same name, such as its own ``random``, takes precedence)."""
    return {**GENERIC_POLICIES, **env.scripted_policies()}
