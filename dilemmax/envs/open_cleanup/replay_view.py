"""How ``dilemmax view`` draws OpenCleanup's frames from a replayed episode (its
:class:`~dilemmax.envs.game_declaration.GridView`): the state's own grid of cell codes, the
agents' places, and the cells each fired beam tints, as ``render_rgb`` finds them."""

from __future__ import annotations

import numpy as np

from dilemmax.envs.game_declaration import GridView
from dilemmax.envs.open_cleanup.rendering import PALETTE


def codes(states):
    return states.grid


def agents(states):
    return states.positions, states.orientations, states.frozen


def beams(states, shape: tuple[int, int]) -> np.ndarray:
    """bool[T + 1, H, W]: the cells of the shots fired on the step before each state."""
    last = np.asarray(states.shot_time) == np.asarray(states.trial_step)[:, None] - 1
    cells = np.asarray(states.shot_cells)  # [T + 1, A, 4, 2]
    lit = np.zeros((cells.shape[0], *shape), bool)
    t, _, _ = np.nonzero(np.broadcast_to(last[:, :, None], cells.shape[:3]))
    rows, cols = cells[last].reshape(-1, 2).T
    inside = (rows >= 0) & (rows < shape[0]) & (cols >= 0) & (cols < shape[1])
    lit[t[inside], rows[inside], cols[inside]] = True
    return lit


GRID_VIEW = GridView(palette=lambda: PALETTE, codes=codes, agents=agents, beams=beams)
