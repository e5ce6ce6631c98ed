"""The policy protocol: one step interface for trained networks, scripts and language models.

A policy is any callable ``policy(key, observation) -> action``. Jittable policies (scripted
functions, trained networks) return an int32 scalar array and run inside ``jax.jit``/``vmap``;
Python policies (language models) set ``jittable = False``, may keep memory between calls, and
may read ``observation.text()``. The protocol is structural: a game's scripted policies are
plain functions that only read the attributes of :class:`Observation`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import jax
from flax import struct


@struct.dataclass
class Observation:
    """What one agent receives at one step.

    Attributes:
        array: the agent's observation (shape and dtype of ``env.observation_space(agent)``).
        mask: bool[num_actions], the legal actions.
        agent_index: int32[], the agent's position in ``env.agents``.
        state: the full env state. Privileged: only oracle references (an informed cleaner that
            knows the recipes) may read it; learned and language-model agents must not.
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
