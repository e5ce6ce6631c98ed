"""Pictures of an OpenHarvest state: an rgb frame and an ansi text grid.

Both run outside the hot path on one unbatched state. Cell notation of the text grid follows the
paper's view: ``..`` ground, ``##`` wall, an apple is its colour letter plus its stage letter
(``Rg`` red unripe, ``Rr`` ripe, ``Ro`` over-ripe), an empty tree cell is the colour letter in
lower case plus ``_`` (``r_``); an agent is its letter plus an arrow for its facing (``A^``), or
``a*`` while frozen.
"""

from __future__ import annotations

import numpy as np

from dilemmax.envs import grid, grid_render
from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest.observation import terrain_codes
from dilemmax.envs.open_harvest.types import OpenHarvestState
from dilemmax.envs.osj.view import agent_letter

# Full-colour apples per colour (ripe); unripe is paler, over-ripe darker.
_APPLE_RGB = np.array(
    [[214, 40, 40], [240, 200, 20], [40, 170, 60], [30, 190, 200], [150, 60, 190]], np.float32
)
_GROUND_RGB = np.array([222, 207, 170], np.float32)
_WALL_RGB = np.array([90, 90, 90], np.float32)
_SOIL_RGB = np.array([120, 90, 60], np.float32)
_AGENT_RGB = np.array(
    [[30, 60, 220], [240, 120, 20], [230, 60, 160], [20, 120, 110], [110, 70, 30],
     [0, 0, 0], [200, 200, 255], [255, 200, 200], [120, 120, 0], [0, 120, 255]],
    np.uint8,
)  # fmt: skip
_FROZEN_RGB = np.array([170, 170, 170], np.uint8)
_ARROWS = "^>v<"


def code_palette() -> np.ndarray:
    """uint8[NUM_CELL_CODES, 3]: the colour of every cell code (agents are drawn apart)."""
    pal = np.zeros((c.NUM_CELL_CODES, 3), np.float32)
    pal[c.CODE_WALL] = _WALL_RGB
    pal[c.CODE_GROUND] = _GROUND_RGB
    for colour in range(c.NUM_COLOURS):
        full = _APPLE_RGB[colour]
        pal[c.CODE_EMPTY_TREE + colour] = 0.7 * _SOIL_RGB + 0.3 * full
        base = c.CODE_APPLE + colour * c.NUM_STAGES
        pal[base + c.UNRIPE] = 0.55 * full + 0.45 * np.array([200, 230, 160])
        pal[base + c.RIPE] = full
        pal[base + c.OVERRIPE] = 0.6 * full
    return np.clip(pal, 0, 255).astype(np.uint8)


_PALETTE = code_palette()


def render_rgb(state: OpenHarvestState, scale: int = 8) -> np.ndarray:
    """uint8[H * scale, W * scale, 3]: the whole map, agents drawn as arrowheads facing their
    way (grey while frozen), the cells of beams fired on the last step tinted."""
    codes = np.asarray(terrain_codes(state))
    frozen = np.asarray(state.frozen) > 0
    num_agents = frozen.shape[0]
    colours = np.resize(_AGENT_RGB, (num_agents, 3))
    colours = np.where(frozen[:, None], _FROZEN_RGB, colours).astype(np.uint8)
    # Beams fired on the last step are tinted (a zapper does not move on the step it fires).
    beams = grid.beam_mask(
        state.agent_pos, state.agent_dir, state.last_action == c.ZAP, codes.shape
    )
    frame = grid_render.render_cells(
        _PALETTE[codes],
        np.asarray(state.agent_pos),
        np.asarray(state.agent_dir),
        colours,
        scale=scale,
        highlight=np.asarray(beams),
    )
    return np.asarray(frame, np.uint8)


def cell_token(code: int) -> str:
    """Two-character text of a terrain code (see the module docstring)."""
    if code == c.CODE_WALL:
        return "##"
    if code == c.CODE_GROUND:
        return ".."
    if c.CODE_EMPTY_TREE <= code < c.CODE_APPLE:
        return c.COLOUR_LETTERS[code - c.CODE_EMPTY_TREE].lower() + "_"
    if c.CODE_APPLE <= code < c.NUM_CELL_CODES:
        colour, stage = divmod(code - c.CODE_APPLE, c.NUM_STAGES)
        return c.COLOUR_LETTERS[colour] + c.STAGE_LETTERS[stage]
    return "??"


def render_ansi(state: OpenHarvestState) -> str:
    """The whole map as text, with a header of the trial, step and points."""
    codes = np.asarray(terrain_codes(state))
    tokens = [[cell_token(int(v)) for v in row] for row in codes]
    frozen = np.asarray(state.frozen)
    for i, ((r, q), d) in enumerate(
        zip(np.asarray(state.agent_pos), np.asarray(state.agent_dir), strict=True)
    ):
        letter = agent_letter(i)
        tokens[r][q] = letter.lower() + "*" if frozen[i] > 0 else letter + _ARROWS[d]
    width = codes.shape[1]
    lines = [
        f"trial {int(state.trial) + 1}, step {int(state.trial_step)}, "
        f"apples {int(np.sum(np.asarray(state.orchard.apple)))}",
        "points this trial: "
        + ", ".join(
            f"{agent_letter(i)} {float(v):.2f}"
            for i, v in enumerate(np.asarray(state.trial_return))
        ),
        "    " + " ".join(f"{q:2d}" for q in range(width)),
    ]
    lines += [f"r{r:2d} " + " ".join(row) for r, row in enumerate(tokens)]
    return "\n".join(lines)
