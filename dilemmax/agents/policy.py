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

from dilemmax.envs.policies import (
    GENERIC_POLICIES,
    first_legal_policy,
    policies_for,
    random_policy,
)
from dilemmax.envs.rollout import Observation, is_jittable


@runtime_checkable
class Policy(Protocol):
    def __call__(self, key: jax.Array, observation: Observation) -> Any: ...


def reset_policy(policy: Policy) -> None:
    """Calls ``policy.reset()`` at an episode start, for policies that keep memory."""
    reset = getattr(policy, "reset", None)
    if callable(reset):
        reset()


# The generic policies and is_jittable live beside the env contract (the episode driver reads
# them); re-exported here because the policy protocol's users look for them next to it.
__all__ = [
    "GENERIC_POLICIES",
    "Observation",
    "Policy",
    "first_legal_policy",
    "is_jittable",
    "policies_for",
    "random_policy",
    "reset_policy",
]
