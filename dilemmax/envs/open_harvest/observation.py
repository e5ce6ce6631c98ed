"""Observations of OpenHarvest: the 11 x 11 egocentric window as compact uint8 codes.

An observation is ``uint8[11, 11, 2]`` (view row 0 = 9 cells ahead, the observer at [9, 5],
facing up):

- channel 0, the cell code: 0 wall / off the map, 1 ground, 2 + colour an empty tree cell,
  7 + 3 * colour + stage an apple, 22 + relative orientation another agent (0 faces the same
  way as the observer, 1 faces the observer's right, 2 faces the observer, 3 its left),
  26 the observer itself.
- channel 1, the agent on the cell: 0 none, else 1 + its absolute orientation (N, E, S, W) + 4
  if it is frozen. At [9, 5] this is the observer's own facing and frozen flag, which its text
  view also states.

The one-hot view concatenates one-hot planes of both channels: float32[11, 11, 27 + 9].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dilemmax.envs import grid
from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest.types import HarvestState

ONE_HOT_CHANNELS = c.NUM_CODES + c.NUM_AGENT_CODES


def terrain_codes(state: HarvestState) -> jax.Array:
    """uint8[H, W]: wall / ground / tree codes of the map, without agents."""
    config, orchard = state.config, state.orchard
    colour = config.tree_colour
    tree_code = jnp.where(
        orchard.apple,
        c.CODE_APPLE + colour * c.NUM_STAGES + orchard.stage,
        c.CODE_EMPTY_TREE + colour,
    ).astype(jnp.uint8)
    base = jnp.where(config.layout.walls, c.CODE_WALL, c.CODE_GROUND).astype(jnp.uint8)
    pos = config.layout.tree_positions
    return base.at[pos[:, 0], pos[:, 1]].set(tree_code, mode="promise_in_bounds")


def agent_info_codes(state: HarvestState) -> jax.Array:
    """uint8[A]: channel-1 code of each agent: 1 + orientation + 4 * frozen."""
    return (1 + state.agent_dir + 4 * (state.frozen > 0)).astype(jnp.uint8)


def map_layers(state: HarvestState) -> jax.Array:
    """uint8[H, W, 2]: the map with agents painted in absolute orientation (channel 0: 22 + dir)."""
    cells = grid.paint_agents(
        terrain_codes(state), state.agent_pos, (c.CODE_AGENT + state.agent_dir).astype(jnp.uint8)
    )
    info = grid.paint_agents(
        jnp.zeros(cells.shape, jnp.uint8), state.agent_pos, agent_info_codes(state)
    )
    return jnp.stack([cells, info], axis=-1)


def observe(state: HarvestState) -> jax.Array:
    """uint8[A, 11, 11, 2]: every agent's observation (see the module docstring)."""
    views = grid.egocentric_views(
        map_layers(state),
        state.agent_pos,
        state.agent_dir,
        ahead=c.VIEW_AHEAD,
        behind=c.VIEW_BEHIND,
        side=c.VIEW_SIDE,
        pad_value=c.CODE_WALL,
    )
    cells, info = views[..., 0], views[..., 1]
    # Agents were painted with absolute orientations; turn them into the observer's frame.
    is_agent = (cells >= c.CODE_AGENT) & (cells < c.CODE_AGENT + 4)
    observer_dir = state.agent_dir.astype(jnp.uint8)[:, None, None]
    relative = c.CODE_AGENT + (cells - c.CODE_AGENT - observer_dir) % 4
    cells = jnp.where(is_agent, relative, cells).astype(jnp.uint8)
    cells = cells.at[:, c.SELF_ROW, c.SELF_COL].set(c.CODE_SELF)
    return jnp.stack([cells, info], axis=-1)


def one_hot(obs: jax.Array) -> jax.Array:
    """float32[..., 11, 11, 36]: one-hot planes of both channels of uint8[..., 11, 11, 2]."""
    return jnp.concatenate(
        [
            grid.one_hot_codes(obs[..., 0], c.NUM_CODES),
            grid.one_hot_codes(obs[..., 1], c.NUM_AGENT_CODES),
        ],
        axis=-1,
    )
