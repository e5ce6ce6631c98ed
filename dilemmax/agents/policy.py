"""The policy protocol: one step interface for trained networks, scripts and language models.

A policy is any callable ``policy(key, observation) -> action``. Jittable policies (scripted
functions, trained networks) return an int32 scalar array and run inside ``jax.jit``/``vmap``;
Python policies (language models) set ``jittable = False``, may keep memory between calls, and
may read ``observation.text()``. The protocol is structural: a game's scripted policies are
plain functions that only read the attributes of :class:`Observation`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import jax

from dilemmax.envs.rollout import Observation


@runtime_checkable
class Policy(Protocol):
    def __call__(self, key: jax.Array, observation: Observation) -> Any: ...


def is_jittable(policy: Policy) -> bool:
    return bool(getattr(policy, "jittable", True))


def reset_policy(policy: Policy) -> None:
    """Calls ``policy.reset()`` at an episode start, for policies that keep memory."""
    reset = getattr(policy, "reset", None)
    if callable(reset):
        reset()


def random_policy(key: jax.Array, observation: Observation) -> jax.Array:
    """Uniform over the legal actions."""
    return jax.random.categorical(key, jax.numpy.where(observation.mask, 0.0, -jax.numpy.inf))


def first_legal_policy(key: jax.Array, observation: Observation) -> jax.Array:
    """The lowest-numbered legal action (a deterministic reference)."""
    del key
    return jax.numpy.argmax(observation.mask).astype(jax.numpy.int32)


GENERIC_POLICIES: dict[str, Policy] = {"random": random_policy, "first_legal": first_legal_policy}
