"""Configuration and state of the Shared Well (flax struct dataclasses; ``A`` agents)."""

from __future__ import annotations

import jax
from flax import struct


@struct.dataclass
class SharedWellConfig:
    """One well. A batch of them (a leading axis on every leaf) runs as one ``jax.vmap``.

    Attributes:
        growth: int32[], the hidden regrowth g: after a round the well regrows by
            ``min(remaining, g)`` units. The agents are never told g; they see each round's
            regrowth.
        stock: int32[], the units in the well when the episode starts.
        capacity: int32[], the most the well holds.
    """

    growth: jax.Array
    stock: jax.Array
    capacity: jax.Array


@struct.dataclass
class SharedWellState:
    """One episode.

    Attributes:
        config: the episode's well.
        stock: int32[], units in the well now.
        round: int32[], rounds played.
        last_take: int32[A], what each agent received last round (0 before the first).
        last_growth: int32[], the well's regrowth after last round (0 before the first).
    """

    config: SharedWellConfig
    stock: jax.Array
    round: jax.Array
    last_take: jax.Array
    last_growth: jax.Array
