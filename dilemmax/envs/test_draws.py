"""draws.resolve gives jax.random's numbers, bit for bit, with one hash per level of splitting.

Each program is compiled once (module-level jits, bounds and keys as traced arguments), and the
fuzzing varies only those arguments.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dilemmax.envs import draws

INT32 = st.integers(-(2**31), 2**31 - 1)


def _plan(key, lo, hi, p):
    """Every kind of draw, on keys split, folded and split again, with traced bounds."""
    root = draws.Key(key)
    a, b, c, d = root.split(4)
    b1, b2 = b.split()
    return {
        "uniform": a.uniform((3, 5)),
        "uniform_range": a.uniform((2,), minval=-2.0, maxval=3.5),
        "randint": b1.randint((), 0, 4),
        "randint_traced": b2.randint((7,), lo, hi),
        "randint_wide": d.randint((3,), -(2**31), 2**31 - 1),
        "randint_folded": c.fold_in(3).randint((4,), lo, hi),
        "bits": d.fold_in(1).bits((4,)),
        "bernoulli": d.split(3)[2].bernoulli(p, (6,)),
        "folded_uniform": c.fold_in(1).uniform(),
        "permutation": d.split(3)[0].permutation(5),
        "permutation_largest": a.permutation(1625),
        "key": c.split(5)[4].as_key(),
    }


def _by_jax_random(key, lo, hi, p):
    """The same draws written with jax.random directly."""
    key = jax.random.wrap_key_data(key)
    a, b, c, d = jax.random.split(key, 4)
    b1, b2 = jax.random.split(b)
    return {
        "uniform": jax.random.uniform(a, (3, 5)),
        "uniform_range": jax.random.uniform(a, (2,), minval=-2.0, maxval=3.5),
        "randint": jax.random.randint(b1, (), 0, 4),
        "randint_traced": jax.random.randint(b2, (7,), lo, hi),
        "randint_wide": jax.random.randint(d, (3,), -(2**31), 2**31 - 1),
        "randint_folded": jax.random.randint(jax.random.fold_in(c, 3), (4,), lo, hi),
        "bits": jax.random.bits(jax.random.fold_in(d, 1), (4,), jnp.uint32),
        "bernoulli": jax.random.bernoulli(jax.random.split(d, 3)[2], p, (6,)),
        "folded_uniform": jax.random.uniform(jax.random.fold_in(c, 1)),
        "permutation": jax.random.permutation(jax.random.split(d, 3)[0], 5),
        "permutation_largest": jax.random.permutation(a, 1625),
        "key": jax.random.split(c, 5)[4],
    }


def _resolved(key, lo, hi, p):
    return draws.resolve(_plan(key, lo, hi, p))


def _one_call_each(key, lo, hi, p):
    with draws.one_call_per_draw():
        return draws.resolve(_plan(key, lo, hi, p))


_RESOLVED = jax.jit(_resolved)
_ONE_CALL_EACH = jax.jit(_one_call_each)
_REFERENCE = jax.jit(_by_jax_random)
_BATCHED = jax.jit(jax.vmap(_resolved, in_axes=(0, None, None, None)))
_BATCHED_REFERENCE = jax.jit(jax.vmap(_by_jax_random, in_axes=(0, None, None, None)))


def _plain(tree):
    """Numpy leaves, keys as their data."""
    keys = {n for n, v in tree.items() if jnp.issubdtype(v.dtype, jax.dtypes.prng_key)}
    return {n: np.asarray(jax.random.key_data(v) if n in keys else v) for n, v in tree.items()}


def _assert_same(got, want):
    got, want = _plain(got), _plain(want)
    assert got.keys() == want.keys()
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), lo=INT32, hi=INT32, p=st.floats(0.0, 1.0, width=32))
def test_every_kind_of_draw_equals_jax_random(seed, lo, hi, p):
    key = jax.random.key_data(jax.random.key(seed))
    args = (key, jnp.int32(lo), jnp.int32(hi), jnp.float32(p))
    want = _REFERENCE(*args)
    _assert_same(_RESOLVED(*args), want)
    _assert_same(_ONE_CALL_EACH(*args), want)


@pytest.mark.parametrize("lo, hi", [(5, 5), (9, 2), (-7, -2), (0, 70_000), (-(2**31), 2**31 - 1)])
def test_randint_edges_equal_jax_random_jitted_and_op_by_op(lo, hi):
    args = (jax.random.key_data(jax.random.key(11)), jnp.int32(lo), jnp.int32(hi), jnp.float32(0.3))
    want = _REFERENCE(*args)
    _assert_same(_RESOLVED(*args), want)
    eager = draws.resolve({"r": draws.Key(args[0]).split(4)[1].split()[1].randint((7,), lo, hi)})
    np.testing.assert_array_equal(eager["r"], want["randint_traced"])


def test_under_vmap_each_key_draws_what_it_draws_alone():
    keys = jax.random.key_data(jax.random.split(jax.random.key(3), 6))
    args = (jnp.int32(-4), jnp.int32(40), jnp.float32(0.6))
    _assert_same(_BATCHED(keys, *args), _BATCHED_REFERENCE(keys, *args))


_HASHES = {"random_bits", "random_split", "random_fold_in", "threefry2x32"}


def _threefry_calls(fn, *args) -> int:
    """Hashes in fn's program: jax.random's key-level calls (one hash each on a threefry key)
    and draws.py's direct calls of the hash, in nested programs too."""

    def count(jaxpr) -> int:
        subs = [p for e in jaxpr.eqns for p in e.params.values() if hasattr(p, "jaxpr")]
        here = sum(e.primitive.name in _HASHES for e in jaxpr.eqns)
        return here + sum(count(getattr(p.jaxpr, "jaxpr", p.jaxpr)) for p in subs)

    return count(jax.make_jaxpr(fn)(*args).jaxpr)


def test_a_plan_hashes_once_per_level_instead_of_once_per_draw():
    args = (jax.random.key_data(jax.random.key(0)), jnp.int32(0), jnp.int32(9), jnp.float32(0.5))
    # Levels: the root, its 4 children, theirs, and the randints' halves.
    assert _threefry_calls(_resolved, *args) == 4
    assert _threefry_calls(_one_call_each, *args) >= 20


def test_keys_of_other_schemes_are_drawn_by_jax_random():
    rbg = jax.random.key(5, impl="rbg")
    a, b = draws.Key(rbg).split()
    got = draws.resolve({"u": a.uniform((3,)), "r": b.fold_in(2).randint((2,), 0, 9)})
    ka, kb = jax.random.split(rbg)
    np.testing.assert_array_equal(got["u"], jax.random.uniform(ka, (3,)))
    want = jax.random.randint(jax.random.fold_in(kb, 2), (2,), 0, 9)
    np.testing.assert_array_equal(got["r"], want)
    with jax.threefry_partitionable(False):
        key = jax.random.key(5)
        got = draws.resolve({"u": draws.Key(key).split(3)[2].uniform((4,))})
        want = jax.random.uniform(jax.random.split(key, 3)[2], (4,))
        np.testing.assert_array_equal(got["u"], want)


def test_what_cannot_be_drawn_here_is_refused_in_one_line():
    key = draws.Key(jax.random.key(0))
    with pytest.raises(ValueError, match="more than one sort"):
        key.permutation(1626)
    with pytest.raises(ValueError, match="not a static uint32"):
        key.fold_in(-1)
    with pytest.raises(ValueError, match="one key, not a batch"):
        draws.Key(jax.random.split(jax.random.key(0), 3))
