"""``jax.random.bits`` for threefry keys, with the hash unrolled.

On CPU, JAX lowers the threefry hash as a five-iteration loop (to keep compile times small),
so every draw is a loop of separate kernels over the batch. At 65,536 envs that loop costs
more than a whole env step of the fast games. :func:`bits` computes the same numbers (the
Threefry-2x32 hash with 20 rounds, the counters JAX uses with ``jax_threefry_partitionable``,
its default) as straight-line elementwise code, which XLA fuses into one kernel.

Keys of other implementations, or the non-partitionable threefry setting, go to
``jax.random`` itself, so every result equals what ``jax.random.bits`` would return.

Used where a batch draws a few words per env (the resets of the fast games, the benchmark's
random actions, the consequence game's tie-breaks through :func:`uniform`) and to derive the two
subkeys of ``env.step`` (:func:`fold_in`). Each result passes an ``optimization_barrier``, which
keeps the hash apart from the expressions around it (an unbarriered ``fold_in`` once measured
slower than JAX's loop). The barrier does not survive into the CPU program's fusion, though:
XLA still copies the ~100-operation hash into every fusion that reads it. Where several
results depend on one draw, let one stored value sit between them (the consequence game's
``dynamics.pick_uniform`` shows how; without it the step ran 1.8x slower).

The unrolled hash was tuned on a CPU. :data:`HASH_BY_BACKEND` chooses per backend what these
functions trace: ``"unrolled"`` (the default everywhere), ``"unbarriered"`` (the unrolled hash
without the barrier) or ``"jax"`` (``jax.random`` itself). All three give the same numbers, so a
backend's choice is a matter of speed alone (``benchmarks/gpu/bench.py`` measures them side by
side). The choice is read when a function is traced: set it before jitting, or use
:func:`using_hash` around the tracing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

# Rotation distances of the two alternating groups of four rounds, and the key-schedule parity
# constant, from the Threefry-2x32 specification (Salmon et al., SC 2011).
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


HASHES = ("unrolled", "unbarriered", "jax")
DEFAULT_HASH = "unrolled"
# backend name (``jax.default_backend()``) -> one of HASHES; a backend not listed takes
# DEFAULT_HASH. Empty: the unrolled hash everywhere until an accelerator's A/B says otherwise.
HASH_BY_BACKEND: dict[str, str] = {}


def hash_choice() -> str:
    """What this module traces on the default backend (one of :data:`HASHES`)."""
    choice = HASH_BY_BACKEND.get(jax.default_backend(), DEFAULT_HASH)
    if choice not in HASHES:
        raise ValueError(
            f"fastrandom.HASH_BY_BACKEND: unknown hash {choice!r}; use one of {HASHES}"
        )
    return choice


@contextlib.contextmanager
def using_hash(choice: str) -> Iterator[None]:
    """Traces with ``choice`` (one of :data:`HASHES`) on the default backend inside the block
    (benchmarks and tests compare the choices in one process)."""
    if choice not in HASHES:
        raise ValueError(f"unknown hash {choice!r}; use one of {HASHES}")
    backend = jax.default_backend()
    before = HASH_BY_BACKEND.get(backend)
    HASH_BY_BACKEND[backend] = choice
    try:
        yield
    finally:
        if before is None:
            HASH_BY_BACKEND.pop(backend, None)
        else:
            HASH_BY_BACKEND[backend] = before


def _rotl(x: jax.Array, r: int) -> jax.Array:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def threefry2x32(key0, key1, x0, x1) -> tuple[jax.Array, jax.Array]:
    """The Threefry-2x32-20 block function on uint32 arrays (broadcasting), unrolled."""
    schedule = (key0, key1, key0 ^ key1 ^ _PARITY)
    x0 = x0 + schedule[0]
    x1 = x1 + schedule[1]
    for group in range(5):
        for r in _ROTATIONS[group % 2]:
            x0 = x0 + x1
            x1 = _rotl(x1, r) ^ x0
        x0 = x0 + schedule[(group + 1) % 3]
        x1 = x1 + schedule[(group + 2) % 3] + np.uint32(group + 1)
    return x0, x1


def _typed(key: jax.Array) -> jax.Array:
    """A legacy uint32[2] key as a typed key; typed keys pass through."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    return jax.random.wrap_key_data(key)


def partitionable_threefry(key: jax.Array) -> bool:
    """Whether ``key`` (typed) is a threefry key under ``jax_threefry_partitionable``: the
    keys whose hash this module can compute itself."""
    threefry = jax.random.key_impl(key) == jax.random.key_impl(jax.random.key(0))
    return threefry and jax.config.jax_threefry_partitionable


def _unrolls(key: jax.Array) -> bool:
    """Whether this module hashes ``key`` itself (else ``jax.random`` does)."""
    return partitionable_threefry(key) and hash_choice() != "jax"


def _once(x: jax.Array) -> jax.Array:
    """``x``, computed once: without the barrier XLA may fuse the ~100-operation hash into
    every consumer of its result and compute it many times over (``"unbarriered"``: as is)."""
    if hash_choice() == "unbarriered":
        return x
    return jax.lax.optimization_barrier(x)


def bits(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """uint32[shape]: ``jax.random.bits(key, shape, jnp.uint32)``."""
    key = _typed(key)
    if not _unrolls(key):
        return jax.random.bits(key, shape, jnp.uint32)
    size = int(np.prod(shape, dtype=np.int64))
    if size >= 2**32:
        return jax.random.bits(key, shape, jnp.uint32)
    data = jax.random.key_data(key)
    # Element j hashes the 64-bit counter j, split as (high word 0, low word j).
    counter = jnp.arange(size, dtype=jnp.uint32).reshape(shape)
    high, low = threefry2x32(data[0], data[1], jnp.zeros_like(counter), counter)
    return _once(high ^ low)


def uniform(key: jax.Array) -> jax.Array:
    """float32[]: ``jax.random.uniform(key)``, from the unrolled :func:`bits`.

    The same numbers: the word's top 23 bits become the mantissa of a float in [1, 2), minus 1.
    """
    key = _typed(key)
    if not _unrolls(key):
        return jax.random.uniform(key)
    mantissa = (bits(key, ()) >> np.uint32(9)) | np.array(1.0, np.float32).view(np.uint32)
    return jnp.maximum(jax.lax.bitcast_convert_type(mantissa, jnp.float32) - 1.0, 0.0)


def fold_in(key: jax.Array, index: int) -> jax.Array:
    """A typed key equal to ``jax.random.fold_in(key, index)`` for a static ``index``.

    With threefry and ``jax_threefry_partitionable``, ``fold_in(key, i)`` is the hash of the
    counter ``(0, i)`` under ``key``, both output words kept; other keys go to JAX itself.
    """
    key = _typed(key)
    if not _unrolls(key):
        return jax.random.fold_in(key, index)
    data = jax.random.key_data(key)
    high, low = threefry2x32(data[0], data[1], np.uint32(0), np.uint32(index))
    return jax.random.wrap_key_data(_once(jnp.stack([high, low])), impl=jax.random.key_impl(key))
