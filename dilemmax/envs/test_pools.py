"""Tests of seeded content pools: determinism, splits, sampling."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.envs import pools


def _layout(key):
    """A toy item: two leaves of different dtypes and shapes."""
    k1, k2 = jax.random.split(key)
    return {
        "grid": jax.random.randint(k1, (3, 4), 0, 5).astype(jnp.uint8),
        "rule": jax.random.randint(k2, (6,), 0, 1000, dtype=jnp.int32),
    }


def _small_space(key):
    """An item space of only 12 values, so collisions are certain in a pool of 10."""
    return jax.random.randint(key, (), 0, 12, dtype=jnp.int32)


def _equal(a, b):
    return all(
        np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


@pytest.mark.slow
def test_build_is_deterministic_in_the_seed():
    a = pools.build_pool(_layout, seed=3, size=50)
    b = pools.build_pool(_layout, seed=3, size=50)
    c = pools.build_pool(_layout, seed=4, size=50)
    assert pools.pool_size(a) == 50
    assert a.items["grid"].shape == (50, 3, 4) and a.items["grid"].dtype == jnp.uint8
    assert _equal(a, b)
    assert not np.array_equal(a.items["grid"], c.items["grid"])
    # item i is generate_one(split(PRNGKey(seed), N)[i]), whether vmapped or chunked
    key_5 = jax.random.split(jax.random.PRNGKey(3), 50)[5]
    assert _equal(pools.pool_item(a, 5), _layout(key_5))
    chunked = pools.build_pool(_layout, seed=3, size=50, batch_size=16)
    assert _equal(a, chunked)


def test_unique_pool_has_distinct_items_and_is_deterministic():
    plain = np.asarray(pools.build_pool(_small_space, seed=0, size=10).items)
    assert len(set(plain.tolist())) < 10  # the premise: collisions happen
    a = np.asarray(pools.build_pool(_small_space, seed=0, size=10, unique=True).items)
    b = np.asarray(pools.build_pool(_small_space, seed=0, size=10, unique=True).items)
    assert len(set(a.tolist())) == 10 and (a == b).all()
    with pytest.raises(ValueError):
        pools.build_pool(_small_space, seed=0, size=13, unique=True)


@pytest.mark.slow
def test_split_is_deterministic_disjoint_and_complete():
    pool = pools.build_pool(_layout, seed=1, size=100)
    train, held = pools.split_pool(pool, 0.8)
    train2, held2 = pools.split_pool(pool, 0.8)
    assert pools.pool_size(train) == 80 and pools.pool_size(held) == 20
    assert _equal(train, train2) and _equal(held, held2)
    rows = lambda p: {
        np.asarray(p.items["grid"][i]).tobytes() + np.asarray(p.items["rule"][i]).tobytes()
        for i in range(pools.pool_size(p))
    }
    assert not rows(train) & rows(held)
    assert rows(train) | rows(held) == rows(pool)


def test_split_drops_held_out_items_seen_in_training():
    pool = pools.build_pool(_small_space, seed=0, size=30)
    train, held = pools.split_pool(pool, 0.5)
    train_values = set(np.asarray(train.items).tolist())
    held_values = np.asarray(held.items).tolist()
    assert pools.pool_size(held) < 15
    assert not train_values & set(held_values)
    _, held_all = pools.split_pool(pool, 0.5, dedupe=False)
    assert pools.pool_size(held_all) == 15


def test_split_rejects_bad_fractions():
    pool = pools.build_pool(_small_space, seed=0, size=4)
    for fraction in (0.0, 1.0, 0.01):
        with pytest.raises(ValueError):
            pools.split_pool(pool, fraction)


def test_sample_from_pool_in_range_and_uniform():
    pool = pools.Pool(jnp.arange(8, dtype=jnp.int32) * 10)
    keys = jax.random.split(jax.random.key(0), 1600)
    draws = np.asarray(jax.jit(jax.vmap(lambda k: pools.sample_from_pool(k, pool)))(keys))
    assert set(draws.tolist()) == {0, 10, 20, 30, 40, 50, 60, 70}
    counts = np.bincount(draws // 10, minlength=8)
    assert (counts > 140).all(), counts  # 200 expected each
    one = pools.sample_from_pool(jax.random.key(5), pool)
    assert int(one) == int(jax.jit(pools.sample_from_pool)(jax.random.key(5), pool))


def test_concat_pools():
    a = pools.Pool({"x": jnp.zeros((2, 3))})
    b = pools.Pool({"x": jnp.ones((4, 3))})
    both = pools.concat_pools(a, b)
    assert pools.pool_size(both) == 6 and float(both.items["x"].sum()) == 12.0
