"""JAX's own random draws, computed together: the same numbers for a fraction of the compile.

Every ``jax.random`` call on a threefry key hashes on its own, and on the CPU each hash is a loop
of its own in the compiled program; a program's compile time grows with their number
(``benchmarks/batched_draws.py``: 24 uniform draws under 24 keys compile several times slower
than the same draws made in one hash). A scripted open_cleanup cleaner hashed 23 times a step
and the game's step 24 times, so most of what an episode of that game cost to compile was
random-number code.

Here draws are declared on :class:`Key` objects (a real key, or a split or fold-in of one) and
:func:`resolve` computes them together: every hash the keys at one depth of the split tree need
runs in one call of the threefry primitive. A set of draws costs one hash per level of splitting
(a randint's two halves are one level more), whatever their number and shapes::

    key = draws.Key(k)
    k_tie, k_move = key.split(2)
    got = draws.resolve({"tie": k_tie.uniform((11, 11)), "move": k_move.randint((), 0, 4)})

The numbers are ``jax.random``'s, bit for bit: ``got["move"] == jax.random.randint(
jax.random.split(k)[1], (), 0, 4)``. For threefry keys under ``jax_threefry_partitionable``
(JAX's default) this module computes them from the hash itself, using three facts of that
scheme: ``split(key, n)[i]`` and ``fold_in(key, i)`` are both words of the hash of counter ``i``
under ``key``; ``bits(key, shape)`` element ``j`` is the xor of the two words of counter ``j`` (so a
smaller draw is a prefix of a larger one); and uniform, randint and bernoulli are fixed
arithmetic on those bits. Any other key (another implementation, or the old threefry scheme) is
drawn by ``jax.random`` itself, one call per draw, and so is every key inside
:func:`one_call_per_draw` (the A/B side of the benchmark and of the tests).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry2x32_p

from dilemmax.envs import fastrandom
from dilemmax.envs.base import typed_key

PyTree = object

_SEPARATE = [False]  # True inside one_call_per_draw


@contextlib.contextmanager
def one_call_per_draw() -> Iterator[None]:
    """Inside the block, :func:`resolve` traces one ``jax.random`` call per draw and split (the
    way the code read before this module); the numbers are the same."""
    before = _SEPARATE[0]
    _SEPARATE[0] = True
    try:
        yield
    finally:
        _SEPARATE[0] = before


@dataclass(eq=False)
class Key:
    """A PRNG key whose draws are made by :func:`resolve`: a real key (typed or legacy
    ``uint32[2]``), or ``parent.split(n)[i]`` / ``parent.fold_in(i)`` with a static ``i``."""

    root: jax.Array | None = None
    parent: Key | None = None
    index: int = 0
    split_num: int = 0  # 0: a fold-in of the parent; n: one of parent.split(n)
    depth: int = field(init=False)

    def __post_init__(self) -> None:
        if self.root is not None:
            self.root = typed_key(self.root)
            if self.root.ndim:
                raise ValueError(f"draws.Key: one key, not a batch of shape {self.root.shape}")
        self.depth = 0 if self.parent is None else self.parent.depth + 1

    def split(self, num: int = 2) -> tuple[Key, ...]:
        """``jax.random.split(key, num)``, as keys of this module."""
        return tuple(Key(parent=self, index=i, split_num=num) for i in range(num))

    def fold_in(self, index: int) -> Key:
        """``jax.random.fold_in(key, index)`` for a static non-negative ``index``."""
        if not 0 <= index < 2**32:
            raise ValueError(f"draws.Key.fold_in: index {index} is not a static uint32")
        return Key(parent=self, index=int(index))

    def as_key(self) -> Draw:
        """The key itself as a typed ``jax.random`` key (to hand to code that takes one)."""
        return Draw(self, (), 0, lambda words: words[0], lambda k: k)

    def bits(self, shape: tuple[int, ...] = ()) -> Draw:
        """uint32[shape]: ``jax.random.bits(key, shape)``."""
        return Draw(self, tuple(shape), 1, lambda words: words[0], _jax_bits(shape))

    def uniform(self, shape: tuple[int, ...] = (), minval=0.0, maxval=1.0) -> Draw:
        """float32[shape]: ``jax.random.uniform(key, shape, minval=minval, maxval=maxval)``."""
        shape = tuple(shape)
        return Draw(
            self,
            shape,
            1,
            lambda words: _uniform_of(words[0], minval, maxval),
            lambda k: jax.random.uniform(k, shape, minval=minval, maxval=maxval),
        )

    def bernoulli(self, p=0.5, shape: tuple[int, ...] = ()) -> Draw:
        """bool[shape]: ``jax.random.bernoulli(key, p, shape)`` (``uniform < p``)."""
        shape = tuple(shape)
        return Draw(
            self,
            shape,
            1,
            lambda words: _uniform_of(words[0], 0.0, 1.0) < p,
            lambda k: jax.random.bernoulli(k, p, shape),
        )

    def randint(self, shape: tuple[int, ...], minval, maxval) -> Draw:
        """int32[shape]: ``jax.random.randint(key, shape, minval, maxval)`` (int32 only)."""
        shape = tuple(shape)
        return Draw(
            self,
            shape,
            2,
            lambda words: _randint_of(words[0], words[1], minval, maxval),
            lambda k: jax.random.randint(k, shape, minval, maxval, dtype=jnp.int32),
        )

    def permutation(self, num: int) -> Draw:
        """int32[num]: ``jax.random.permutation(key, num)`` (``num`` <= 1625: JAX sorts once by
        the bits of ``key.split()[1]``; larger ones take more rounds, not done here)."""
        if num > _ONE_SORT_MAX:
            raise ValueError(f"draws.Key.permutation: {num} items need more than one sort")
        return Draw(
            self.split()[1],
            (num,),
            1,
            lambda words: jax.lax.sort_key_val(words[0], jnp.arange(num, dtype=jnp.int32))[1],
            lambda k: jax.random.permutation(k, num),
            key_of_jax=self,
        )


# jax.random.permutation sorts ceil(3 ln n / ln(2**32 - 1)) times: once up to this n.
_ONE_SORT_MAX = 1625


@dataclass(eq=False)
class Draw:
    """One draw waiting for :func:`resolve`: ``finish`` turns the bits of its key (``halves`` 1),
    or of the two halves of ``key.split(2)`` (``halves`` 2), or the typed key itself (``halves``
    0), into the value; ``by_jax`` draws it with ``jax.random`` from the real key instead."""

    key: Key
    shape: tuple[int, ...]
    halves: int
    finish: Callable[[list[jax.Array]], jax.Array]
    by_jax: Callable[[jax.Array], jax.Array]
    key_of_jax: Key | None = None  # the key by_jax draws from, where it is not ``key``

    def words_from(self) -> list[Key]:
        """The keys whose bits the value is made of."""
        return {0: [], 1: [self.key], 2: list(self.key.split(2))}[self.halves]


def resolve(tree: PyTree) -> PyTree:
    """``tree`` with every :class:`Draw` replaced by its value (a pytree of draws in, the same
    pytree of arrays out). All the draws of one call share the hashes of their common keys."""
    leaves, treedef = jax.tree.flatten(tree, is_leaf=lambda x: isinstance(x, Draw))
    found = [leaf for leaf in leaves if isinstance(leaf, Draw)]
    if not found:
        return tree
    roots = {id(_root_of(d.key)): _root_of(d.key).root for d in found}
    if _SEPARATE[0] or not all(fastrandom.partitionable_threefry(r) for r in roots.values()):
        values = _by_jax(found)
    else:
        values = _by_hash(found)
    return treedef.unflatten([values[id(x)] if isinstance(x, Draw) else x for x in leaves])


# ------------------------------------------------------------------------------- jax.random path
def _by_jax(found: list[Draw]) -> dict[int, jax.Array]:
    """Each draw by ``jax.random`` from its real key (each split computed once)."""
    real: dict[tuple[int, int], jax.Array] = {}

    def real_key(key: Key) -> jax.Array:
        if key.parent is None:
            return key.root
        parent = real_key(key.parent)
        if key.split_num == 0:
            return jax.random.fold_in(parent, key.index)
        cached = (id(key.parent), key.split_num)
        if cached not in real:
            real[cached] = jax.random.split(parent, key.split_num)
        return real[cached][key.index]

    return {id(d): d.by_jax(real_key(d.key_of_jax or d.key)) for d in found}


def _jax_bits(shape):
    return lambda k: jax.random.bits(k, tuple(shape), jnp.uint32)


# ------------------------------------------------------------------------------- one hash a level
def _root_of(key: Key) -> Key:
    while key.parent is not None:
        key = key.parent
    return key


def _by_hash(found: list[Draw]) -> dict[int, jax.Array]:
    """Every draw from hashes made level by level, one threefry call per level.

    A key's words are the hash of counters 0..n-1 under it (both words kept); what a key needs
    from its parent is the pair of words at its counter ``index``.
    """
    needed: dict[tuple, int] = {}  # key's identity -> how many of its counters are needed
    nodes: dict[tuple, Key] = {}

    def need(key: Key, count: int) -> None:
        ident = _identity(key)
        nodes[ident] = key
        needed[ident] = max(needed.get(ident, 0), count)
        if key.parent is not None:
            need(key.parent, key.index + 1)

    for d in found:
        for source in d.words_from():
            need(source, max(math.prod(d.shape), 1))
        if d.halves == 0 and d.key.parent is not None:
            need(d.key.parent, d.key.index + 1)

    words: dict[tuple, tuple[jax.Array, jax.Array]] = {}  # identity -> (high, low) words
    for depth in range(max((k.depth for k in nodes.values()), default=-1) + 1):
        level = [ident for ident, k in nodes.items() if k.depth == depth]
        data = [_data_of(nodes[ident], words) for ident in level]
        high, low = _hash_many(data, [needed[ident] for ident in level])
        words.update(zip(level, zip(high, low, strict=True), strict=True))

    values = {}
    for d in found:
        if d.halves == 0:
            data = jnp.stack(_data_of(d.key, words), axis=-1)
            impl = jax.random.key_impl(_root_of(d.key).root)
            values[id(d)] = jax.random.wrap_key_data(data, impl=impl)
            continue
        size = math.prod(d.shape)
        bits = [_xor_prefix(words[_identity(k)], size).reshape(d.shape) for k in d.words_from()]
        values[id(d)] = d.finish(bits)
    return values


def _identity(key: Key) -> tuple:
    """What a key's value depends on: its root and the counters down to it (``split(n)[i]`` and
    ``fold_in(i)`` of one parent are the same key under the partitionable scheme)."""
    path = []
    while key.parent is not None:
        path.append(key.index)
        key = key.parent
    return (id(key), *reversed(path))


def _data_of(key: Key, words: dict) -> tuple[jax.Array, jax.Array]:
    """The two uint32 words of ``key`` itself."""
    if key.parent is None:
        data = jax.random.key_data(key.root)
        return data[..., 0], data[..., 1]
    high, low = words[_identity(key.parent)]
    return high[..., key.index], low[..., key.index]


def _hash_many(data, counts) -> tuple[list[jax.Array], list[jax.Array]]:
    """For each key (k0, k1) and count n: the hash of counters (0, 0..n-1) under it, as (high,
    low) uint32[..., n]; all of them in one call of the threefry primitive."""

    def repeated(word: int) -> jax.Array:  # each key's word, once per counter it hashes
        parts = [jnp.broadcast_to(d[word][..., None], (*d[word].shape, n)) for d, n in zip(data, counts, strict=True)]  # noqa: E501  # fmt: skip
        return jnp.concatenate(parts, axis=-1)

    k0, k1 = repeated(0), repeated(1)
    counter = jnp.concatenate([jnp.arange(n, dtype=jnp.uint32) for n in counts])
    counter = jnp.broadcast_to(counter, k0.shape)
    high, low = threefry2x32_p.bind(k0, k1, jnp.zeros_like(counter), counter)
    edges = np.cumsum(counts)[:-1].tolist()
    return jnp.split(high, edges, axis=-1), jnp.split(low, edges, axis=-1)


def _xor_prefix(words: tuple[jax.Array, jax.Array], size: int) -> jax.Array:
    """uint32[size]: ``jax.random.bits`` of a key from its first ``size`` counters' words."""
    high, low = words
    return high[..., :size] ^ low[..., :size]


