"""Grid-world mechanics shared by the grid games (OpenCleanup, OpenHarvest).

Conventions used everywhere in this module:

- A cell is ``(row, col)``, int32. Row 0 is the top (north) edge, rows grow southward; col 0 is the
  west edge, cols grow eastward.
- Orientation codes: ``NORTH=0, EAST=1, SOUTH=2, WEST=3`` (clockwise). Turning right adds 1,
  turning left subtracts 1, modulo 4.
- ``A`` is the number of agents, ``H x W`` the grid shape. Shapes (``A``, ``H``, ``W`` and the view
  size) are static; everything else may be traced, so every function here is jittable and
  vmappable over environments.

Everything that depends only on static sizes (view offset tables, beam footprints) is computed
once with numpy and enters the traced program as a constant, so an observation is a single gather
and a beam a handful of additions.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

NORTH, EAST, SOUTH, WEST = 0, 1, 2, 3
NUM_ORIENTATIONS = 4
ORIENTATION_NAMES = ("north", "east", "south", "west")

# (d_row, d_col) of one step in each orientation; row 0 is the top, so NORTH decreases the row.
_DELTAS_NP = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]], dtype=np.int32)
DIRECTION_DELTAS = jnp.asarray(_DELTAS_NP)

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


def _as_shape(shape) -> GridShape:
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
    height, width = _as_shape(shape)
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
    height, width = _as_shape(shape)
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


# --------------------------------------------------------------------------- egocentric views
@functools.lru_cache(maxsize=64)
def _view_offsets(ahead: int, behind: int, side: int) -> np.ndarray:
    """int32[4, ahead+behind+1, 2*side+1, 2]: (d_row, d_col) of each view cell per orientation.

    View row 0 is the farthest cell ahead; the agent sits at ``[ahead, side]``; view columns run
    from the agent's left to its right.
    """
    forward = ahead - np.arange(ahead + behind + 1)  # steps ahead of each view row
    right = np.arange(2 * side + 1) - side  # steps to the right of each view column
    out = np.zeros((4, forward.size, right.size, 2), np.int32)
    for o in range(4):
        fwd, rgt = _DELTAS_NP[o], _DELTAS_NP[(o + 1) % 4]
        out[o] = forward[:, None, None] * fwd + right[None, :, None] * rgt
    return out


@functools.lru_cache(maxsize=64)
def _flat_view_offsets(ahead: int, behind: int, side: int, padded_width: int) -> np.ndarray:
    """int32[4, Vh, Vw]: view offsets as flat indices into a padded layer of that width."""
    offsets = _view_offsets(ahead, behind, side)
    return (offsets[..., 0] * padded_width + offsets[..., 1]).astype(np.int32)


def view_offsets(ahead: int = 9, behind: int = 1, side: int = 5) -> np.ndarray:
    """int32[4, ahead+behind+1, 2*side+1, 2]: absolute (d_row, d_col) of every view cell.

    ``view_offsets()[o][r, c]`` is where view cell ``[r, c]`` lies relative to an agent facing
    ``o``; useful for text renderers and tests.
    """
    return _view_offsets(ahead, behind, side).copy()


def egocentric_views(
    layer: jax.Array,
    positions: jax.Array,
    orientations: jax.Array,
    ahead: int = 9,
    behind: int = 1,
    side: int = 5,
    pad_value=0,
) -> jax.Array:
    """Every agent's rotated window onto ``layer``, as one gather.

    The view is rotated so the agent always faces "up": row 0 is the farthest row ahead, the
    agent's own cell is at ``[ahead, side]``, column 0 is the agent's far left. Cells off the grid
    read ``pad_value``.

    Args:
        layer: [H, W, *C] of any dtype (trailing channel dims are carried along).
        positions: int32[A, 2], on the grid (clipped into it to keep the gather in range).
        orientations: int32[A].
        ahead, behind, side: static view extents.
        pad_value: scalar for off-grid cells.

    Returns:
        [A, ahead+behind+1, 2*side+1, *C], the dtype of ``layer``.
    """
    layer = jnp.asarray(layer)
    if layer.ndim == 2:
        return _sliced_views(layer, positions, orientations, ahead, behind, side, pad_value)
    height, width = layer.shape[:2]
    pad = max(ahead, behind, side)
    padded = jnp.pad(
        layer,
        [(pad, pad), (pad, pad)] + [(0, 0)] * (layer.ndim - 2),
        constant_values=jnp.asarray(pad_value, layer.dtype),
    )
    padded_width = width + 2 * pad
    flat = padded.reshape((-1,) + layer.shape[2:])
    table = jnp.asarray(_flat_view_offsets(ahead, behind, side, padded_width))
    rows = jnp.clip(positions[:, 0], 0, height - 1) + pad
    cols = jnp.clip(positions[:, 1], 0, width - 1) + pad
    index = (rows * padded_width + cols)[:, None, None] + table[jnp.mod(orientations, 4)]
    return flat.at[index].get(mode="promise_in_bounds")


def _sliced_views(layer, positions, orientations, ahead, behind, side, pad_value):
    """:func:`egocentric_views` of a 2-D layer by slicing instead of a per-cell gather.

    Each agent cuts one square box around its cell (one dynamic slice: under vmap a gather of
    whole rows, several times cheaper on CPU than gathering 121 cells one by one); its four
    possible views are static slices of the box turned by ``rot90``, and the agent's facing
    picks one. Same values as the gather, cell for cell (tested).
    """
    height, width = layer.shape
    radius = max(ahead, behind, side)
    padded = jnp.pad(layer, radius, constant_values=jnp.asarray(pad_value, layer.dtype))
    lo = radius  # the agent's row and column inside its box
    rows = jnp.clip(positions[:, 0], 0, height - 1)
    cols = jnp.clip(positions[:, 1], 0, width - 1)

    def views_of(row, col, orientation):
        box = jax.lax.dynamic_slice(padded, (row, col), (2 * radius + 1, 2 * radius + 1))
        across = slice(lo - side, lo + side + 1)
        facing = (
            box[lo - ahead : lo + behind + 1, across],  # north: the box as it is
            jnp.rot90(box[across, lo - behind : lo + ahead + 1], 1),  # east
            jnp.rot90(box[lo - behind : lo + ahead + 1, across], 2),  # south
            jnp.rot90(box[across, lo - ahead : lo + behind + 1], 3),  # west
        )
        orientation = jnp.mod(orientation, 4)
        return jnp.select([orientation == o for o in range(3)], facing[:3], facing[3])

    return jax.vmap(views_of)(rows, cols, orientations)


def egocentric_view(
    layer: jax.Array,
    position: jax.Array,
    orientation: jax.Array,
    ahead: int = 9,
    behind: int = 1,
    side: int = 5,
    pad_value=0,
) -> jax.Array:
    """One agent's rotated window (see :func:`egocentric_views`).

    Args:
        layer: [H, W, *C].
        position: int32[2].
        orientation: int32[].

    Returns:
        [ahead+behind+1, 2*side+1, *C].
    """
    views = egocentric_views(
        layer,
        jnp.asarray(position)[None],
        jnp.asarray(orientation)[None],
        ahead,
        behind,
        side,
        pad_value,
    )
    return views[0]


def egocentric_agent_views(
    positions: jax.Array,
    orientations: jax.Array,
    shape,
    active: jax.Array | None = None,
    ahead: int = 9,
    behind: int = 1,
    side: int = 5,
) -> tuple[jax.Array, jax.Array]:
    """Who stands where in each agent's view, and which way they face relative to the viewer.

    Args:
        positions: int32[A, 2].
        orientations: int32[A].
        shape: static grid shape.
        active: optional bool[A]; inactive agents are not drawn.

    Returns:
        index: int32[A, Vh, Vw], the agent index on each view cell, -1 where none (the viewer
            itself appears at ``[ahead, side]`` of its own view).
        facing: int32[A, Vh, Vw], :func:`relative_orientation` of that agent to the viewer, -1
            where no agent.
    """
    grid = agent_grid(positions, shape, active=active)
    index = egocentric_views(grid, positions, orientations, ahead, behind, side, pad_value=-1)
    their = orientations[jnp.clip(index, 0, None)]
    facing = relative_orientation(their, orientations[:, None, None])
    return index, jnp.where(index >= 0, facing, -1)


def one_hot_codes(codes: jax.Array, num_codes: int) -> jax.Array:
    """float32[..., num_codes]: one-hot planes of integer cell codes (out-of-range -> all zero)."""
    return jax.nn.one_hot(jnp.asarray(codes).astype(jnp.int32), num_codes, dtype=jnp.float32)


# --------------------------------------------------------------------------- painting agents
def paint_agents(
    layer: jax.Array,
    positions: jax.Array,
    values: jax.Array,
    active: jax.Array | None = None,
) -> jax.Array:
    """``layer`` with ``values[i]`` written on agent i's cell (inactive agents skipped).

    Args:
        layer: [H, W, *C].
        positions: int32[A, 2].
        values: [A, *C] or a scalar, cast to ``layer.dtype``.
        active: optional bool[A].

    Returns:
        [H, W, *C].
    """
    height, width = layer.shape[:2]
    flat_index = positions[:, 0] * width + positions[:, 1]
    if active is not None:
        flat_index = jnp.where(active, flat_index, height * width)  # dropped below
    flat = layer.reshape((height * width,) + layer.shape[2:])
    values = jnp.broadcast_to(jnp.asarray(values, layer.dtype), flat_index.shape + layer.shape[2:])
    return flat.at[flat_index].set(values, mode="drop").reshape(layer.shape)


def agent_grid(
    positions: jax.Array,
    shape,
    fill: int = -1,
    active: jax.Array | None = None,
) -> jax.Array:
    """int32[H, W]: the index of the agent on each cell, ``fill`` where there is none.

    Args:
        positions: int32[A, 2].
        shape: static grid shape.
        fill: value of empty cells.
        active: optional bool[A]; inactive agents are left out.
    """
    height, width = _as_shape(shape)
    grid = jnp.full((height, width), fill, jnp.int32)
    return paint_agents(grid, positions, jnp.arange(positions.shape[0], dtype=jnp.int32), active)


def occupancy(positions: jax.Array, shape, active: jax.Array | None = None) -> jax.Array:
    """bool[H, W]: True on cells with an (active) agent."""
    height, width = _as_shape(shape)
    return paint_agents(jnp.zeros((height, width), bool), positions, True, active)


# --------------------------------------------------------------------------- spawning
def sample_spawn_positions(
    key: jax.Array,
    spawn_points: jax.Array,
    spawn_valid: jax.Array,
    num_agents: int,
    occupied: jax.Array | None = None,
) -> jax.Array:
    """Distinct free spawn points, a uniformly random subset in a uniformly random order.

    Needs at least ``num_agents`` spawn points that are valid and not occupied; if there are
    fewer, the surplus agents get unusable points (use :func:`respawn_positions`, which reports
    it, where that can happen).

    Args:
        key: PRNG key.
        spawn_points: int32[S, 2], padded lists allowed.
        spawn_valid: bool[S], False for padding.
        num_agents: static A <= S.
        occupied: optional bool[H, W]; spawn points on True cells are not used.

    Returns:
        int32[A, 2].
    """
    chosen, _ = _pick_free_spawns(key, spawn_points, spawn_valid, num_agents, occupied)
    return spawn_points[chosen]


def _pick_free_spawns(key, spawn_points, spawn_valid, count, occupied):
    """(int32[count] indices into spawn_points, bool[count] whether each pick is usable)."""
    free = spawn_valid
    if occupied is not None:
        free = free & ~occupied[spawn_points[:, 0], spawn_points[:, 1]]
    # Ranking i.i.d. uniform scores picks a uniform random subset in uniform random order;
    # unusable points rank below every usable one.
    scores = jax.random.uniform(key, spawn_valid.shape) + free.astype(jnp.float32) * 2.0
    _, chosen = jax.lax.top_k(scores, count)
    return chosen, free[chosen]


def respawn_positions(
    key: jax.Array,
    positions: jax.Array,
    respawn: jax.Array,
    spawn_points: jax.Array,
    spawn_valid: jax.Array,
    occupied: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Sends the agents flagged in ``respawn`` to distinct free spawn points.

    Cells of agents that stay put count as occupied; so do ``occupied`` cells. Respawning agents
    do not block spawn points with their old cells.

    Args:
        key: PRNG key.
        positions: int32[A, 2].
        respawn: bool[A].
        spawn_points: int32[S, 2], with S >= A.
        spawn_valid: bool[S].
        occupied: optional bool[H, W], extra cells to avoid.

    Returns:
        positions: int32[A, 2], new cells for respawned agents (unchanged for the others, and for
            a respawning agent that found no free point).
        moved: bool[A], True for agents that were actually relocated.
    """
    num_agents = positions.shape[0]
    staying = ~respawn
    # A spawn point is blocked when a staying agent stands on it or the caller marks it.
    on_point = jnp.all(spawn_points[:, None, :] == positions[None, :, :], axis=-1)  # [S, A]
    blocked = jnp.any(on_point & staying[None, :], axis=1)
    if occupied is not None:
        blocked = blocked | occupied[spawn_points[:, 0], spawn_points[:, 1]]
    chosen, usable = _pick_free_spawns(key, spawn_points, spawn_valid & ~blocked, num_agents, None)
    # The k-th respawning agent takes the k-th pick.
    rank = jnp.cumsum(respawn.astype(jnp.int32)) - 1
    pick = chosen[jnp.clip(rank, 0, num_agents - 1)]
    moved = respawn & usable[jnp.clip(rank, 0, num_agents - 1)]
    return jnp.where(moved[:, None], spawn_points[pick], positions), moved
