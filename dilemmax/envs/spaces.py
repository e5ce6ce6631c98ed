"""Jittable observation and action spaces.

The interface follows JaxMARL's spaces (``sample(key)``, ``contains(x)``, ``shape``, ``dtype``,
``Discrete.n``) so its training loops read them unchanged, and each space converts itself to the
matching Gymnasium space for the PettingZoo wrappers.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np


class Space:
    """Base class: a set of arrays with a fixed shape and dtype."""

    shape: tuple[int, ...]
    dtype: jnp.dtype

    def sample(self, key: jax.Array) -> jax.Array:
        raise NotImplementedError

    def contains(self, x) -> jax.Array:
        raise NotImplementedError

    def to_gymnasium(self) -> gymnasium.Space:
        raise NotImplementedError

    def to_jaxmarl(self):
        """The same set as a space of JaxMARL's own classes (imports JaxMARL)."""
        raise NotImplementedError


@dataclass(frozen=True)
class Discrete(Space):
    """Integers ``0 .. n - 1``; ``sample`` draws uniformly (or uniformly among ``mask``)."""

    n: int
    dtype: jnp.dtype = jnp.int32
    shape: tuple[int, ...] = field(default=(), init=False)

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"Discrete needs n >= 1, got {self.n}")

    def sample(self, key: jax.Array, mask: jax.Array | None = None) -> jax.Array:
        if mask is None:
            return jax.random.randint(key, (), 0, self.n, dtype=self.dtype)
        logits = jnp.where(mask, 0.0, -jnp.inf)
        return jax.random.categorical(key, logits).astype(self.dtype)

    def contains(self, x) -> jax.Array:
        x = jnp.asarray(x)
        integral = jnp.issubdtype(x.dtype, jnp.integer) | jnp.all(x == jnp.round(x))
        return integral & (x >= 0) & (x < self.n) & (x.shape == ())

    def to_gymnasium(self) -> gymnasium.spaces.Discrete:
        return gymnasium.spaces.Discrete(self.n)

    def to_jaxmarl(self):
        # JaxMARL is an optional extra (installed without its dependencies), and only code that
        # has imported it calls this (see jaxmarl_space): imported here, not at module top.
        from jaxmarl.environments import spaces

        return spaces.Discrete(self.n, dtype=self.dtype)


@dataclass(frozen=True)
class Box(Space):
    """Arrays of ``shape`` with every entry in ``[low, high]`` (inclusive, integer or float)."""

    low: float | int
    high: float | int
    shape: tuple[int, ...]
    dtype: jnp.dtype = jnp.float32

    def sample(self, key: jax.Array) -> jax.Array:
        if jnp.issubdtype(self.dtype, jnp.integer):
            return jax.random.randint(
                key, self.shape, self.low, int(self.high) + 1, dtype=jnp.int32
            ).astype(self.dtype)
        low = jnp.maximum(self.low, -1e6)
        high = jnp.minimum(self.high, 1e6)
        return jax.random.uniform(key, self.shape, minval=low, maxval=high).astype(self.dtype)

    def contains(self, x) -> jax.Array:
        x = jnp.asarray(x)
        if x.shape != tuple(self.shape):
            return jnp.asarray(False)
        return jnp.all((x >= self.low) & (x <= self.high))

    def to_gymnasium(self) -> gymnasium.spaces.Box:
        return gymnasium.spaces.Box(
            low=self.low, high=self.high, shape=tuple(self.shape), dtype=np.dtype(self.dtype)
        )

    def to_jaxmarl(self):
        # Optional extra, imported only by code that uses JaxMARL (see Discrete.to_jaxmarl).
        from jaxmarl.environments import spaces

        return spaces.Box(self.low, self.high, tuple(self.shape), dtype=self.dtype)


def jaxmarl_space(space: Space):
    """``space`` as JaxMARL's class when JaxMARL is already imported, else ``space`` itself.

    JaxMARL's wrappers (``CTRolloutManager``) accept only spaces of its own classes; code that
    uses them has imported JaxMARL, and code that does not should not pay for importing it.
    """
    if "jaxmarl.environments.spaces" in sys.modules and hasattr(space, "to_jaxmarl"):
        return space.to_jaxmarl()
    return space