# ------------------------------------------------------------------------------- bits to values
# Jitted like jax.random's own functions: XLA may fuse a multiply and an add into one rounding,
# so the same arithmetic run op by op can differ from it in the last bit.
@jax.jit
def _uniform_of(bits: jax.Array, minval, maxval) -> jax.Array:
    """float32: ``jax.random.uniform``'s value for its 32 random bits: the top 23 bits become the
    mantissa of a float in [1, 2), which is shifted to [0, 1), scaled and floored at minval."""
    minval = jnp.asarray(minval, jnp.float32)
    maxval = jnp.asarray(maxval, jnp.float32)
    mantissa = (bits >> np.uint32(9)) | np.array(1.0, np.float32).view(np.uint32)
    floats = jax.lax.bitcast_convert_type(mantissa, jnp.float32) - np.float32(1.0)
    return jnp.maximum(minval, floats * (maxval - minval) + minval)


@jax.jit
def _randint_of(high: jax.Array, low: jax.Array, minval, maxval) -> jax.Array:
    """int32: ``jax.random.randint``'s value for the bits of its two subkeys: the 64-bit number
    ``high * 2**32 + low`` modulo the span ``maxval - minval`` (1 where the range is empty),
    computed in uint32 as JAX does (2**32 mod span is (2**16 mod span)**2 mod span)."""
    minval = jnp.asarray(minval).astype(jnp.int32)
    maxval = jnp.asarray(maxval).astype(jnp.int32)
    span = jnp.where(maxval <= minval, np.uint32(1), (maxval - minval).astype(jnp.uint32))
    multiplier = np.uint32(2**16) % span
    multiplier = (multiplier * multiplier) % span
    offset = (high % span) * multiplier + low % span
    return minval + (offset % span).astype(jnp.int32)
