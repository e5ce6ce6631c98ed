"""Wells: one drawn for an episode, and the grid of every hidden regrowth the env allows."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dilemmax_commons_plugin.shared_well.types import SharedWellConfig


def full_well(growth: jax.Array, capacity: int) -> SharedWellConfig:
    """A full well of ``capacity`` units with hidden regrowth ``growth`` (any leading shape)."""
    growth = jnp.asarray(growth, jnp.int32)
    full = jnp.full(growth.shape, capacity, jnp.int32)
    return SharedWellConfig(growth=growth, stock=full, capacity=full)


def draw_well(key: jax.Array, capacity: int, growth_low: int, growth_high: int):
    """A full well whose regrowth is uniform over ``growth_low .. growth_high``."""
    return full_well(jax.random.randint(key, (), growth_low, growth_high + 1), capacity)


def growth_grid(capacity: int, growth_low: int, growth_high: int) -> SharedWellConfig:
    """One full well per regrowth ``growth_low .. growth_high`` (leading axis C)."""
    return full_well(jnp.arange(growth_low, growth_high + 1), capacity)
