"""Procedural content of OpenCleanup: map layouts, hidden recipe rules, episode configurations.

Layouts and rules are drawn once into seeded pools (:mod:`dilemmax.envs.pools`), split into a
train and a held-out part; an episode's configuration is one layout, one rule, a dominant waste
hue and the colours of the initial waste, sampled from those pools by ``sample_config``.

Layout generation runs in JAX: attempts are vmapped in chunks and the successful ones kept in key
order, so building the default pool of 256 layouts takes about a second after compilation. One
attempt:

1. River: a 2-wide persistent random walk (a 2 x 2 brush) that starts on a random edge; the first
   32 cells it paints, in painting order, form the river (any prefix of the painting order is
   4-connected, because each new brush cell touches the previous brush). 26 of them, at random,
   start polluted; 6 start as water.
2. Stream: a 1-wide random walk of 5 cells leaving the river; always water.
3. Orchard: 48 cells grown one at a time from a random seed (Eden growth) over the cells at least
   7 steps (Manhattan) from the river, favouring cells in the seed's row band or column band so
   the orchard is elongated; 4-connected by construction.
4. Stations: a chain of 8 stations, consecutive ones two cells apart in a row or column with an
   empty cell between, no two touching (not even diagonally), tools 0, 1, 2, 3, 0, 1, 2, 3 along
   the chain; the first 4-6 steps from the river and 2-4 from the orchard, the rest 3-7 and 2-5.
5. Spawn points: 7 distinct empty cells 1-7 steps from both the river and the orchard.

An attempt fails when a step finds no room (the river walk paints fewer than 32 cells, the
stream gets stuck, the orchard region is too small, the chain or the spawns do not fit).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.envs import pool_store, pools
from dilemmax.envs.open_cleanup import constants as C
from dilemmax.envs.open_cleanup.types import OpenCleanupConfig, OpenCleanupLayout, OpenCleanupRule

_BIG = 10_000
_DELTAS = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]], np.int32)  # grid.py orientation order


@functools.lru_cache(maxsize=8)
def _pairwise_manhattan(height: int, width: int) -> np.ndarray:
    """int32[H*W, H*W]: Manhattan distance between every two cells (row-major)."""
    rows, cols = np.divmod(np.arange(height * width), width)
    return (np.abs(rows[:, None] - rows[None]) + np.abs(cols[:, None] - cols[None])).astype(
        np.int32
    )


def distance_to(mask: jax.Array) -> jax.Array:
    """int32[H, W]: Manhattan distance from each cell to the nearest True cell of ``mask``."""
    height, width = mask.shape
    table = jnp.asarray(_pairwise_manhattan(height, width))
    flat = jnp.where(mask.reshape(1, -1), table, _BIG)
    return jnp.min(flat, axis=1).reshape(height, width)


def _neighbours(mask: jax.Array) -> jax.Array:
    """bool[H, W]: cells 4-adjacent to a True cell of ``mask`` (the cells themselves excluded)."""
    padded = jnp.pad(mask, 1)
    near = padded[:-2, 1:-1] | padded[2:, 1:-1] | padded[1:-1, :-2] | padded[1:-1, 2:]
    return near & ~mask


def _choose_cell(key: jax.Array, allowed: jax.Array, log_weight=None):
    """A random True cell of ``allowed`` (bool[H, W]) -> (int32[2], bool[] whether any existed)."""
    width = allowed.shape[1]
    logits = jnp.where(allowed, 0.0 if log_weight is None else log_weight, -jnp.inf).reshape(-1)
    flat = jax.random.categorical(key, logits)
    return jnp.stack([flat // width, flat % width]).astype(jnp.int32), jnp.any(allowed)


def _cells_of(mask: jax.Array, count: int, key: jax.Array):
    """``count`` distinct True cells of ``mask`` in random order -> (int32[count, 2], bool[])."""
    width = mask.shape[1]
    scores = jax.random.uniform(key, (mask.size,)) + mask.reshape(-1) * 2.0
    _, flat = jax.lax.top_k(scores, count)
    cells = jnp.stack([flat // width, flat % width], axis=-1).astype(jnp.int32)
    return cells, jnp.sum(mask) >= count


# ----------------------------------------------------------------------------- layout steps
def _river(key: jax.Array, height: int, width: int):
    """(int32[32, 2] river cells in random order, bool[] ok). The brush's corner stays on-grid."""
    k_edge, k_pos, k_dir, k_walk = jax.random.split(key, 4)
    max_r, max_c = height - 2, width - 2
    edge = jax.random.randint(k_edge, (), 0, 4)
    along = jax.random.uniform(k_pos)
    pos_r = jnp.floor(along * (max_r + 1)).astype(jnp.int32)
    pos_c = jnp.floor(along * (max_c + 1)).astype(jnp.int32)
    start_r = jnp.select([edge == 0, edge == 2], [0, max_r], pos_r)
    start_c = jnp.select([edge == 1, edge == 3], [max_c, 0], pos_c)
    # Start running along the edge (either way), so the river tends to hug it.
    flip = jax.random.bernoulli(k_dir)
    direction = jnp.where(edge % 2 == 0, jnp.where(flip, 1, 3), jnp.where(flip, 0, 2))
    deltas = jnp.asarray(_DELTAS)
    brush = jnp.asarray([[0, 0], [0, 1], [1, 0], [1, 1]], jnp.int32)

    def step(carry, k):
        r, c, d, rank, count = carry
        for offset in range(4):  # paint the brush cells in a fixed order
            rr, cc = r + brush[offset, 0], c + brush[offset, 1]
            fresh = rank[rr, cc] == _BIG
            rank = rank.at[rr, cc].set(jnp.where(fresh, count, rank[rr, cc]))
            count = count + fresh.astype(jnp.int32)
        k_turn, k_new = jax.random.split(k)
        new_d = jax.random.randint(k_new, (), 0, 4)
        d = jnp.where(jax.random.uniform(k_turn) < C.RIVER_TURN_PROB, new_d, d)
        nr, nc = r + deltas[d, 0], c + deltas[d, 1]
        inside = (nr >= 0) & (nr <= max_r) & (nc >= 0) & (nc <= max_c)
        # Off the allowed area: stay and pick another direction.
        d = jnp.where(inside, d, (d + 1 + new_d % 3) % 4)
        return (jnp.where(inside, nr, r), jnp.where(inside, nc, c), d, rank, count), None

    rank0 = jnp.full((height, width), _BIG, jnp.int32)
    carry = (start_r, start_c, direction, rank0, jnp.int32(0))
    keys = jax.random.split(k_walk, C.RIVER_WALK_STEPS)
    (_, _, _, rank, count), _ = jax.lax.scan(step, carry, keys)
    order = jnp.argsort(rank.reshape(-1))[: C.NUM_RIVER]
    cells = jnp.stack([order // width, order % width], axis=-1).astype(jnp.int32)
    shuffled = jax.random.permutation(jax.random.fold_in(key, 7), cells, axis=0)
    return shuffled, count >= C.NUM_RIVER


def _stream(key: jax.Array, river_mask: jax.Array):
    """(int32[5, 2] stream cells, bool[] ok): a 1-wide walk that starts next to the river."""
    height, width = river_mask.shape
    k_start, k_dir, k_walk = jax.random.split(key, 3)
    # The first stream cell touches the river; the walk adds the other four.
    start, any_start = _choose_cell(k_start, _neighbours(river_mask))
    deltas = jnp.asarray(_DELTAS)

    def step(carry, k):
        pos, d, path, length = carry
        k_turn, k_new = jax.random.split(k)
        nxt = pos + deltas[d]
        on_grid = (nxt[0] >= 0) & (nxt[0] < height) & (nxt[1] >= 0) & (nxt[1] < width)
        safe = jnp.clip(nxt, 0, jnp.asarray([height - 1, width - 1]))
        visited = jnp.any(jnp.all(path == nxt, axis=-1))
        ok = on_grid & ~river_mask[safe[0], safe[1]] & ~visited & (length < C.NUM_STREAM)
        path = path.at[jnp.minimum(length, C.NUM_STREAM - 1)].set(
            jnp.where(ok, nxt, path[jnp.minimum(length, C.NUM_STREAM - 1)])
        )
        new_d = jax.random.randint(k_new, (), 0, 4)
        turn = ~ok | (jax.random.uniform(k_turn) < C.STREAM_TURN_PROB)
        return (jnp.where(ok, nxt, pos), jnp.where(turn, new_d, d), path, length + ok), None

    path0 = jnp.full((C.NUM_STREAM, 2), -1, jnp.int32).at[0].set(start)
    d0 = jax.random.randint(k_dir, (), 0, 4)
    carry = (start, d0, path0, jnp.int32(1))
    keys = jax.random.split(k_walk, C.STREAM_WALK_STEPS)
    (_, _, path, length), _ = jax.lax.scan(step, carry, keys)
    return path, any_start & (length == C.NUM_STREAM)


def _orchard(key: jax.Array, allowed: jax.Array):
    """(bool[H, W] orchard of 48 cells grown inside ``allowed``, bool[] ok)."""
    height, width = allowed.shape
    k_seed, k_axis, k_grow = jax.random.split(key, 3)
    seed, any_room = _choose_cell(k_seed, allowed)
    horizontal = jax.random.bernoulli(k_axis)
    rows, cols = jnp.meshgrid(jnp.arange(height), jnp.arange(width), indexing="ij")
    in_band = jnp.where(horizontal, jnp.abs(rows - seed[0]) < 2, jnp.abs(cols - seed[1]) < 2)
    log_weight = jnp.log(1.0 + C.ORCHARD_AXIS_BIAS * in_band)
    grown0 = jnp.zeros((height, width), bool).at[seed[0], seed[1]].set(True)

    def grow(carry, k):
        grown, ok = carry
        frontier = _neighbours(grown) & allowed
        cell, any_frontier = _choose_cell(k, frontier, log_weight)
        grown = grown.at[cell[0], cell[1]].set(grown[cell[0], cell[1]] | any_frontier)
        return (grown, ok & any_frontier), None

    keys = jax.random.split(k_grow, C.NUM_ORCHARD - 1)
    (grown, ok), _ = jax.lax.scan(grow, (grown0, any_room), keys)
    return grown, ok


def _stations(key: jax.Array, empty: jax.Array, dist_river: jax.Array, dist_orchard: jax.Array):
    """(int32[8, 2] station chain, bool[] ok)."""
    height, width = empty.shape

    def within(dist, bounds):
        return (dist >= bounds[0]) & (dist <= bounds[1])

    first_ok = (
        empty
        & within(dist_river, C.STATION_FIRST_RIVER_DIST)
        & within(dist_orchard, C.STATION_FIRST_ORCHARD_DIST)
    )
    later_ok = (
        empty
        & within(dist_river, C.STATION_RIVER_DIST)
        & within(dist_orchard, C.STATION_ORCHARD_DIST)
    )
    k_start, k_dir, k_chain = jax.random.split(key, 3)
    start, any_start = _choose_cell(k_start, first_ok)
    steps = jnp.asarray(_DELTAS) * 2
    chain0 = jnp.full((C.NUM_STATIONS, 2), -100, jnp.int32).at[0].set(start)

    def extend(carry, inputs):
        chain, d, ok = carry
        index, k = inputs
        last = chain[index - 1]
        cand = last[None, :] + steps  # [4, 2]
        mid = last[None, :] + steps // 2
        on_grid = (
            (cand[:, 0] >= 0) & (cand[:, 0] < height) & (cand[:, 1] >= 0) & (cand[:, 1] < width)
        )
        safe = jnp.clip(cand, 0, jnp.asarray([height - 1, width - 1]))
        safe_mid = jnp.clip(mid, 0, jnp.asarray([height - 1, width - 1]))
        apart = jnp.max(jnp.abs(cand[:, None, :] - chain[None, :, :]), axis=-1) >= 2  # [4, 8]
        valid = (
            on_grid
            & later_ok[safe[:, 0], safe[:, 1]]
            & empty[safe_mid[:, 0], safe_mid[:, 1]]
            & jnp.all(apart, axis=1)
        )
        weights = jnp.where(jnp.arange(4) == d, C.STATION_KEEP_DIRECTION_WEIGHT, 1.0)
        choice = jax.random.categorical(k, jnp.where(valid, jnp.log(weights), -jnp.inf))
        any_valid = jnp.any(valid)
        chain = chain.at[index].set(jnp.where(any_valid, cand[choice], chain[index]))
        return (chain, jnp.where(any_valid, choice, d), ok & any_valid), None

    d0 = jax.random.randint(k_dir, (), 0, 4)
    inputs = (jnp.arange(1, C.NUM_STATIONS), jax.random.split(k_chain, C.NUM_STATIONS - 1))
    (chain, _, ok), _ = jax.lax.scan(extend, (chain0, d0, any_start), inputs)
    return chain, ok


def _mask_of(cells: jax.Array, height: int, width: int) -> jax.Array:
    """bool[H, W] with True on ``cells`` (int32[N, 2]; off-grid cells dropped)."""
    flat = cells[:, 0] * width + cells[:, 1]
    inside = (
        (cells[:, 0] >= 0) & (cells[:, 0] < height) & (cells[:, 1] >= 0) & (cells[:, 1] < width)
    )
    flat = jnp.where(inside, flat, height * width)
    return jnp.zeros(height * width, bool).at[flat].set(True, mode="drop").reshape(height, width)


def try_layout(key: jax.Array, height: int = C.GRID_HEIGHT, width: int = C.GRID_WIDTH):
    """One layout attempt -> (:class:`OpenCleanupLayout`, bool[] ok). Jittable and vmappable."""
    k_river, k_stream, k_orchard, k_stations, k_spawns = jax.random.split(key, 5)
    river, ok_river = _river(k_river, height, width)
    river_mask = _mask_of(river, height, width)
    stream, ok_stream = _stream(k_stream, river_mask)
    stream_mask = _mask_of(stream, height, width)
    dist_river = distance_to(river_mask)
    room = ~river_mask & ~stream_mask & (dist_river >= C.ORCHARD_MIN_RIVER_DIST)
    orchard_mask, ok_orchard = _orchard(k_orchard, room)
    empty = ~river_mask & ~stream_mask & ~orchard_mask
    dist_orchard = distance_to(orchard_mask)
    # Several chains from independent starts; the first one that fits is kept.
    chains, oks = jax.vmap(_stations, in_axes=(0, None, None, None))(
        jax.random.split(k_stations, C.STATION_CHAIN_TRIES), empty, dist_river, dist_orchard
    )
    stations, ok_stations = chains[jnp.argmax(oks)], jnp.any(oks)
    free = empty & ~_mask_of(stations, height, width)
    near = lambda d: (d >= C.SPAWN_DIST[0]) & (d <= C.SPAWN_DIST[1])  # noqa: E731
    spawns, ok_spawns = _cells_of(
        free & near(dist_river) & near(dist_orchard), C.NUM_SPAWNS, k_spawns
    )
    orchard, _ = _cells_of(orchard_mask, C.NUM_ORCHARD, jax.random.fold_in(k_orchard, 1))
    layout = OpenCleanupLayout(
        river=river,
        stream=stream,
        orchard=orchard,
        stations=stations,
        station_tools=jnp.arange(C.NUM_STATIONS, dtype=jnp.int32) % C.NUM_TOOLS,
        spawns=spawns,
    )
    ok = ok_river & ok_stream & ok_orchard & ok_stations & ok_spawns
    return layout, ok


def validate_difficulty(recipe_length: int, num_tools: int, num_hues: int, skew: float) -> None:
    """Raises ValueError naming the option when a difficulty setting cannot be played."""
    if recipe_length not in C.RECIPE_LENGTHS:
        raise ValueError(f"recipe_length must be one of {C.RECIPE_LENGTHS}, got {recipe_length!r}")
    if not C.MIN_TOOLS <= num_tools <= C.NUM_TOOLS:
        raise ValueError(f"num_tools must be in {C.MIN_TOOLS}..{C.NUM_TOOLS}, got {num_tools!r}")
    if not 1 <= num_hues <= C.NUM_HUES:
        raise ValueError(f"num_hues must be in 1..{C.NUM_HUES}, got {num_hues!r}")
    recipes, effects = C.num_recipes(recipe_length, num_tools), num_hues + 2
    if recipes < effects:
        raise ValueError(
            f"recipe_length={recipe_length} with num_tools={num_tools} gives {recipes} recipes, "
            f"fewer than the {effects} effects of num_hues={num_hues} (each effect needs its own "
            "recipe): raise num_tools or recipe_length, or lower num_hues"
        )
    if num_hues < C.NUM_HUES and skew != 1.0:
        raise ValueError(
            f"num_hues={num_hues} needs skew=1.0 (got {skew}): with skew < 1 reappearing waste "
            "takes any of the 5 hues, and hues out of play have no recipe"
        )


def sample_rule(
    key: jax.Array,
    recipe_length: int = C.RECIPE_LENGTH,
    num_tools: int = C.NUM_TOOLS,
    num_hues: int = C.NUM_HUES,
) -> OpenCleanupRule:
    """A rule uniform over the injective maps of the effects in play into the recipes.

    The paper's game (defaults): P(16, 7) maps of the 7 effects into the 16 ordered pairs of the
    4 tools. With fewer tools, only pairs of tools ``0..num_tools-1`` are recipes. With
    ``recipe_length`` 1 a recipe is one tool ``t``, stored as the pair ``(t, t)`` (which a cleaner
    can always produce); :func:`pair_effects` then lets any pair ending in ``t`` carry it. Effects
    of hues out of play (``num_hues`` < 5) get the pair index ``NUM_PAIRS``: no recipe.
    """
    recipes = C.num_recipes(recipe_length, num_tools)
    drawn = jax.random.permutation(key, recipes)[: num_hues + 2]
    if recipe_length == 1:
        pairs = drawn * C.NUM_TOOLS + drawn
    else:
        first, second = jnp.divmod(drawn, num_tools)
        pairs = first * C.NUM_TOOLS + second
    hue_clears = jnp.full((C.NUM_HUES,), C.NUM_PAIRS, jnp.int32).at[:num_hues].set(pairs[:num_hues])
    effect_pairs = jnp.concatenate([hue_clears, pairs[num_hues:]])
    return OpenCleanupRule(effect_pairs=effect_pairs.astype(jnp.int32))


def pair_effects(rule: OpenCleanupRule, recipe_length: int = C.RECIPE_LENGTH) -> jax.Array:
    """int32[16]: the effect of each pick-up pair, ``NO_EFFECT`` (7) for the idle pairs.

    With ``recipe_length`` 1 the effect of a (full) window depends on its last pick-up only: the
    recipe ``(t, t)`` is copied to every pair ``(x, t)``.
    """
    effects = jnp.arange(C.NUM_EFFECTS, dtype=jnp.int32)
    table = jnp.full((C.NUM_PAIRS,), C.NO_EFFECT, jnp.int32)
    if recipe_length == 1:
        last = rule.effect_pairs % C.NUM_TOOLS
        in_play = rule.effect_pairs < C.NUM_PAIRS
        for first in range(C.NUM_TOOLS):
            index = jnp.where(in_play, first * C.NUM_TOOLS + last, C.NUM_PAIRS)
            table = table.at[index].set(effects, mode="drop")
        return table
    return table.at[rule.effect_pairs].set(effects, mode="drop")


# ----------------------------------------------------------------------------- pools
@functools.lru_cache(maxsize=8)
def _batched_attempt(height: int, width: int):
    """The compiled, vmapped :func:`try_layout` of one grid size (compiled once per process)."""
    return jax.jit(jax.vmap(lambda key: try_layout(key, height, width)))


# The structures of the two pools (pool_store.py checks a stored file against them).
LAYOUTS_LIKE = pools.Pool(pool_store.skeleton(OpenCleanupLayout))
RULES_LIKE = pools.Pool(pool_store.skeleton(OpenCleanupRule))


def build_layout_pool(
    seed: int = C.LAYOUT_POOL_SEED,
    size: int = C.DEFAULT_NUM_LAYOUTS,
    height: int = C.GRID_HEIGHT,
    width: int = C.GRID_WIDTH,
    chunk: int = 512,
) -> pools.Pool:
    """A pool of ``size`` layouts (leading axis ``size``), deterministic in ``seed``.

    Attempts run ``chunk`` at a time (one vmapped program); round ``r`` uses the keys
    ``split(fold_in(PRNGKey(seed), r), chunk)`` and the successful attempts are kept in key order
    until there are ``size`` of them, so the pool is a pure function of ``(seed, size)`` (and
    ``chunk``).
    """
    attempt = _batched_attempt(height, width)
    root = jax.random.PRNGKey(seed)
    kept, num_kept = [], 0
    for round_index in range(C.MAX_LAYOUT_ROUNDS):
        layouts, ok = jax.device_get(
            attempt(jax.random.split(jax.random.fold_in(root, round_index), chunk))
        )
        index = np.flatnonzero(ok)[: size - num_kept]
        kept.append(jax.tree.map(lambda x, i=index: x[i], layouts))
        num_kept += index.size
        if num_kept == size:
            return pools.Pool(jax.tree.map(lambda *xs: jnp.asarray(np.concatenate(xs)), *kept))
    raise RuntimeError(f"layout generation keeps failing on a {height} x {width} grid")


def build_rule_pool(
    seed: int = C.RULE_POOL_SEED,
    size: int = C.DEFAULT_NUM_RULES,
    recipe_length: int = C.RECIPE_LENGTH,
    num_tools: int = C.NUM_TOOLS,
    num_hues: int = C.NUM_HUES,
):
    """A pool of ``size`` rules of one difficulty, deterministic in ``seed``.

    When the rule space is no larger than ``size`` (easy curriculum settings: 24 rules for one
    hue, one-pick-up recipes and 4 tools), the pool keeps each rule once, in order of first draw,
    so that a train / held-out split holds out rules never trained on.
    """
    sample = functools.partial(
        sample_rule, recipe_length=recipe_length, num_tools=num_tools, num_hues=num_hues
    )
    pool = pools.build_pool(sample, seed, size)
    if C.rule_space_size(recipe_length, num_tools, num_hues) > size:
        return pool
    rows = np.asarray(pool.items.effect_pairs)
    _, first = np.unique(rows, axis=0, return_index=True)
    return pools.Pool(OpenCleanupRule(effect_pairs=jnp.asarray(rows[np.sort(first)])))


def select_split(pool, split: str, train_fraction: float = C.DEFAULT_TRAIN_FRACTION):
    """``"train"``, ``"held_out"`` or ``"all"`` of a pool."""
    if split == "all":
        return pool
    train, held_out = pools.split_pool(pool, train_fraction)
    if split == "train":
        return train
    if split == "held_out":
        return held_out
    raise ValueError(f"split must be 'train', 'held_out' or 'all', got {split!r}")


# ----------------------------------------------------------------------------- configurations
def waste_codes(key: jax.Array, dominant_hue: jax.Array, skew: jax.Array, shape=()) -> jax.Array:
    """uint8[shape] waste codes: the dominant hue (random shade) with probability ``skew``, else
    uniform over the 15 types."""
    k_skew, k_shade, k_any = jax.random.split(key, 3)
    shade = jax.random.randint(k_shade, shape, 0, C.NUM_SHADES)
    any_type = jax.random.randint(k_any, shape, 0, C.NUM_WASTE_TYPES)
    dominant = dominant_hue * C.NUM_SHADES + shade
    kind = jnp.where(jax.random.uniform(k_skew, shape) < skew, dominant, any_type)
    return (C.WASTE_BASE + kind).astype(jnp.uint8)


def initial_grid(layout: OpenCleanupLayout, waste: jax.Array, height: int, width: int) -> jax.Array:
    """uint8[H, W]: the map at a trial start; ``waste`` is uint8[26], the polluted cells' codes."""
    grid = jnp.full((height, width), C.GROUND, jnp.uint8)
    polluted = layout.river[: C.NUM_POLLUTED_START]
    clean = layout.river[C.NUM_POLLUTED_START :]
    grid = grid.at[polluted[:, 0], polluted[:, 1]].set(waste)
    grid = grid.at[clean[:, 0], clean[:, 1]].set(jnp.uint8(C.WATER))
    grid = grid.at[layout.stream[:, 0], layout.stream[:, 1]].set(jnp.uint8(C.WATER))
    grid = grid.at[layout.orchard[:, 0], layout.orchard[:, 1]].set(jnp.uint8(C.ORCHARD))
    tools = (C.STATION_BASE + layout.station_tools).astype(jnp.uint8)
    return grid.at[layout.stations[:, 0], layout.stations[:, 1]].set(tools)


def make_config(
    key: jax.Array,
    layout: OpenCleanupLayout,
    rule: OpenCleanupRule,
    height: int = C.GRID_HEIGHT,
    width: int = C.GRID_WIDTH,
    p_spawn: float = C.P_SPAWN,
    skew: float = C.SKEW,
    apple_rate: float = C.APPLE_RATE,
    pollution_threshold: float = C.POLLUTION_THRESHOLD,
    spawn_start: int = C.WASTE_SPAWN_START,
    dominant_hue: jax.Array | None = None,
    recipe_length: int = C.RECIPE_LENGTH,
    num_tools: int = C.NUM_TOOLS,
    num_hues: int = C.NUM_HUES,
) -> OpenCleanupConfig:
    """A configuration on ``layout`` and ``rule``: draws the dominant hue (unless given; one of
    the ``num_hues`` in play) and the colours of the 26 initially polluted cells. The stations
    cycle through ``num_tools`` tools along the chain (0, 1, 2, 0, ... for 3)."""
    k_hue, k_waste = jax.random.split(key)
    if num_tools != C.NUM_TOOLS:
        tools = jnp.arange(C.NUM_STATIONS, dtype=jnp.int32) % num_tools
        layout = layout.replace(station_tools=tools)
    if dominant_hue is None:
        dominant_hue = jax.random.randint(k_hue, (), 0, num_hues)
    dominant_hue = jnp.asarray(dominant_hue, jnp.int32)
    skew = jnp.float32(skew)
    waste = waste_codes(k_waste, dominant_hue, skew, (C.NUM_POLLUTED_START,))
    return OpenCleanupConfig(
        layout=layout,
        rule=rule,
        pair_effect=pair_effects(rule, recipe_length),
        dominant_hue=dominant_hue,
        initial_grid=initial_grid(layout, waste, height, width),
        river_mask=_mask_of(layout.river, height, width),
        spawn_valid=jnp.ones((C.NUM_SPAWNS,), bool),
        p_spawn=jnp.float32(p_spawn),
        skew=skew,
        apple_rate=jnp.float32(apple_rate),
        pollution_threshold=jnp.float32(pollution_threshold),
        spawn_start=jnp.int32(spawn_start),
    )
