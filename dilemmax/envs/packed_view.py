"""The grid games' packed view: every agent's window gathered from one uint16 layer, then decoded.

OpenCleanup and OpenHarvest observe the same three channels of an egocentric window (their
observation modules document them):

- the cell: the game's own cell code (under 32; an agent does not hide the cell it stands on);
- who stands there: 0 nobody, 1 the observer, 2 + another agent's facing relative to the
  observer (0 the same way, 1 the observer's right, 2 towards it, 3 its left);
- agent info: 0 nobody, else 1 + the agent's absolute orientation (N, E, S, W) + 4 if frozen.

Rather than one gather per channel, the map is packed into one layer, ``cell | info << 5``, and
each agent's window is one gather of it. Who stands where follows from the info code: another
agent's absolute facing is ``(info - 1) & 3``, and the observer is the only agent on its own
view cell ``[ahead, side]``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.envs import grid

CELL_BITS = 5  # cell codes are 0..31 (OpenCleanup uses 0..23, OpenHarvest 0..21)
WHO_NOBODY, WHO_SELF, WHO_OTHER = 0, 1, 2  # channel-1 codes; WHO_OTHER + relative facing


def agent_info(orientations: jax.Array, frozen: jax.Array) -> jax.Array:
    """uint8[A]: each agent's info code, ``1 + orientation + 4 * frozen``.

    Args:
        orientations: int32[A], absolute facing (0 north .. 3 west).
        frozen: int32[A], steps left frozen (> 0: frozen).
    """
    return (1 + orientations + 4 * (frozen > 0)).astype(jnp.uint8)


def packed_layer(cells: jax.Array, positions: jax.Array, info: jax.Array) -> jax.Array:
    """uint16[H, W]: ``cell | info << 5``, the info code of the agent on each cell (0 nobody).

    Args:
        cells: uint8[H, W], the game's cell codes.
        positions: int32[A, 2], the agents' cells.
        info: uint8[A], their info codes (:func:`agent_info`).
    """
    agents = grid.paint_agents(
        jnp.zeros(cells.shape, jnp.uint16), positions, info.astype(jnp.uint16)
    )
    return cells.astype(jnp.uint16) | (agents << CELL_BITS)


def observe_channels(
    layer: jax.Array,
    positions: jax.Array,
    orientations: jax.Array,
    ahead: int,
    behind: int,
    side: int,
    pad_cell: int,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(cell, who, info), each uint8[A, ahead + behind + 1, 2 * side + 1]: every agent's window
    of the packed ``layer`` (uint16[H, W]), decoded.

    Args:
        positions, orientations: int32[A, 2] and int32[A], the observers' cells and facings.
        ahead, behind, side: the window's reach (static).
        pad_cell: the cell code read beyond the edge of the map (with nobody on it).
    """
    views = grid.egocentric_views(layer, positions, orientations, ahead, behind, side, pad_cell)
    cell = (views & ((1 << CELL_BITS) - 1)).astype(jnp.uint8)
    info = (views >> CELL_BITS).astype(jnp.uint8)
    their_facing = (info - 1) & 3
    observer_facing = orientations.astype(jnp.uint8)[:, None, None]
    relative = WHO_OTHER + (their_facing - observer_facing) % 4
    who = jnp.where(info > 0, relative, WHO_NOBODY).astype(jnp.uint8)
    who = jnp.where(_self_cell(ahead, behind, side), jnp.uint8(WHO_SELF), who)
    return cell, who, info


def _self_cell(ahead: int, behind: int, side: int) -> np.ndarray:
    """bool[ahead + behind + 1, 2 * side + 1]: True on the observer's own view cell only."""
    mask = np.zeros((ahead + behind + 1, 2 * side + 1), bool)
    mask[ahead, side] = True
    return mask
