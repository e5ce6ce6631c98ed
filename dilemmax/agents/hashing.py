"""Hashes of arrays that do not depend on how the arrays are split over devices or processes.

A checkpoint of a run sharded over several processes is written by every process, shard by
shard, and may be read back on another number of processes; a checksum over its bytes as one
process sees them would depend on the split. :func:`leaf_hashes` instead reduces each array on
the devices that hold it: two uint32 sums over its 32-bit words, each word first mixed with its
flat index through a bijection of uint32 (murmur3's finaliser). Integer sums wrap and do not
depend on their order, so every split gives the same hash, and since each term is a bijection of
its word, changing any single word always changes both sums (not a cryptographic hash: it
detects damage, not tampering).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np


def _words(x: jax.Array) -> jax.Array:
    """The array as uint32 words (1- and 2-byte elements widened, 8-byte ones split)."""
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint32)
    size = np.dtype(x.dtype).itemsize
    if size < 4:
        narrow = {1: jnp.uint8, 2: jnp.uint16}[size]
        return jax.lax.bitcast_convert_type(x, narrow).astype(jnp.uint32)
    return jax.lax.bitcast_convert_type(x, jnp.uint32)


def _fmix(h: jax.Array) -> jax.Array:
    """murmur3's 32-bit finaliser: a bijection of uint32, so one changed word changes a sum."""
    h = h ^ (h >> 16)
    h = h * jnp.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * jnp.uint32(0xC2B2AE35)
    return h ^ (h >> 16)


def _leaf_hash(x: jax.Array) -> jax.Array:
    """uint32[2]: two index-mixed sums over the words of ``x`` (independent of its sharding)."""
    w = _words(x).ravel()
    i = jnp.arange(w.size, dtype=jnp.uint32)
    a = _fmix(w ^ _fmix(i * jnp.uint32(0x9E3779B9) + jnp.uint32(1))).sum(dtype=jnp.uint32)
    b = _fmix((w + jnp.uint32(0x7F4A7C15)) ^ _fmix(i + jnp.uint32(0x632BE5AB)))
    return jnp.stack([a, b.sum(dtype=jnp.uint32)])


def leaf_hashes(flat: Mapping[str, jax.Array]) -> dict[str, str]:
    """Every leaf's hash as 16 hex digits, computed on the devices the leaves live on (one
    jitted program; with leaves sharded over processes, every process must call it)."""
    if not flat:
        return {}
    first = next(iter(flat.values()))
    mesh = getattr(getattr(first, "sharding", None), "mesh", None)
    hashes = jax.device_get(_hash_program(mesh)(dict(flat)))
    return {k: f"{int(v[0]):08x}{int(v[1]):08x}" for k, v in hashes.items()}


@functools.lru_cache(maxsize=8)
def _hash_program(mesh):
    """The jitted hash of a dict of arrays, its results replicated over ``mesh`` (so every
    process can read them); compiled once per mesh and tree of shapes."""
    replicated = None
    if mesh is not None:
        replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    return jax.jit(lambda f: {k: _leaf_hash(v) for k, v in f.items()}, out_shardings=replicated)
