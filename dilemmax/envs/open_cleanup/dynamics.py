"""The pieces of one OpenCleanup step, each a small jittable function on arrays.

``env.py`` chains them; tests call them on hand-built grids. Shapes: ``A`` agents, ``H x W`` grid.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.envs import grid as G
from dilemmax.envs.open_cleanup import constants as C
from dilemmax.envs.open_cleanup.generator import waste_codes

# Outcome of one beam cell under one effect, as a rank so that simultaneous shots combine by a
# minimum: 0 = cleared to water, 1 = one shade lighter, 2 = unchanged.
CLEARED, LIGHTENED, UNCHANGED = 0, 1, 2


def _outcome_table() -> np.ndarray:
    """uint8[8, NUM_CELL_CODES]: outcome rank of effect e (7 = none) on a cell of each code."""
    table = np.full((C.NUM_EFFECTS + 1, C.NUM_CELL_CODES), UNCHANGED, np.uint8)
    for hue in range(C.NUM_HUES):
        for shade in range(C.NUM_SHADES):
            code = C.WASTE_BASE + hue * C.NUM_SHADES + shade
            if shade == C.LIGHT:
                table[hue, code] = CLEARED  # hue-specific cleaner: light waste of its hue
            if shade == C.MID:
                table[C.EFFECT_MID_TO_LIGHT, code] = LIGHTENED
            if shade == C.DARK:
                table[C.EFFECT_DARK_TO_MID, code] = LIGHTENED
    return table


OUTCOME = _outcome_table()


def is_waste(codes: jax.Array) -> jax.Array:
    """bool[...]: which cell codes are waste (any hue, any shade)."""
    return (codes >= C.WASTE_BASE) & (codes < C.WASTE_BASE + C.NUM_WASTE_TYPES)


def window_pair(window: jax.Array) -> jax.Array:
    """int32[A]: pair index of each full window (``first * 4 + second``), -1 if not yet full."""
    full = jnp.all(window >= 0, axis=-1)
    return jnp.where(full, window[:, 0] * C.NUM_TOOLS + window[:, 1], -1)


def pick_up(window: jax.Array, tool: jax.Array, picking: jax.Array) -> jax.Array:
    """int32[A, 2]: the window after pick-ups; the oldest pick-up slides out.

    Args:
        window: int32[A, 2], oldest first, -1 = empty slot.
        tool: int32[A], the tool picked up (ignored where ``picking`` is False).
        picking: bool[A].
    """
    slid = jnp.stack([window[:, 1], tool.astype(jnp.int32)], axis=-1)
    return jnp.where(picking[:, None], slid, window)


def fire(
    grid: jax.Array,
    positions: jax.Array,
    orientations: jax.Array,
    firing: jax.Array,
    effects: jax.Array,
):
    """Applies every firing agent's beam to the waste under it.

    All beams read the grid as it was before the step's shots. A cell hit by several beams takes
    the most advanced outcome (water over one shade lighter over unchanged); each shooter whose
    own beam would have produced that outcome is credited with it.

    Args:
        grid: uint8[H, W].
        positions: int32[A, 2].
        orientations: int32[A].
        firing: bool[A].
        effects: int32[A], the effect of each agent's held pair (``NO_EFFECT`` = 7 for none).

    Returns:
        grid: uint8[H, W] after the shots.
        cells: int32[A, 4, 2], the beam cells (may be off-grid).
        before: uint8[A, 4], their codes before (``WALL`` off-grid).
        after: uint8[A, 4], their codes after.
        cleared: int32[A], cells this agent cleared to water.
        lightened: int32[A], cells this agent made one shade lighter.
    """
    height, width = grid.shape
    cells, inside = G.beam_cells(positions, orientations, (height, width))
    safe_r = jnp.clip(cells[..., 0], 0, height - 1)
    safe_c = jnp.clip(cells[..., 1], 0, width - 1)
    before = jnp.where(inside, grid[safe_r, safe_c], jnp.uint8(C.WALL))
    outcome = jnp.asarray(OUTCOME)[effects[:, None], before.astype(jnp.int32)]  # [A, 4]
    active = inside & firing[:, None]
    flat = jnp.where(active, safe_r * width + safe_c, height * width)
    best = (
        jnp.full((height * width,), UNCHANGED, jnp.uint8)
        .at[flat.reshape(-1)]
        .min(jnp.where(active, outcome, UNCHANGED).reshape(-1), mode="drop")
    )
    flat_grid = grid.reshape(-1)
    new_flat = jnp.where(
        best == CLEARED,
        jnp.uint8(C.WATER),
        jnp.where(best == LIGHTENED, flat_grid - jnp.uint8(1), flat_grid),
    )
    new_grid = new_flat.reshape(height, width)
    after = jnp.where(inside, new_grid[safe_r, safe_c], jnp.uint8(C.WALL))
    own = active & (outcome == best[jnp.clip(flat, 0, height * width - 1)])
    cleared = jnp.sum(own & (outcome == CLEARED), axis=-1).astype(jnp.int32)
    lightened = jnp.sum(own & (outcome == LIGHTENED), axis=-1).astype(jnp.int32)
    return new_grid, cells, before, after, cleared, lightened


def redraw_shades(key: jax.Array, grid: jax.Array) -> jax.Array:
    """uint8[H, W]: ``grid`` with every waste cell given a fresh uniform shade, its hue kept.

    A new trial starts from the configuration's waste hues with new shades (as the reference
    re-lays the river), so no two trials need start from the very same river.
    """
    hue = (grid.astype(jnp.int32) - C.WASTE_BASE) // C.NUM_SHADES
    shade = jax.random.randint(key, grid.shape, 0, C.NUM_SHADES)
    redrawn = (C.WASTE_BASE + hue * C.NUM_SHADES + shade).astype(jnp.uint8)
    return jnp.where(is_waste(grid), redrawn, grid)


def pollution(grid: jax.Array, river_mask: jax.Array, num_water_cells: int) -> jax.Array:
    """float32[]: polluted river cells / all river cells (stream included)."""
    polluted = jnp.sum(river_mask & is_waste(grid))
    return polluted.astype(jnp.float32) / num_water_cells


def apple_probability(share: jax.Array, rate: jax.Array, threshold: jax.Array) -> jax.Array:
    """float32[]: ``rate * min(1, 1 - share / threshold)``, and 0 where that is not positive."""
    return rate * jnp.clip(1.0 - share / threshold, 0.0, 1.0)


def grow_apples(key: jax.Array, grid: jax.Array, occupied: jax.Array, probability: jax.Array):
    """Each empty orchard cell without an agent on it grows an apple with ``probability``.

    Returns:
        grid: uint8[H, W]; grown: int32[], the number of new apples.
    """
    grow = (grid == C.ORCHARD) & ~occupied & (jax.random.uniform(key, grid.shape) < probability)
    return jnp.where(grow, jnp.uint8(C.APPLE), grid), jnp.sum(grow).astype(jnp.int32)


def spawn_waste(
    key: jax.Array,
    grid: jax.Array,
    river_mask: jax.Array,
    occupied: jax.Array,
    allowed: jax.Array,
    p_spawn: jax.Array,
    dominant_hue: jax.Array,
    skew: jax.Array,
):
    """At most one new waste cell on a uniformly chosen clean river cell with no agent on it.

    Args:
        allowed: bool[], whether waste may reappear at this step (trial step >= spawn start).

    Returns:
        grid: uint8[H, W]; spawned: bool[].
    """
    k_cell, k_coin, k_colour = jax.random.split(key, 3)
    candidates = river_mask & (grid == C.WATER) & ~occupied
    score = jnp.where(candidates, jax.random.uniform(k_cell, grid.shape), -1.0).reshape(-1)
    flat = jnp.argmax(score)
    spawned = allowed & jnp.any(candidates) & (jax.random.uniform(k_coin) < p_spawn)
    code = waste_codes(k_colour, dominant_hue, skew)
    flat_grid = grid.reshape(-1)
    flat_grid = flat_grid.at[flat].set(jnp.where(spawned, code, flat_grid[flat]))
    return flat_grid.reshape(grid.shape), spawned
