"""Seeded pools of pre-generated content (layouts, hidden rules), XLand-MiniGrid style.

A pool is a pytree of arrays stacked along a leading axis of length ``N``. It is built once, off
the hot path, from a generator ``key -> item`` and a seed, so the same seed always gives the same
pool; an env carries the pool as a constant and draws from it at reset with one gather, which is
much cheaper than generating a layout inside ``reset``.

Pools split deterministically into a training part and a held-out part (the first
``train_fraction`` of the items, and the rest). Items are drawn from independent keys, so this
contiguous split is a random split; with ``unique=True`` at build time (or ``dedupe`` at split
time) no held-out item also appears in the training part.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

PyTree = Any


@struct.dataclass
class Pool:
    """A pytree of arrays with a shared leading axis of length ``N`` (one row per item).

    Attributes:
        items: the stacked pytree; every leaf has shape ``[N, ...]``.
    """

    items: PyTree


def pool_size(pool: Pool) -> int:
    """N, the number of items (static)."""
    leaves = jax.tree.leaves(pool.items)
    if not leaves:
        raise ValueError("empty pool: its items pytree has no arrays")
    return int(leaves[0].shape[0])


def build_pool(
    generate_one: Callable[[jax.Array], PyTree],
    seed: int,
    size: int,
    unique: bool = False,
    batch_size: int | None = None,
) -> Pool:
    """Generates ``size`` items, item ``i`` from the ``i``-th key split off ``PRNGKey(seed)``.

    Args:
        generate_one: jittable ``key -> pytree of arrays`` (fixed shapes).
        seed: the pool's seed; the same seed gives the same pool.
        size: N.
        unique: drop items that repeat an earlier item (byte-equal in every leaf) and keep drawing
            until there are ``size`` distinct ones. The result is still a pure function of
            ``(seed, size)``: candidates come from a fixed key sequence and are kept in order.
        batch_size: generate in chunks of this many (``jax.lax.map``) to bound memory for large
            pools; ``None`` vmaps all keys at once.

    Returns:
        A :class:`Pool` with N items, on the default device.
    """
    if size < 1:
        raise ValueError(f"pool size must be >= 1, got {size}")
    root = jax.random.PRNGKey(seed)
    generate = functools.partial(_generate, generate_one, batch_size=batch_size)

    if not unique:
        return Pool(generate(jax.random.split(root, size)))

    # Draw candidates from a fixed stream of keys (round r uses split(fold_in(root, r))) until
    # enough distinct ones have appeared; the kept items are the first `size` distinct ones.
    chunks: list[PyTree] = []
    seen: set[bytes] = set()
    num_kept, round_index = 0, 0
    while num_kept < size:
        if round_index >= 64:
            raise ValueError(f"could not draw {size} distinct items; is the item space smaller?")
        keys = jax.random.split(jax.random.fold_in(root, round_index), max(size, 16))
        batch = jax.device_get(generate(keys))
        keep = []
        for i, row in enumerate(_row_bytes(batch)):
            fingerprint = row.tobytes()
            if fingerprint not in seen:
                seen.add(fingerprint)
                keep.append(i)
                if num_kept + len(keep) == size:
                    break
        chunks.append(jax.tree.map(lambda x, k=np.asarray(keep, int): x[k], batch))
        num_kept += len(keep)
        round_index += 1
    return Pool(jax.tree.map(lambda *xs: jnp.asarray(np.concatenate(xs)), *chunks))


@functools.partial(jax.jit, static_argnums=(0,), static_argnames=("batch_size",))
def _generate(generate_one, keys, batch_size=None):
    """Stacked items for a batch of keys; compiled once per generator and key count."""
    if batch_size is None:
        return jax.vmap(generate_one)(keys)
    return jax.lax.map(generate_one, keys, batch_size=batch_size)


def _row_bytes(items: PyTree) -> np.ndarray:
    """uint8[N, B]: each item's leaves as raw bytes, so equal rows mean equal items."""
    leaves = [np.ascontiguousarray(np.asarray(x)) for x in jax.tree.leaves(items)]
    size = leaves[0].shape[0]
    return np.concatenate([x.reshape(size, -1).view(np.uint8) for x in leaves], axis=1)


def split_pool(pool: Pool, train_fraction: float = 0.8, dedupe: bool = True) -> tuple[Pool, Pool]:
    """Deterministic split into ``(train, held_out)``: the first ``round(N * train_fraction)``
    items, then the rest.

    Args:
        pool: the pool to split.
        train_fraction: share of items in the training part, in (0, 1).
        dedupe: leave out of ``held_out`` every item that is also in ``train`` (so no held-out
            evaluation ever plays a training item); ``held_out`` may then hold fewer items.

    Returns:
        ``(train, held_out)`` pools; both non-empty.
    """
    size = pool_size(pool)
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must lie in (0, 1), got {train_fraction}")
    num_train = int(round(size * train_fraction))
    if not 0 < num_train < size:
        raise ValueError(f"a pool of {size} items cannot be split with fraction {train_fraction}")
    # On the host: slicing device arrays one at a time would compile a program for each.
    host = jax.device_get(pool.items)
    keep = np.arange(num_train, size)
    if dedupe:
        rows = _row_bytes(host)
        train_prints = {row.tobytes() for row in rows[:num_train]}
        keep = keep[[row.tobytes() not in train_prints for row in rows[num_train:]]]
        if not keep.size:
            raise ValueError("every held-out item also appears in the training part")
    train = jax.tree.map(lambda x: jnp.asarray(x[:num_train]), host)
    return Pool(train), Pool(jax.tree.map(lambda x: jnp.asarray(x[keep]), host))


def pool_item(pool: Pool, index: jax.Array) -> PyTree:
    """The item at ``index`` (int32[], may be traced)."""
    return jax.tree.map(lambda x: x[index], pool.items)


def sample_index(key: jax.Array, pool: Pool) -> jax.Array:
    """int32[]: an index drawn uniformly from ``0 .. N-1``."""
    return jax.random.randint(key, (), 0, pool_size(pool), dtype=jnp.int32)


def sample_from_pool(key: jax.Array, pool: Pool) -> PyTree:
    """One item drawn uniformly (jittable and vmappable over keys)."""
    return pool_item(pool, sample_index(key, pool))


def concat_pools(*pools: Pool) -> Pool:
    """The items of several pools with the same structure, one after the other."""
    return Pool(jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=0), *(p.items for p in pools)))
