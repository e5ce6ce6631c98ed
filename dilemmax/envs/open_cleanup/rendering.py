"""Pictures of an OpenCleanup state: an rgb frame and an ansi text grid (outside the hot path)."""

from __future__ import annotations

import numpy as np

from dilemmax.envs import grid_render
from dilemmax.envs.open_cleanup import constants as C
from dilemmax.envs.open_cleanup.types import OpenCleanupState
from dilemmax.envs.osj.view import agent_letter

# Base colour of each hue; shades are mixed toward white (light) or black (dark).
_HUE_RGB = np.array(
    [[214, 48, 49], [241, 196, 15], [39, 174, 96], [0, 184, 212], [142, 68, 173]], np.float32
)
_SHADE_MIX = ((255.0, 0.45), (None, 0.0), (0.0, 0.45))  # (mix target, weight) light, mid, dark


def _palette() -> np.ndarray:
    """uint8[NUM_CELL_CODES, 3]: the colour of every cell code."""
    palette = np.zeros((C.NUM_CELL_CODES, 3), np.float32)
    palette[C.GROUND] = (205, 190, 160)
    palette[C.WALL] = (90, 90, 90)
    palette[C.WATER] = (80, 140, 230)
    for hue in range(C.NUM_HUES):
        for shade, (target, weight) in enumerate(_SHADE_MIX):
            rgb = _HUE_RGB[hue]
            if target is not None:
                rgb = rgb * (1 - weight) + target * weight
            palette[C.WASTE_BASE + hue * C.NUM_SHADES + shade] = rgb
    palette[C.ORCHARD] = (120, 90, 50)
    palette[C.APPLE] = (170, 240, 40)  # lime: apart from every waste hue
    station_greys = ((250, 250, 250), (200, 200, 200), (150, 150, 150), (40, 40, 40))
    for tool, grey in enumerate(station_greys):
        palette[C.STATION_BASE + tool] = grey
    return palette.round().astype(np.uint8)


PALETTE = _palette()
AGENT_RGB = np.array(
    [
        [255, 105, 180],
        [255, 140, 0],
        [30, 30, 200],
        [0, 128, 128],
        [128, 0, 0],
        [60, 60, 60],
        [255, 255, 255],
    ],
    np.uint8,
)

# Two characters per cell in the ansi grid.
_HUE_LETTERS = C.HUE_LETTERS
_FACING = "^>v<"


def is_waste(code: int) -> bool:
    return C.WASTE_BASE <= code < C.WASTE_BASE + C.NUM_WASTE_TYPES


def cell_token(code: int) -> str:
    """The 2-character text of a cell code (the paper's map legend)."""
    if is_waste(code):
        hue, shade = divmod(code - C.WASTE_BASE, C.NUM_SHADES)
        return f"{_HUE_LETTERS[hue]}{shade}"
    if code >= C.STATION_BASE:
        return f"T{code - C.STATION_BASE}"
    return {C.GROUND: "..", C.WALL: "##", C.WATER: "~~", C.ORCHARD: ",,", C.APPLE: "AP"}[code]


def waste_name(code: int) -> str:
    """``G2 (green-dark)`` for a waste code."""
    hue, shade = divmod(code - C.WASTE_BASE, C.NUM_SHADES)
    return f"{cell_token(code)} ({C.HUE_NAMES[hue]}-{C.SHADE_NAMES[shade]})"


def render_ansi(state: OpenCleanupState) -> str:
    """The whole map as text: 2 characters per cell, agents as their letter and facing arrow."""
    grid = np.asarray(state.grid)
    tokens = [[cell_token(int(code)) for code in row] for row in grid]
    for i, ((r, c), facing) in enumerate(
        zip(np.asarray(state.positions), np.asarray(state.orientations), strict=True)
    ):
        tokens[int(r)][int(c)] = agent_letter(i) + _FACING[int(facing)]
    header = f"trial {int(state.trial) + 1}, step {int(state.trial_step)}; windows: " + ", ".join(
        f"{agent_letter(i)} {list(int(v) for v in w if v >= 0)}"
        for i, w in enumerate(np.asarray(state.window))
    )
    return header + "\n" + "\n".join(" ".join(row) for row in tokens)


def cell_colours(state: OpenCleanupState) -> np.ndarray:
    """uint8[H, W, 3]: the map without agents."""
    return PALETTE[np.asarray(state.grid)]


def render_rgb(state: OpenCleanupState, scale: int = 8) -> np.ndarray:
    """uint8[H * scale, W * scale, 3]: the map with agents drawn facing their way."""
    positions = np.asarray(state.positions)
    colours = AGENT_RGB[np.arange(positions.shape[0]) % len(AGENT_RGB)]
    # Tint the cells of the shots fired in the last step.
    last = np.asarray(state.shot_time) == int(state.trial_step) - 1
    cells = np.asarray(state.shot_cells)[last].reshape(-1, 2)
    height, width = np.asarray(state.grid).shape
    inside = (
        (cells[:, 0] >= 0) & (cells[:, 0] < height) & (cells[:, 1] >= 0) & (cells[:, 1] < width)
    )
    beam = np.zeros((height, width), bool)
    beam[cells[inside, 0], cells[inside, 1]] = True
    frame = grid_render.render_cells(
        cell_colours(state),
        positions,
        np.asarray(state.orientations),
        colours,
        scale=scale,
        highlight=beam,
    )
    return np.asarray(frame, np.uint8)
