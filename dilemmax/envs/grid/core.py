"""Orientation, moves and beams: the grid games' shared mechanics (conventions in
:mod:`dilemmax.envs.grid`)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

NORTH, EAST, SOUTH, WEST = 0, 1, 2, 3
NUM_ORIENTATIONS = 4
ORIENTATION_NAMES = ("north", "east", "south", "west")

# (d_row, d_col) of one step in each orientation; row 0 is the top, so NORTH decreases the row.
# In numpy for the tables built once from static sizes (views, beams); in JAX for traced code.
DIRECTION_DELTAS_NP = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]], dtype=np.int32)
DIRECTION_DELTAS = jnp.asarray(DIRECTION_DELTAS_NP)

TURN_LEFT, NO_TURN, TURN_RIGHT = -1, 0, 1
NO_MOVE = -1

# Beam footprint, as (steps forward, steps to the right) of the agent, in the order the cells
# are returned: the faced cell, the cell beyond it, then the two cells beside the faced cell
# (forward-left and forward-right of the agent, i.e. diagonal neighbours of the agent).
BEAM_FORWARD_RIGHT = ((1, 0), (2, 0), (1, -1), (1, 1))
BEAM_LENGTH = len(BEAM_FORWARD_RIGHT)


class GridShape(NamedTuple):
    """Static grid size."""

    height: int
    width: int


def as_shape(shape) -> GridShape:
    """Accepts a ``GridShape``, an ``(H, W)`` tuple or an array whose first two dims are H, W."""
    if hasattr(shape, "shape") and not isinstance(shape, tuple):
        shape = shape.shape[:2]
    return GridShape(int(shape[0]), int(shape[1]))


# --------------------------------------------------------------------------- orientation, moves
def turn(orientation: jax.Array, direction: jax.Array) -> jax.Array:
    """New orientation after turning.

    Args:
        orientation: int32[...], codes 0..3.
        direction: int32[...] broadcastable, -1 = turn left, +1 = turn right, 0 = no turn.

    Returns:
        int32[...], codes 0..3.
    """
    return jnp.mod(jnp.asarray(orientation, jnp.int32) + jnp.asarray(direction, jnp.int32), 4)


def relative_orientation(other: jax.Array, observer: jax.Array) -> jax.Array:
    """Orientation of ``other`` as seen in ``observer``'s rotated view (0 = same facing = "up").

    Args:
        other: int32[...], absolute orientation codes.
        observer: int32[...] broadcastable, absolute orientation codes.

    Returns:
        int32[...] in 0..3: 0 faces up in the view (away from the observer's back), 1 right,
        2 down (towards the observer), 3 left.
    """
    return jnp.mod(jnp.asarray(other, jnp.int32) - jnp.asarray(observer, jnp.int32), 4)


def rotate_delta(forward_right: jax.Array, orientation: jax.Array) -> jax.Array:
    """Converts (steps forward, steps right) relative to a facing into absolute (d_row, d_col).

    Args:
        forward_right: int32[..., 2].
        orientation: int32[...] broadcastable to ``forward_right[..., 0]``.

    Returns:
        int32[..., 2].
    """
    forward = DIRECTION_DELTAS[orientation]
    right = DIRECTION_DELTAS[jnp.mod(orientation + 1, 4)]
    fr = jnp.asarray(forward_right, jnp.int32)
    return fr[..., :1] * forward + fr[..., 1:] * right


def in_bounds(cells: jax.Array, shape) -> jax.Array:
    """bool[...]: whether int32[..., 2] cells lie on an ``H x W`` grid."""
    height, width = as_shape(shape)
    rows, cols = cells[..., 0], cells[..., 1]
    return (rows >= 0) & (rows < height) & (cols >= 0) & (cols < width)


def gather_cells(layer: jax.Array, cells: jax.Array, fill=0) -> jax.Array:
    """Values of ``layer`` at ``cells``, ``fill`` where a cell lies off the grid.

    Args:
        layer: [H, W, *C].
        cells: int32[..., 2], possibly off the grid (e.g. from :func:`beam_cells`).
        fill: scalar for off-grid cells.

    Returns:
        [..., *C], the dtype of ``layer``.
    """
    height, width = layer.shape[:2]
    inside = in_bounds(cells, (height, width))
    rows = jnp.clip(cells[..., 0], 0, height - 1)
    cols = jnp.clip(cells[..., 1], 0, width - 1)
    values = layer[rows, cols]
    inside = inside.reshape(inside.shape + (1,) * (layer.ndim - 2))
    return jnp.where(inside, values, jnp.asarray(fill, layer.dtype))


def propose_moves(positions: jax.Array, move_dir: jax.Array) -> jax.Array:
    """Target cells of absolute compass moves, before any blocking.

    Args:
        positions: int32[A, 2].
        move_dir: int32[A], -1 = no move, else an orientation code 0..3 (moves do not turn).

    Returns:
        int32[A, 2]; may lie off the grid (``resolve_moves`` blocks those).
    """
    move_dir = jnp.asarray(move_dir, jnp.int32)
    delta = DIRECTION_DELTAS[jnp.clip(move_dir, 0, 3)]
    return positions + jnp.where((move_dir >= 0)[..., None], delta, 0)


def resolve_moves(
    key: jax.Array,
    positions: jax.Array,
    targets: jax.Array,
    passable: jax.Array,
    active: jax.Array | None = None,
) -> jax.Array:
    """Simultaneous moves without two agents ever sharing a cell.

    Rules, applied together:

    - A target off the grid or on a cell where ``passable`` is False: the agent stays.
    - An agent that stays (or is blocked) occupies its cell, so whoever aims at it is blocked.
    - Several agents aiming at one cell: one winner, drawn uniformly at random (a random
      priority order over agents from ``key``), the others stay.
    - Two agents swapping cells are both blocked.
    - Chains resolve: an agent moving into a cell that another agent is leaving succeeds exactly
      when that agent really leaves. Rotations of three or more agents around a cycle all
      succeed (every cell is vacated and re-entered at once); only two-agent swaps are blocked.

    Implementation: agents start as "movers" if their target differs from their position; each
    round blocks the movers that (a) aim at a cell a non-mover keeps, (b) lose the priority draw
    for a shared target, or (c) swap with another mover. The mover set only shrinks, and each
    round that changes anything blocks at least one agent, so ``A`` rounds reach the fixed point.
    At the fixed point no two final cells coincide (see the tests for the randomized check).

    Args:
        key: PRNG key for the tie-break.
        positions: int32[A, 2], distinct cells on the grid.
        targets: int32[A, 2], e.g. from :func:`propose_moves`.
        passable: bool[H, W], terrain an agent may stand on (agents are handled here, not in it).
        active: optional bool[A]; inactive agents never move but still block their cell.

    Returns:
        int32[A, 2], the new positions.
    """
    positions = jnp.asarray(positions, jnp.int32)
    targets = jnp.asarray(targets, jnp.int32)
    num_agents = positions.shape[0]
    height, width = passable.shape

    on_grid = in_bounds(targets, (height, width))
    safe = jnp.where(on_grid[:, None], targets, positions)
    ok = on_grid & passable[safe[:, 0], safe[:, 1]]
    targets = jnp.where(ok[:, None], targets, positions)
    wants = jnp.any(targets != positions, axis=-1)
    if active is not None:
        wants = wants & active
        targets = jnp.where(active[:, None], targets, positions)

    # Pairwise relations that stay fixed across rounds; [i, j] reads "agent i vs agent j".
    other = ~jnp.eye(num_agents, dtype=bool)
    same_target = jnp.all(targets[:, None, :] == targets[None, :, :], axis=-1) & other
    aims_at_cell_of = jnp.all(targets[:, None, :] == positions[None, :, :], axis=-1) & other
    swap = aims_at_cell_of & aims_at_cell_of.T
    priority = jax.random.permutation(key, num_agents)
    outranked = priority[None, :] > priority[:, None]  # [i, j]: j beats i in a tie

    def one_round(_, wants):
        j_moves = wants[None, :]
        blocked = (
            (same_target & j_moves & outranked)  # j wins the cell we both aim at
            | (aims_at_cell_of & ~j_moves)  # j stays on the cell we aim at
            | (swap & j_moves)  # j and i would trade places
        )
        return wants & ~jnp.any(blocked, axis=1)

    wants = jax.lax.fori_loop(0, num_agents, one_round, wants, unroll=True)
    return jnp.where(wants[:, None], targets, positions)


# --------------------------------------------------------------------------- beams
def beam_cells(position: jax.Array, orientation: jax.Array, shape) -> tuple[jax.Array, jax.Array]:
    """The four cells a beam covers (OpenSocialJax's fire / zap footprint).

    Order: the faced cell, the cell beyond it, the cell left of the faced cell and the cell right
    of the faced cell (left/right as the agent sees them, i.e. forward-left and forward-right of
    the agent: the agent's two front diagonal neighbours). The footprint is fixed: walls do not
    stop it, and it is not clipped; off-grid cells are flagged in ``in_bounds`` instead.

    Broadcasts over leading dims, so it serves one agent or all of them.

    Args:
        position: int32[..., 2].
        orientation: int32[...].
        shape: static grid shape (``GridShape`` or ``(H, W)``).

    Returns:
        cells: int32[..., 4, 2], the raw cells (may lie off the grid).
        in_bounds: bool[..., 4].
    """
    position = jnp.asarray(position, jnp.int32)
    orientation = jnp.asarray(orientation, jnp.int32)
    offsets = rotate_delta(jnp.asarray(BEAM_FORWARD_RIGHT, jnp.int32), orientation[..., None])
    cells = position[..., None, :] + offsets
    return cells, in_bounds(cells, shape)


def beam_mask(positions: jax.Array, orientations: jax.Array, firing: jax.Array, shape) -> jax.Array:
    """bool[H, W]: the union of the beams of the agents that fire.

    Args:
        positions: int32[A, 2].
        orientations: int32[A].
        firing: bool[A].
        shape: static grid shape.
    """
    height, width = as_shape(shape)
    cells, valid = beam_cells(positions, orientations, (height, width))
    valid = valid & firing[:, None]
    flat = jnp.where(valid, cells[..., 0] * width + cells[..., 1], height * width)
    hit = jnp.zeros(height * width, bool).at[flat.reshape(-1)].set(True, mode="drop")
    return hit.reshape(height, width)


def beam_hits_agents(
    positions: jax.Array, orientations: jax.Array, firing: jax.Array, shape
) -> jax.Array:
    """bool[A, A]: ``[i, j]`` is True when agent i fires and its beam covers agent j (j != i).

    Args:
        positions: int32[A, 2].
        orientations: int32[A].
        firing: bool[A].
        shape: static grid shape.
    """
    cells, valid = beam_cells(positions, orientations, shape)  # [A, 4, 2], [A, 4]
    covers = jnp.all(cells[:, None, :, :] == positions[None, :, None, :], axis=-1)  # [A, A, 4]
    hits = jnp.any(covers & valid[:, None, :], axis=-1)
    return hits & firing[:, None] & ~jnp.eye(positions.shape[0], dtype=bool)
