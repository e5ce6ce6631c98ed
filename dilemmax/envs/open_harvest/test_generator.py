"""Layouts, hidden rules, patch colours and their pools."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.envs import pools
from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest import generator
from dilemmax.envs.open_harvest.conftest import hand_layout
from dilemmax.envs.open_harvest.env import OpenHarvestEnv


@pytest.fixture(scope="module")
def layouts(env):
    # The session env's pool (seed 0, 16 layouts), so no extra pool is compiled here.
    return jax.device_get(generator.layout_pools(0, 16, 0.8)["all"].items)


def _shape_matches(cells: np.ndarray, size: int) -> bool:
    """Whether ``cells`` is the patch shape of ``size`` under some turn, translated."""
    normal = {tuple(x) for x in cells - cells.min(axis=0)}
    return any(
        {tuple(x) for x in turned} == normal for turned in generator._turns(generator.SHAPES[size])
    )


def _check_layout(layout):
    trees = np.asarray(layout.tree_positions)
    patch = np.asarray(layout.tree_patch)
    assert trees.shape == (c.NUM_TREES, 2)
    assert len({tuple(t) for t in trees}) == c.NUM_TREES  # no two trees on one cell
    assert (trees >= 0).all() and (trees[:, 0] < c.GRID_HEIGHT).all()
    assert (trees[:, 1] < c.GRID_WIDTH).all()
    assert np.bincount(patch).tolist() == list(c.PATCH_SIZES)
    for p, size in enumerate(c.PATCH_SIZES):
        assert _shape_matches(trees[patch == p], size)
    dist = np.abs(trees[:, None] - trees[None]).sum(-1)
    assert (dist[patch[:, None] != patch[None]] >= c.PATCH_SEPARATION).all()
    spawn = np.asarray(layout.spawn_points)
    row = int(layout.spawn_row)
    assert (spawn[:, 0] == row).all() and spawn[:, 1].tolist() == list(range(1, 21))
    assert not (trees[:, 0] == row).any()  # nobody spawns on a tree
    # Every spawn cell lies at least 4 steps from every tree (the reference's spawn distance).
    to_spawn = np.abs(trees[:, None] - spawn[None]).sum(-1)
    assert to_spawn.min() >= c.SPAWN_TREE_DISTANCE == 4
    # The neighbour table is exactly the trees at Manhattan distance 1-2.
    neighbours = np.asarray(layout.neighbours)
    for t in range(c.NUM_TREES):
        expected = set(np.flatnonzero((dist[t] > 0) & (dist[t] <= 2)).tolist())
        got = set(neighbours[t][neighbours[t] < c.NUM_TREES].tolist())
        assert got == expected
    index = np.asarray(layout.tree_index)
    assert (index >= 0).sum() == c.NUM_TREES
    assert (index[trees[:, 0], trees[:, 1]] == np.arange(c.NUM_TREES)).all()


def test_generated_layouts_obey_the_layout_rules(layouts):
    for i in range(16):
        _check_layout(jax.tree.map(lambda x, i=i: x[i], layouts))
    # Layouts vary: spawn rows, patch turns and tree positions differ across the pool.
    assert len(set(np.asarray(layouts.spawn_row).tolist())) > 4
    assert len(set(np.asarray(layouts.patch_turns)[:, 4:].reshape(-1).tolist())) == 4
    assert len({np.asarray(layouts.tree_positions[i]).tobytes() for i in range(16)}) == 16


@pytest.mark.slow
def test_spawn_cells_are_at_least_4_steps_from_every_tree_over_1000_sampled_layouts():
    # One program: vmapped batches of 25 in a scan. Placement is a rejection while_loop, which
    # under vmap runs until the slowest lane is done: 40 batches of 25 wait on 40 small maxima,
    # not every lane on the one largest of 1000 (the same 1000 layouts, several times faster).
    sample = jax.jit(lambda keys: jax.lax.map(generator.generate_layout, keys, batch_size=25))
    layouts = sample(jax.random.split(jax.random.key(3), 1000))
    trees = np.asarray(layouts.tree_positions)[:, :, None, :]  # [L, T, 1, 2]
    spawn = np.asarray(layouts.spawn_points)[:, None, :, :]  # [L, 1, S, 2]
    nearest = np.abs(trees - spawn).sum(-1).min(axis=(1, 2))
    assert nearest.min() == c.SPAWN_TREE_DISTANCE  # reached, never undercut
    # Both edges of the map host the spawn row.
    rows = np.asarray(layouts.spawn_row)
    assert (rows < c.GRID_HEIGHT // 2).any() and (rows >= c.GRID_HEIGHT // 2).any()


def test_hand_layout_used_by_the_other_tests_is_a_valid_layout():
    _check_layout(hand_layout())


@pytest.mark.slow
def test_pools_are_deterministic_in_the_seed_and_split_80_20(env):
    a = generator.layout_pools(0, 16, 0.8)  # built (and cached) by the env fixture
    b = pools.build_pool(generator.generate_layout, 0, 16, unique=True)  # built again
    for x, y in zip(jax.tree.leaves(a["all"].items), jax.tree.leaves(b.items), strict=True):
        np.testing.assert_array_equal(x, y)
    assert pools.pool_size(a["train"]) == 13 and pools.pool_size(a["held_out"]) == 3
    rules = generator.rule_pools(5, 100, 0.8)
    again = pools.build_pool(generator.generate_rule, 5, 100, unique=True)
    other = pools.build_pool(generator.generate_rule, 6, 100, unique=True)
    np.testing.assert_array_equal(again.items.pay_perm, rules["all"].items.pay_perm)
    assert not np.array_equal(other.items.pay_perm, rules["all"].items.pay_perm)
    assert pools.pool_size(rules["train"]) == 80 and pools.pool_size(rules["held_out"]) == 20
    train_ids = set(np.asarray(jax.vmap(generator.rule_index)(rules["train"].items)).tolist())
    held_ids = set(np.asarray(jax.vmap(generator.rule_index)(rules["held_out"].items)).tolist())
    assert len(train_ids) == 80 and not train_ids & held_ids


@pytest.mark.slow
def test_rule_space_size_from_the_sampler_definition():
    # The sampler draws one row of STAGE_PERMUTATIONS per colour for pay and one for regrowth:
    # check the table is exactly the orderings of 3 stages, then count.
    table = {tuple(row) for row in c.STAGE_PERMUTATIONS.tolist()}
    assert table == set(itertools.permutations(range(c.NUM_STAGES)))
    per_colour = len(table) * len(table)  # pay ordering x regrowth ordering
    assert per_colour == math.factorial(3) ** 2
    assert generator.rule_space_size() == per_colour**c.NUM_COLOURS == 60_466_176
    # The sampler reaches every row for every colour, independently for pay and regrowth.
    rules = jax.vmap(generator.generate_rule)(jax.random.split(jax.random.key(0), 3000))
    pay, regrow = np.asarray(rules.pay_perm), np.asarray(rules.regrowth_perm)
    for colour in range(c.NUM_COLOURS):
        pairs = {(p, g) for p, g in zip(pay[:, colour], regrow[:, colour], strict=True)}
        assert pairs == set(itertools.product(range(6), range(6)))
    # rule_index is a bijection onto [0, size): round trip, extremes, distinct ids.
    ids = np.asarray(jax.vmap(generator.rule_index)(rules))
    back = jax.vmap(generator.rule_from_index)(jnp.asarray(ids))
    np.testing.assert_array_equal(back.pay_perm, pay)
    np.testing.assert_array_equal(back.regrowth_perm, regrow)
    assert ids.min() >= 0 and ids.max() < generator.rule_space_size()
    last = generator.rule_from_index(generator.rule_space_size() - 1)
    assert np.asarray(last.pay_perm).tolist() == [5] * 5
    assert np.asarray(last.regrowth_perm).tolist() == [5] * 5


def test_rule_tables_are_permutations_of_the_levels():
    rule = generator.rule_from_index(12_345_678)
    pay, mult = generator.rule_tables(rule)
    for colour in range(c.NUM_COLOURS):
        assert sorted(np.asarray(pay[colour]).tolist()) == sorted(c.PAY_LEVELS)
        assert sorted(np.asarray(mult[colour]).tolist()) == sorted(c.REGROWTH_MULTIPLIERS)
        perm = c.STAGE_PERMUTATIONS[int(rule.pay_perm[colour])]
        assert np.asarray(pay[colour]).tolist() == [c.PAY_LEVELS[k] for k in perm]


def test_patch_colours_are_drawn_with_replacement():
    colours = np.asarray(
        jax.vmap(generator.sample_patch_colours)(jax.random.split(jax.random.key(1), 2000))
    )
    assert colours.shape == (2000, c.NUM_PATCHES)
    assert set(np.unique(colours).tolist()) == set(range(c.NUM_COLOURS))
    repeats = np.array([len(set(row)) < c.NUM_PATCHES for row in colours])
    # With 6 patches and 5 colours every draw repeats a colour (pigeonhole) ...
    assert repeats.all()
    # ... and any two patches are drawn independently: they share a colour 1 / 5 of the time.
    assert (colours[:, 0] == colours[:, 1]).mean() == pytest.approx(0.2, abs=0.04)


@pytest.mark.slow
def test_splits_draw_from_their_own_pool(env):
    held = OpenHarvestEnv(num_layouts=16, num_rules=64, pool_seed=0, split="held_out")
    every = OpenHarvestEnv(num_layouts=16, num_rules=64, pool_seed=0, split="all")
    train_layouts = {np.asarray(x).tobytes() for x in env.layout_pool.items.tree_positions}
    held_layouts = {np.asarray(x).tobytes() for x in held.layout_pool.items.tree_positions}
    assert len(train_layouts) == 13 and len(held_layouts) == 3
    assert not train_layouts & held_layouts
    assert pools.pool_size(every.layout_pool) == 16
    configs = jax.vmap(held.sample_config)(jax.random.split(jax.random.key(2), 30))
    drawn = {np.asarray(x).tobytes() for x in configs.layout.tree_positions}
    assert drawn <= held_layouts
    with pytest.raises(ValueError, match="split"):
        OpenHarvestEnv(split="test")
