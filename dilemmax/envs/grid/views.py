"""Egocentric views: what each agent sees of a layer, rotated to its orientation, as one gather
with offsets computed once from the static view size."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.envs.grid.core import DIRECTION_DELTAS_NP, relative_orientation
from dilemmax.envs.grid.placement import agent_grid


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
        fwd, rgt = DIRECTION_DELTAS_NP[o], DIRECTION_DELTAS_NP[(o + 1) % 4]
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
