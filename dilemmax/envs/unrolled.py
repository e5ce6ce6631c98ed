"""Reductions over a short, static axis written as unrolled elementwise operations.

Under ``jax.vmap`` at tens of thousands of envs, a reduction over an agent or option axis of 2 to
9 entries becomes a kernel of its own on XLA's CPU backend (a slow one: it walks a short minor
axis), while these unrolled forms fuse with the elementwise work around them. They fold left to
right, as a sequential reduction does, so the results equal ``jnp.sum`` / ``jnp.mean`` /
``jnp.cumsum`` on these sizes (booleans and integers exactly).

Every function reduces over the LAST axis of ``x``; shapes are ``x: [..., K]``.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence

import jax
import jax.numpy as jnp


def _fold(op, x: jax.Array) -> jax.Array:
    return functools.reduce(op, [x[..., j] for j in range(x.shape[-1])])


def total(x: jax.Array) -> jax.Array:
    """``jnp.sum(x, -1)`` (booleans count as int32)."""
    x = x.astype(jnp.int32) if x.dtype == jnp.bool_ else x
    return _fold(operator.add, x)


def mean(x: jax.Array) -> jax.Array:
    """``jnp.mean(x, -1)`` of a float array."""
    return total(x) / x.shape[-1]


def all_(x: jax.Array) -> jax.Array:
    """``jnp.all(x, -1)``."""
    return _fold(operator.and_, x)


def any_(x: jax.Array) -> jax.Array:
    """``jnp.any(x, -1)``."""
    return _fold(operator.or_, x)


def maximum(x: jax.Array) -> jax.Array:
    """``jnp.max(x, -1)``."""
    return _fold(jnp.maximum, x)


def minimum(x: jax.Array) -> jax.Array:
    """``jnp.min(x, -1)``."""
    return _fold(jnp.minimum, x)


def cumsum(x: jax.Array) -> jax.Array:
    """``jnp.cumsum(x, -1)`` (booleans count as int32)."""
    x = x.astype(jnp.int32) if x.dtype == jnp.bool_ else x
    parts = [x[..., 0]]
    for j in range(1, x.shape[-1]):
        parts.append(parts[-1] + x[..., j])
    return jnp.stack(parts, axis=-1)


def first_argmax(x: jax.Array) -> jax.Array:
    """int32: ``jnp.argmax(x, -1)`` (the first maximum on ties)."""
    return first_argmax_of([x[..., j] for j in range(x.shape[-1])])


def first_argmax_of(values: Sequence[jax.Array]) -> jax.Array:
    """int32: the index of the largest of ``values`` (same-shaped arrays; the first on ties).

    ``first_argmax`` of their stack, without building the stack: under vmap XLA may write a
    stacked table out to memory when several fusions read it.
    """
    best = values[0]
    index = jnp.zeros(jnp.shape(best), jnp.int32)
    for j, value in enumerate(values[1:], start=1):
        better = value > best
        best = jnp.where(better, value, best)
        index = jnp.where(better, j, index)
    return index


def take(x: jax.Array, index: jax.Array) -> jax.Array:
    """``x[..., index]`` for an integer ``index`` of shape ``x.shape[:-1]`` (or broadcastable),
    as a chain of selects instead of a gather; out-of-range indices give 0 / False."""
    out = jnp.zeros(jnp.broadcast_shapes(x.shape[:-1], jnp.shape(index)), x.dtype)
    for j in range(x.shape[-1]):
        out = jnp.where(index == j, x[..., j], out)
    return out


def rotate(x: jax.Array, shift: int, axis: int = 0) -> jax.Array:
    """``x[(arange(n) + shift) % n]`` along ``axis`` for a static ``shift`` (entry d is ring
    offset d from position ``shift``): two slices and a concatenation, no gather."""
    n = x.shape[axis]
    shift %= n
    if not shift:
        return x
    head = jax.lax.slice_in_dim(x, shift, n, axis=axis)
    tail = jax.lax.slice_in_dim(x, 0, shift, axis=axis)
    return jnp.concatenate([head, tail], axis=axis)
