"""Layouts, rules and configurations: validity, the rule-space size, determinism, splits."""

from __future__ import annotations

import math
from collections import deque

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.envs import pools
from dilemmax.envs.open_cleanup import constants as C
from dilemmax.envs.open_cleanup import dynamics as D
from dilemmax.envs.open_cleanup import generator
from dilemmax.envs.open_cleanup.conftest import SMALL


def test_rule_space_size_from_the_samplers_definition():
    # The sampler maps the 7 effects injectively into the ordered pairs of a 2-slot window over
    # 4 tools; count those maps from the constants the sampler uses.
    num_pairs = C.NUM_TOOLS**C.WINDOW
    num_effects = C.NUM_HUES + 2
    assert (num_pairs, num_effects) == (C.NUM_PAIRS, C.NUM_EFFECTS)
    count = math.factorial(num_pairs) // math.factorial(num_pairs - num_effects)
    assert count == C.rule_space_size() == 57_657_600


def test_rule_sampler_draws_injective_maps_covering_every_pair():
    rules = jax.vmap(generator.sample_rule)(jax.random.split(jax.random.PRNGKey(0), 4000))
    pairs = np.asarray(rules.effect_pairs)
    assert pairs.shape == (4000, C.NUM_EFFECTS)
    assert pairs.min() >= 0 and pairs.max() < C.NUM_PAIRS
    assert all(len(set(row)) == C.NUM_EFFECTS for row in pairs.tolist())
    # Every (effect, pair) combination occurs, about uniformly (expected 250 each).
    counts = np.zeros((C.NUM_EFFECTS, C.NUM_PAIRS), int)
    for effect in range(C.NUM_EFFECTS):
        counts[effect] = np.bincount(pairs[:, effect], minlength=C.NUM_PAIRS)
    assert counts.min() > 180 and counts.max() < 330
    # The derived lookup inverts the map; the other 9 pairs do nothing.
    table = np.asarray(generator.pair_effects(jax.tree.map(lambda x: x[0], rules)))
    assert sorted(table[pairs[0]].tolist()) == list(range(C.NUM_EFFECTS))
    assert (table == C.NO_EFFECT).sum() == C.NUM_PAIRS - C.NUM_EFFECTS


def _connected(cells) -> bool:
    cells = {tuple(c) for c in cells}
    start = next(iter(cells))
    seen, todo = {start}, deque([start])
    while todo:
        r, c = todo.popleft()
        for nb in ((r - 1, c), (r + 1, c), (r, c - 1), (r, c + 1)):
            if nb in cells and nb not in seen:
                seen.add(nb)
                todo.append(nb)
    return len(seen) == len(cells)


def _manhattan(a, b) -> int:
    return int(np.abs(np.asarray(a)[:, None] - np.asarray(b)[None]).sum(-1).min())


@pytest.mark.slow
def test_layouts_follow_the_generator_rules(env):
    items = jax.device_get(env.layout_pool.items)
    for i in range(pools.pool_size(env.layout_pool)):
        lay = jax.tree.map(lambda x, i=i: np.asarray(x[i]), items)
        groups = [lay.river, lay.stream, lay.orchard, lay.stations, lay.spawns]
        sizes = [C.NUM_RIVER, C.NUM_STREAM, C.NUM_ORCHARD, C.NUM_STATIONS, C.NUM_SPAWNS]
        assert [len(g) for g in groups] == sizes
        every = np.concatenate(groups)
        assert len({tuple(c) for c in every.tolist()}) == len(every)  # no cell used twice
        assert every.min() >= 0 and (every[:, 0] < C.GRID_HEIGHT).all()
        assert (every[:, 1] < C.GRID_WIDTH).all()
        assert _connected(lay.river.tolist()) and _connected(lay.orchard.tolist())
        assert _manhattan(lay.stream[:1], lay.river) == 1  # the stream leaves the river
        assert _connected(np.concatenate([lay.river, lay.stream]).tolist())
        assert min(_manhattan([o], lay.river) for o in lay.orchard) >= C.ORCHARD_MIN_RIVER_DIST
        steps = np.abs(np.diff(lay.stations, axis=0)).sum(-1)
        assert (steps == 2).all()  # a chain, one cell between neighbours
        gaps = np.abs(lay.stations[:, None] - lay.stations[None]).max(-1)
        assert (gaps + np.eye(C.NUM_STATIONS, dtype=int) * 9 >= 2).all()  # none touching
        assert lay.station_tools.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
        for s in lay.spawns:
            assert 1 <= _manhattan([s], lay.river) <= 7 and 1 <= _manhattan([s], lay.orchard) <= 7


@pytest.mark.slow
def test_pools_are_deterministic_in_the_seed_and_split_disjoint():
    a = generator.build_layout_pool(seed=5, size=6)
    b = generator.build_layout_pool(seed=5, size=6)
    c = generator.build_layout_pool(seed=6, size=6)
    leaves = lambda p: [np.asarray(x) for x in jax.tree.leaves(p.items)]  # noqa: E731
    assert all(np.array_equal(x, y) for x, y in zip(leaves(a), leaves(b), strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(leaves(a), leaves(c), strict=True))
    rules = generator.build_rule_pool(seed=3, size=SMALL["num_rules"])
    train = generator.select_split(rules, "train")
    held = generator.select_split(rules, "held_out")
    assert pools.pool_size(train) == 400 and 0 < pools.pool_size(held) <= 100
    seen = {tuple(r) for r in np.asarray(train.items.effect_pairs).tolist()}
    assert not any(tuple(r) in seen for r in np.asarray(held.items.effect_pairs).tolist())


@pytest.mark.slow
def test_config_lays_out_the_map(env):
    # A grid of configurations is one vmap.
    configs = jax.jit(jax.vmap(env.sample_config))(jax.random.split(jax.random.PRNGKey(8), 3))
    assert configs.initial_grid.shape == (3, C.GRID_HEIGHT, C.GRID_WIDTH)
    assert jnp.asarray(configs.p_spawn).shape == (3,)
    config = jax.tree.map(lambda x: x[0], configs)
    grid = np.asarray(config.initial_grid)
    lay = config.layout
    river_codes = grid[np.asarray(lay.river)[:, 0], np.asarray(lay.river)[:, 1]]
    assert np.asarray(D.is_waste(river_codes[: C.NUM_POLLUTED_START])).all()
    assert (river_codes[C.NUM_POLLUTED_START :] == C.WATER).all()
    hues = (river_codes[: C.NUM_POLLUTED_START] - C.WASTE_BASE) // C.NUM_SHADES
    assert (hues == int(config.dominant_hue)).all()  # skew 1.0
    assert (grid == C.ORCHARD).sum() == C.NUM_ORCHARD
    assert (grid >= C.STATION_BASE).sum() == C.NUM_STATIONS
    assert (grid == C.WATER).sum() == C.NUM_CLEAN_START + C.NUM_STREAM
    assert int(np.asarray(config.river_mask).sum()) == C.NUM_RIVER
