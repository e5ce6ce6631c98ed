"""RGB rendering shared by the grid games (numpy; runs outside the hot path).

A game maps its cell codes to colours (``cell_rgb``), and :func:`render_cells` scales the map up
and draws each agent as an arrowhead pointing the way it faces, outlined so it reads on any
background.
"""

from __future__ import annotations

import functools

import numpy as np

OUTLINE_RGB = (20, 20, 24)


@functools.lru_cache(maxsize=16)
def _arrow_masks(scale: int) -> tuple[np.ndarray, np.ndarray]:
    """(fill, outline) bool[4, scale, scale]: an arrowhead per orientation (0 = north, clockwise).

    The north arrowhead is an isosceles triangle with its apex at the top centre of the cell and
    its base along the bottom; the others are that mask rotated clockwise.
    """
    centers = (np.arange(scale) + 0.5) / scale  # pixel centres in [0, 1]
    y, x = np.meshgrid(centers, centers, indexing="ij")
    margin = 0.08
    top, bottom = margin, 1.0 - margin
    # half-width grows linearly from 0 at the apex to (0.5 - margin) at the base
    half_width = (y - top) / (bottom - top) * (0.5 - margin)
    fill = (y >= top) & (y <= bottom) & (np.abs(x - 0.5) <= half_width + 0.5 / scale)
    grown = fill.copy()
    grown[1:, :] |= fill[:-1, :]
    grown[:-1, :] |= fill[1:, :]
    grown[:, 1:] |= fill[:, :-1]
    grown[:, :-1] |= fill[:, 1:]
    outline = grown & ~fill
    # np.rot90 with k = -o turns the north mask clockwise o times
    fills = np.stack([np.rot90(fill, -o) for o in range(4)])
    outlines = np.stack([np.rot90(outline, -o) for o in range(4)])
    return fills, outlines


def render_cells(
    cell_rgb,
    positions,
    orientations,
    agent_colors,
    scale: int = 8,
    active=None,
    highlight=None,
    highlight_rgb=(255, 255, 170),
) -> np.ndarray:
    """Scales a coloured map up and draws the agents on it.

    Args:
        cell_rgb: uint8[H, W, 3], the colour of every cell.
        positions: int32[A, 2] (row, col).
        orientations: int32[A], 0 north, 1 east, 2 south, 3 west.
        agent_colors: uint8[A, 3].
        scale: pixels per cell side (>= 4 for a readable arrow).
        active: optional bool[A]; inactive agents are not drawn.
        highlight: optional bool[H, W]; those cells are blended half-way towards
            ``highlight_rgb`` (e.g. the cells a beam covered this step).

    Returns:
        uint8[H * scale, W * scale, 3].
    """
    cells = np.asarray(cell_rgb, np.uint8)
    if highlight is not None:
        tint = np.asarray(highlight_rgb, np.float32)
        blended = (cells.astype(np.float32) + tint) / 2.0
        cells = np.where(np.asarray(highlight, bool)[..., None], blended, cells).astype(np.uint8)
    image = np.repeat(np.repeat(cells, scale, axis=0), scale, axis=1)
    positions = np.asarray(positions, np.int64)
    orientations = np.asarray(orientations, np.int64) % 4
    colors = np.asarray(agent_colors, np.uint8)
    active = np.ones(len(positions), bool) if active is None else np.asarray(active, bool)
    fills, outlines = _arrow_masks(int(scale))
    height, width = cells.shape[:2]
    for i in range(len(positions)):
        row, col = positions[i]
        if not active[i] or not (0 <= row < height and 0 <= col < width):
            continue
        tile = image[row * scale : (row + 1) * scale, col * scale : (col + 1) * scale]
        tile[outlines[orientations[i]]] = OUTLINE_RGB
        tile[fills[orientations[i]]] = colors[i]
    return image
