"""The unrolled reductions equal jnp's; fastrandom.bits equals jax.random.bits; subkey equals
jax.random.split."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.envs import fastrandom, unrolled
from dilemmax.envs.base import subkey


@pytest.mark.slow
@pytest.mark.parametrize("width", [1, 2, 3, 9])
def test_unrolled_reductions_equal_jnp(width):
    rng = np.random.default_rng(width)
    x = rng.integers(-4, 4, (64, width)).astype(np.int32)
    b = x > 0
    f = rng.random((64, width)).astype(np.float32)
    np.testing.assert_array_equal(unrolled.total(jnp.asarray(x)), x.sum(-1))
    np.testing.assert_array_equal(unrolled.total(jnp.asarray(b)), b.sum(-1))
    np.testing.assert_array_equal(unrolled.mean(jnp.asarray(f)), jnp.mean(jnp.asarray(f), -1))
    np.testing.assert_array_equal(unrolled.cumsum(jnp.asarray(b)), b.cumsum(-1))
    np.testing.assert_array_equal(unrolled.first_argmax(jnp.asarray(x)), x.argmax(-1))
    np.testing.assert_array_equal(unrolled.maximum(jnp.asarray(x)), x.max(-1))
    np.testing.assert_array_equal(unrolled.minimum(jnp.asarray(x)), x.min(-1))
    np.testing.assert_array_equal(unrolled.all_(jnp.asarray(b)), b.all(-1))
    np.testing.assert_array_equal(unrolled.any_(jnp.asarray(b)), b.any(-1))
    index = rng.integers(-1, width + 1, 64)
    inside = (index >= 0) & (index < width)
    want = np.where(inside, x[np.arange(64), np.clip(index, 0, width - 1)], 0)
    np.testing.assert_array_equal(unrolled.take(jnp.asarray(x), jnp.asarray(index)), want)
    for shift in range(-2, width + 2):
        rolled = x[:, (np.arange(width) + shift) % width]
        np.testing.assert_array_equal(unrolled.rotate(jnp.asarray(x), shift, axis=1), rolled)


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(), (1,), (3,), (4, 5)])
def test_fastrandom_bits_equal_jax_random_bits(shape):
    for key in (jax.random.key(0), jax.random.key(2**31 + 5), jax.random.PRNGKey(7)):
        want = jax.random.bits(key, shape, jnp.uint32)
        np.testing.assert_array_equal(fastrandom.bits(key, shape), want)
    keys = jax.random.split(jax.random.key(3), 50)
    got = jax.jit(jax.vmap(lambda k: fastrandom.bits(k, shape)))(keys)
    np.testing.assert_array_equal(got, jax.vmap(lambda k: jax.random.bits(k, shape))(keys))
    # Other implementations go to jax.random itself.
    rbg = jax.random.key(1, impl="rbg")
    np.testing.assert_array_equal(fastrandom.bits(rbg, shape), jax.random.bits(rbg, shape))


def test_subkey_is_the_split():
    for key in (jax.random.key(11), jax.random.PRNGKey(11), jax.random.key(11, impl="rbg")):
        typed = key if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else None
        typed = typed if typed is not None else jax.random.wrap_key_data(key)
        for i in (0, 1):
            np.testing.assert_array_equal(
                jax.random.key_data(subkey(key, i)),
                jax.random.key_data(jax.random.split(typed)[i]),
            )
    keys = jax.random.split(jax.random.key(4), 8)
    np.testing.assert_array_equal(
        jax.random.key_data(jax.vmap(lambda k: subkey(k, 1))(keys)),
        jax.random.key_data(jax.vmap(lambda k: jax.random.split(k)[1])(keys)),
    )


def test_fold_in_equals_jax_fold_in():
    for index in (0, 1, 2, 7, 2**31 - 1):
        for key in (jax.random.key(5), jax.random.key(2**31 + 3)):
            np.testing.assert_array_equal(
                jax.random.key_data(fastrandom.fold_in(key, index)),
                jax.random.key_data(jax.random.fold_in(key, index)),
            )
    keys = jax.random.split(jax.random.key(9), 40)
    got = jax.jit(jax.vmap(lambda k: fastrandom.fold_in(k, 3)))(keys)
    want = jax.vmap(lambda k: jax.random.fold_in(k, 3))(keys)
    np.testing.assert_array_equal(jax.random.key_data(got), jax.random.key_data(want))
    # The result is a key of the same implementation; others go to jax.random itself.
    assert jax.random.key_impl(got) == jax.random.key_impl(keys)
    rbg = jax.random.key(1, impl="rbg")
    np.testing.assert_array_equal(
        jax.random.key_data(fastrandom.fold_in(rbg, 1)),
        jax.random.key_data(jax.random.fold_in(rbg, 1)),
    )


def test_uniform_equals_jax_random_uniform():
    for key in (jax.random.key(0), jax.random.key(2**31 + 1), jax.random.PRNGKey(12)):
        np.testing.assert_array_equal(fastrandom.uniform(key), jax.random.uniform(key))
    keys = jax.random.split(jax.random.key(8), 4096)
    got = jax.jit(jax.vmap(fastrandom.uniform))(keys)
    np.testing.assert_array_equal(got, jax.vmap(jax.random.uniform)(keys))
    assert got.dtype == jnp.float32 and float(got.min()) >= 0.0 and float(got.max()) < 1.0
    rbg = jax.random.key(1, impl="rbg")
    np.testing.assert_array_equal(fastrandom.uniform(rbg), jax.random.uniform(rbg))
