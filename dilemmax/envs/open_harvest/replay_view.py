"""How ``dilemmax view`` draws OpenHarvest's frames from a replayed episode (its
:class:`~dilemmax.envs.game_declaration.GridView`): the terrain codes of each state, the agents'
places, and the cells each fired zap beam tints, as ``render_rgb`` finds them."""

from __future__ import annotations

import jax
import numpy as np

from dilemmax.envs import grid
from dilemmax.envs.game_declaration import GridView
from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest.observation import terrain_codes
from dilemmax.envs.open_harvest.rendering import code_palette


def codes(states):
    if jax.tree.leaves(states.agent_pos)[0].ndim == 2:  # one state
        return terrain_codes(states)
    return jax.vmap(terrain_codes)(states)


def agents(states):
    return states.agent_pos, states.agent_dir, states.frozen


def beams(states, shape: tuple[int, int]) -> np.ndarray:
    """bool[T + 1, H, W]: the beams of the agents whose last action was a zap."""
    firing = np.asarray(states.last_action) == c.ZAP
    mask = jax.vmap(lambda p, d, f: grid.beam_mask(p, d, f, shape))
    return np.asarray(mask(states.agent_pos, states.agent_dir, firing))


GRID_VIEW = GridView(palette=code_palette, codes=codes, agents=agents, beams=beams)
