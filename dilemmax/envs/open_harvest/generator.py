"""Procedural content of OpenHarvest: layouts, hidden rules, patch colours and their pools.

Everything here is a pure function of a PRNG key, so the pools built from it are deterministic
in their seed. Pools are built once per (seed, size) and cached, since every env instance of a
process shares them.

Layout: 6 patches (four 13-cell diamonds, two 6-cell triangles, each turned by a random number
of quarter turns) placed at random on the 16 x 22 map, every tree at least
``SPAWN_TREE_DISTANCE`` (4) rows from the spawn row, and trees of different patches at least
``PATCH_SEPARATION`` apart; 20 spawn cells on a random row (rows that leave no room are
rejected with the attempt, so the spawn row tends to lie near the top or bottom edge).
Placement is rejection sampling inside ``lax.while_loop``, so the generator stays jittable and
vmappable.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.envs import pool_store, pools
from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest.types import OpenHarvestConfig, OpenHarvestLayout, OpenHarvestRule

# ---------------------------------------------------------------- patch shapes


def _diamond() -> np.ndarray:
    """int32[13, 2]: cells within Manhattan distance 2 of the centre."""
    cells = [(r, q) for r in range(-2, 3) for q in range(-2, 3) if abs(r) + abs(q) <= 2]
    return np.array(cells, dtype=np.int32)


def _triangle() -> np.ndarray:
    """int32[6, 2]: a right triangle of 1 / 2 / 3 cells on three rows."""
    return np.array([(0, 0), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2)], dtype=np.int32)


def _turns(shape: np.ndarray) -> np.ndarray:
    """int32[4, k, 2]: ``shape`` turned by 0-3 quarter turns clockwise, top-left at (0, 0)."""
    out = []
    cells = shape
    for _ in range(4):
        out.append(cells - cells.min(axis=0))
        cells = np.stack([cells[:, 1], -cells[:, 0]], axis=1)  # (r, c) -> (c, -r)
    return np.stack(out).astype(np.int32)


SHAPES = {13: _diamond(), 6: _triangle()}
PATCH_TURNS = tuple(_turns(SHAPES[size]) for size in c.PATCH_SIZES)  # per patch: [4, k, 2]

# Offsets at Manhattan distance 1..2: a tree's 12-cell neighbourhood.
NEIGHBOUR_OFFSETS = np.array(
    [
        (r, q)
        for r in range(-2, 3)
        for q in range(-2, 3)
        if 0 < abs(r) + abs(q) <= c.NEIGHBOURHOOD_RADIUS
    ],
    dtype=np.int32,
)
# Offsets within the separation radius: cells a new patch may not use near an existing tree.
_EXCLUSION_OFFSETS = np.array(
    [
        (r, q)
        for r in range(-c.PATCH_SEPARATION, c.PATCH_SEPARATION + 1)
        for q in range(-c.PATCH_SEPARATION, c.PATCH_SEPARATION + 1)
        if abs(r) + abs(q) < c.PATCH_SEPARATION
    ],
    dtype=np.int32,
)

# ---------------------------------------------------------------- layouts


def _forbidden_cells(trees: jax.Array, placed: jax.Array, spawn_row: jax.Array) -> jax.Array:
    """bool[H, W]: cells a new patch may not cover (near a placed tree, or near the spawn row).

    Args:
        trees: int32[T, 2], tree cells; only those flagged in ``placed`` count.
        placed: bool[T].
    """
    rows = jnp.arange(c.GRID_HEIGHT)[:, None]
    # Every tree stays SPAWN_TREE_DISTANCE rows from the spawn row, so it is at least that many
    # steps from every spawn cell: an agent zapped back to spawn has a walk back to the orchard.
    near_spawn = jnp.abs(rows - spawn_row) < c.SPAWN_TREE_DISTANCE
    forbidden = jnp.broadcast_to(near_spawn, (c.GRID_HEIGHT, c.GRID_WIDTH))
    near = trees[:, None, :] + jnp.asarray(_EXCLUSION_OFFSETS)[None]  # [T, E, 2]
    inside = (near >= 0).all(-1) & (near[..., 0] < c.GRID_HEIGHT) & (near[..., 1] < c.GRID_WIDTH)
    inside &= placed[:, None]
    flat = jnp.where(
        inside, near[..., 0] * c.GRID_WIDTH + near[..., 1], c.GRID_HEIGHT * c.GRID_WIDTH
    )
    marked = (
        jnp.zeros(c.GRID_HEIGHT * c.GRID_WIDTH, bool).at[flat.reshape(-1)].set(True, mode="drop")
    )
    return forbidden | marked.reshape(c.GRID_HEIGHT, c.GRID_WIDTH)


def _place_patch(bits, trees, placed, spawn_row, turned_shapes):
    """Places one patch uniformly among the anchors where it fits.

    Args:
        bits: uint32[1 + H*W], this patch's random bits (one for the turn, one per anchor).
        trees, placed: int32[T, 2] and bool[T], the trees placed so far.
        turned_shapes: int32[4, k, 2], the patch's shape under each number of quarter turns.

    Returns:
        (cells int32[k, 2], turns int32[], fits bool[]); ``fits`` is False if no anchor fits.
    """
    turns = (bits[0] % 4).astype(jnp.int32)
    shape = jnp.asarray(turned_shapes)[turns]  # [k, 2]
    forbidden = _forbidden_cells(trees, placed, spawn_row)
    rows, cols = jnp.meshgrid(jnp.arange(c.GRID_HEIGHT), jnp.arange(c.GRID_WIDTH), indexing="ij")
    anchors = jnp.stack([rows.reshape(-1), cols.reshape(-1)], axis=-1)  # [H*W, 2]
    cells = anchors[:, None, :] + shape[None, :, :]  # [H*W, k, 2]
    inside = (cells[..., 0] < c.GRID_HEIGHT) & (cells[..., 1] < c.GRID_WIDTH)
    clipped_r = jnp.minimum(cells[..., 0], c.GRID_HEIGHT - 1)
    clipped_c = jnp.minimum(cells[..., 1], c.GRID_WIDTH - 1)
    fits = jnp.all(inside & ~forbidden[clipped_r, clipped_c], axis=-1)  # [H*W]
    # The fitting anchor with the largest random score: uniform among the anchors that fit.
    # (Scores are distinct with probability ~1 - 1e-5; a tie picks the lower anchor.)
    choice = jnp.argmax(jnp.where(fits, bits[1:] >> 1, 0) + fits)
    return cells[choice].astype(jnp.int32), turns, jnp.any(fits)


_BITS_PER_PATCH = 1 + c.GRID_HEIGHT * c.GRID_WIDTH


def _patch_groups() -> list[tuple[int, int, int]]:
    """(first patch, number of patches, size) of each run of equal-sized patches."""
    groups, first = [], 0
    for patch in range(1, c.NUM_PATCHES + 1):
        if patch == c.NUM_PATCHES or c.PATCH_SIZES[patch] != c.PATCH_SIZES[first]:
            groups.append((first, patch - first, c.PATCH_SIZES[first]))
            first = patch
    return groups


def _try_layout(key):
    """One placement attempt: (tree_positions [T, 2], patch_turns [P], spawn_row, success).

    Patches are placed one after the other, largest first; equal-sized patches share one loop
    body, and all randomness comes from one draw of bits, which keeps compilation short.
    """
    bits = jax.random.bits(key, (1 + c.NUM_PATCHES * _BITS_PER_PATCH,), jnp.uint32)
    spawn_row = (bits[0] % c.GRID_HEIGHT).astype(jnp.int32)
    patch_bits = bits[1:].reshape(c.NUM_PATCHES, _BITS_PER_PATCH)
    carry = (
        jnp.zeros((c.NUM_TREES, 2), jnp.int32),
        jnp.zeros((c.NUM_TREES,), bool),
        jnp.zeros((c.NUM_PATCHES,), jnp.int32),
        jnp.bool_(True),
    )
    offset = 0
    for first, count, size in _patch_groups():  # static: diamonds, then triangles

        def place(i, carry, first=first, size=size, offset=offset):
            trees, placed, turns, success = carry
            patch = first + i
            cells, turn, fits = _place_patch(
                patch_bits[patch], trees, placed, spawn_row, PATCH_TURNS[first]
            )
            start = offset + i * size
            trees = jax.lax.dynamic_update_slice(trees, cells, (start, 0))
            placed = jax.lax.dynamic_update_slice(placed, jnp.ones((size,), bool), (start,))
            return trees, placed, turns.at[patch].set(turn), success & fits

        carry = jax.lax.fori_loop(0, count, place, carry)
        offset += count * size
    trees, _, turns, success = carry
    return trees, turns, spawn_row, success


def neighbour_table(tree_positions: jax.Array) -> jax.Array:
    """int32[T, K]: for each tree, the trees at Manhattan distance 1-2, padded with ``T``."""
    num_trees = tree_positions.shape[0]
    dist = jnp.abs(tree_positions[:, None, :] - tree_positions[None, :, :]).sum(-1)
    near = (dist > 0) & (dist <= c.NEIGHBOURHOOD_RADIUS)  # [T, T]
    # Stable sort puts each row's neighbours first, in index order.
    order = jnp.argsort(~near, axis=1, stable=True)[:, : c.NEIGHBOURHOOD_SIZE]
    valid = jnp.take_along_axis(near, order, axis=1)
    return jnp.where(valid, order, num_trees).astype(jnp.int32)


def tree_index_grid(tree_positions: jax.Array) -> jax.Array:
    """int32[H, W]: the index of the tree on each cell, -1 elsewhere."""
    grid = jnp.full((c.GRID_HEIGHT, c.GRID_WIDTH), -1, jnp.int32)
    idx = jnp.arange(tree_positions.shape[0], dtype=jnp.int32)
    return grid.at[tree_positions[:, 0], tree_positions[:, 1]].set(idx)


def generate_layout(key: jax.Array) -> OpenHarvestLayout:
    """A random layout (jittable; retries placement until every patch fits).

    Raises nothing inside JAX: after ``MAX_LAYOUT_ATTEMPTS`` failures the last attempt is kept;
    with the default map this never happens in practice (tests check a pool for overlaps).
    """

    def attempt(carry):
        key, _, _, _, _, tries = carry
        return (key, *_try_layout(jax.random.fold_in(key, tries)), tries + 1)

    def keep_going(carry):
        *_, success, tries = carry
        return ~success & (tries < c.MAX_LAYOUT_ATTEMPTS)

    init = (
        key,
        jnp.zeros((c.NUM_TREES, 2), jnp.int32),
        jnp.zeros((c.NUM_PATCHES,), jnp.int32),
        jnp.int32(0),
        jnp.bool_(False),
        jnp.int32(0),
    )
    _, trees, turns, spawn_row, _, _ = jax.lax.while_loop(keep_going, attempt, init)
    spawn_cols = jnp.arange(c.NUM_SPAWNS, dtype=jnp.int32) + c.SPAWN_FIRST_COL
    spawn_points = jnp.stack([jnp.full_like(spawn_cols, spawn_row), spawn_cols], axis=-1)
    tree_patch = jnp.asarray(np.repeat(np.arange(c.NUM_PATCHES), c.PATCH_SIZES), jnp.int32)
    return OpenHarvestLayout(
        tree_positions=trees,
        tree_patch=tree_patch,
        neighbours=neighbour_table(trees),
        tree_index=tree_index_grid(trees),
        walls=jnp.zeros((c.GRID_HEIGHT, c.GRID_WIDTH), bool),
        spawn_points=spawn_points,
        spawn_row=spawn_row,
        patch_turns=turns,
    )


# ---------------------------------------------------------------- hidden rules


def validate_stage_orders(stage_orders: int) -> None:
    """Raises ValueError unless ``stage_orders`` is 1..6."""
    top = c.DEFAULT_STAGE_ORDERS
    if isinstance(stage_orders, bool) or not isinstance(stage_orders, int | np.integer):
        raise ValueError(f"stage_orders must be an integer in 1..{top}, got {stage_orders!r}")
    if not 1 <= stage_orders <= top:
        raise ValueError(f"stage_orders must be in 1..{top}, got {stage_orders}")


def generate_rule(
    key: jax.Array, stage_orders: int = c.DEFAULT_STAGE_ORDERS, shared_pay_order: bool = False
) -> OpenHarvestRule:
    """Per colour, independent uniform rows of ``STAGE_PERMUTATIONS`` for pay and regrowth.

    ``stage_orders`` k < 6 (a curriculum option) draws the rows from the first k of
    ``STAGE_ORDER_PREFERENCE`` only. ``shared_pay_order`` (a curriculum option) gives every
    colour the first colour's pay row, so one taste tells the pay order of all colours; the
    regrowth rows stay per colour.
    """
    key_pay, key_regrow = jax.random.split(key)
    shape = (c.NUM_COLOURS,)
    pay = jax.random.randint(key_pay, shape, 0, stage_orders, dtype=jnp.int32)
    if shared_pay_order:
        pay = jnp.broadcast_to(pay[:1], shape)
    regrowth = jax.random.randint(key_regrow, shape, 0, stage_orders, dtype=jnp.int32)
    if stage_orders < c.DEFAULT_STAGE_ORDERS:  # the paper's draws (and pools) stay unchanged
        allowed = jnp.asarray(c.STAGE_ORDER_PREFERENCE[:stage_orders], jnp.int32)
        pay, regrowth = allowed[pay], allowed[regrowth]
    return OpenHarvestRule(pay_perm=pay, regrowth_perm=regrowth)


def rule_space_size(
    stage_orders: int = c.DEFAULT_STAGE_ORDERS, shared_pay_order: bool = False
) -> int:
    """Distinct rules ``generate_rule`` can draw: one of ``stage_orders`` rows per colour, twice
    (6^10 in the paper's game); with ``shared_pay_order`` one pay row for all colours
    (``stage_orders``^6)."""
    pay_rows = 1 if shared_pay_order else c.NUM_COLOURS
    return int(stage_orders) ** (pay_rows + c.NUM_COLOURS)


def rule_index(rule: OpenHarvestRule) -> jax.Array:
    """int32[]: a rule's position in the rule space (mixed radix over its 10 permutation rows)."""
    digits = jnp.concatenate([rule.pay_perm, rule.regrowth_perm])
    radix = c.STAGE_PERMUTATIONS.shape[0]
    weights = jnp.asarray(radix ** np.arange(digits.shape[0]), jnp.int32)
    return jnp.sum(digits * weights).astype(jnp.int32)


def rule_from_index(index) -> OpenHarvestRule:
    """Inverse of :func:`rule_index`."""
    radix = c.STAGE_PERMUTATIONS.shape[0]
    weights = jnp.asarray(radix ** np.arange(2 * c.NUM_COLOURS), jnp.int32)
    digits = (jnp.asarray(index, jnp.int32) // weights) % radix
    return OpenHarvestRule(pay_perm=digits[: c.NUM_COLOURS], regrowth_perm=digits[c.NUM_COLOURS :])


def validate_pay_levels(pay_levels) -> tuple[float, float, float]:
    """The pay levels as a tuple of 3 floats; raises ValueError unless they are 3 finite numbers
    sorted best first (strictly decreasing), as the rule rows and ``best_stage`` assume."""
    shown = repr(pay_levels)[:80]
    if isinstance(pay_levels, str | bytes) or not isinstance(pay_levels, list | tuple):
        raise ValueError(f"pay_levels must be a list of {c.NUM_STAGES} numbers, got {shown}")
    if len(pay_levels) != c.NUM_STAGES:
        raise ValueError(
            f"pay_levels must have {c.NUM_STAGES} numbers (one per stage), got {len(pay_levels)}"
        )
    for level in pay_levels:
        if isinstance(level, bool) or not isinstance(level, int | float | np.number):
            raise ValueError(f"pay_levels must hold numbers, got {level!r} in {shown}")
        if not np.isfinite(level):
            raise ValueError(f"pay_levels must be finite, got {level!r} in {shown}")
    levels = tuple(float(level) for level in pay_levels)
    if not all(a > b for a, b in zip(levels[:-1], levels[1:], strict=True)):
        raise ValueError(
            f"pay_levels must be sorted best first (strictly decreasing: level 0 is what the "
            f"best stage pays, level 2 the worst), got {shown}"
        )
    return levels


def rule_tables(
    rule: OpenHarvestRule, pay_levels: tuple[float, ...] = c.PAY_LEVELS
) -> tuple[jax.Array, jax.Array]:
    """(pay float32[C, G], regrowth_multiplier float32[C, G]) of a rule.

    ``pay_levels`` (best first) are the three pays the rule's rows permute over the stages;
    the paper's are (1, 0.5, 0.25).
    """
    perms = jnp.asarray(c.STAGE_PERMUTATIONS)
    pay = jnp.asarray(pay_levels, jnp.float32)[perms[rule.pay_perm]]
    mult = jnp.asarray(c.REGROWTH_MULTIPLIERS, jnp.float32)[perms[rule.regrowth_perm]]
    return pay, mult


def sample_patch_colours(key: jax.Array) -> jax.Array:
    """int32[P]: each patch's colour, uniform over the 5 colours, with replacement."""
    return jax.random.randint(key, (c.NUM_PATCHES,), 0, c.NUM_COLOURS, dtype=jnp.int32)


def make_config(
    layout: OpenHarvestLayout,
    rule: OpenHarvestRule,
    patch_colours: jax.Array,
    pay_levels: tuple[float, ...] = c.PAY_LEVELS,
) -> OpenHarvestConfig:
    """The configuration of ``layout`` x ``rule`` x ``patch_colours`` with the paper's numbers
    (the pay levels, best first, may be a curriculum's: see ``OpenHarvestEnv(pay_levels=)``)."""
    pay, mult = rule_tables(rule, pay_levels)
    i32 = lambda v: jnp.asarray(v, jnp.int32)
    return OpenHarvestConfig(
        layout=layout,
        rule=rule,
        patch_colours=jnp.asarray(patch_colours, jnp.int32),
        pay=pay,
        regrowth_multiplier=mult,
        base_regrowth=jnp.asarray(c.BASE_REGROWTH, jnp.float32),
        stage_length_min=i32(c.STAGE_LENGTH_MIN),
        stage_length_max=i32(c.STAGE_LENGTH_MAX),
        rot_regrow_min=i32(c.ROT_REGROW_MIN),
        rot_regrow_max=i32(c.ROT_REGROW_MAX),
        freeze_steps=i32(c.FREEZE_STEPS),
        zap_cooldown=i32(c.ZAP_COOLDOWN),
    )


# ---------------------------------------------------------------- pools

SPLITS = ("train", "held_out", "all")


def _stored_like(item_type: type) -> pools.Pool:
    """The structure of a stored pool (pool_store.py checks a file against it)."""
    return pools.Pool(pool_store.skeleton(item_type))


@functools.lru_cache(maxsize=8)
def layout_pools(seed: int, size: int, train_fraction: float) -> dict:
    """{"all", "train", "held_out"} -> Pool of :class:`OpenHarvestLayout` (cached per arguments)."""
    pool = _layout_pool(seed, size)
    train, held_out = pools.split_pool(pool, train_fraction)
    return {"all": pool, "train": train, "held_out": held_out}


# Only the whole pool is stored: its splits are a few host slices, so storing them as well would
# keep every item on disk twice.
@pool_store.stored_as(_stored_like(OpenHarvestLayout))  # built once, then read by every process
def _layout_pool(seed: int, size: int) -> pools.Pool:
    return pools.build_pool(generate_layout, seed, size, unique=True)


@functools.lru_cache(maxsize=8)
def rule_pools(
    seed: int,
    size: int,
    train_fraction: float,
    stage_orders: int = c.DEFAULT_STAGE_ORDERS,
    shared_pay_order: bool = False,
) -> dict:
    """{"all", "train", "held_out"} -> Pool of :class:`OpenHarvestRule` (cached per arguments).

    The pool holds ``min(size, rule_space_size(stage_orders, shared_pay_order))`` distinct
    rules. With a single rule (``stage_orders=1``) there is nothing to hold out: every split is
    that rule (held-out evaluation then differs from training by layout and patch colours only).
    """
    validate_stage_orders(stage_orders)
    size = min(int(size), rule_space_size(stage_orders, shared_pay_order))
    pool = _rule_pool(seed, size, stage_orders, bool(shared_pay_order))
    if size == 1:
        return {"all": pool, "train": pool, "held_out": pool}
    train, held_out = pools.split_pool(pool, train_fraction)
    return {"all": pool, "train": train, "held_out": held_out}


@pool_store.stored_as(_stored_like(OpenHarvestRule))
def _rule_pool(seed: int, size: int, stage_orders: int, shared_pay_order: bool) -> pools.Pool:
    generate = functools.partial(
        generate_rule, stage_orders=stage_orders, shared_pay_order=shared_pay_order
    )
    return pools.build_pool(generate, seed, size, unique=True)


def sample_config(
    key: jax.Array, layout_pool, rule_pool, pay_levels: tuple[float, ...] = c.PAY_LEVELS
) -> OpenHarvestConfig:
    """A configuration: a layout and a rule from the pools, patch colours drawn fresh."""
    key_layout, key_rule, key_colours = jax.random.split(key, 3)
    layout = pools.sample_from_pool(key_layout, layout_pool)
    rule = pools.sample_from_pool(key_rule, rule_pool)
    return make_config(layout, rule, sample_patch_colours(key_colours), pay_levels)
