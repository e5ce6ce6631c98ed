"""Observations of OpenHarvest: the 11 x 11 egocentric window as compact uint8 codes.

An observation is ``uint8[11, 11, 3]`` (view row 0 = 9 cells ahead, the observer at [9, 5],
facing up, view column 0 = 5 cells to its left). The channels mean what OpenCleanup's channels
0-2 mean, so one network architecture reads both games:

- channel 0, the cell: 0 wall or off the map, 1 ground, 2 + colour an empty tree cell,
  7 + 3 * colour + stage an apple (colours red, yellow, green, cyan, purple; stages unripe,
  ripe, over-ripe). An agent does not hide the cell it stands on.
- channel 1, who stands there: 0 nobody, 1 the observer, 2 + another agent's facing relative
  to the observer (0 the same way, 1 the observer's right, 2 towards it, 3 its left).
- channel 2, agent info: 0 nobody, else 1 + the agent's absolute orientation (N, E, S, W) + 4
  if it is frozen. At [9, 5]: the observer's own facing and frozen flag.

The one-hot view concatenates one-hot planes of the three channels: float32[11, 11, 22 + 6 + 9].
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dilemmax.envs import grid, packed_view
from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest.types import OpenHarvestState

ONE_HOT_CHANNELS = c.NUM_CELL_CODES + c.NUM_WHO_CODES + c.NUM_INFO_CODES


def terrain_codes(state: OpenHarvestState) -> jax.Array:
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


def agent_info_codes(state: OpenHarvestState) -> jax.Array:
    """uint8[A]: channel-2 code of each agent: 1 + orientation + 4 * frozen."""
    return packed_view.agent_info(state.agent_dir, state.frozen)


def map_layers(state: OpenHarvestState) -> jax.Array:
    """uint8[H, W, 3]: the map's three channels, agents in absolute terms (channel 1 holds
    2 + each agent's absolute orientation)."""
    terrain = terrain_codes(state)
    who = grid.paint_agents(
        jnp.zeros(terrain.shape, jnp.uint8),
        state.agent_pos,
        (c.WHO_OTHER + state.agent_dir).astype(jnp.uint8),
    )
    info = grid.paint_agents(
        jnp.zeros(terrain.shape, jnp.uint8), state.agent_pos, agent_info_codes(state)
    )
    return jnp.stack([terrain, who, info], axis=-1)


def observe(state: OpenHarvestState) -> jax.Array:
    """uint8[A, 11, 11, 3]: every agent's observation (see the module docstring), from one view
    per agent of the packed map layer (:mod:`dilemmax.envs.packed_view`)."""
    layer = packed_view.packed_layer(terrain_codes(state), state.agent_pos, agent_info_codes(state))
    channels = packed_view.observe_channels(
        layer,
        state.agent_pos,
        state.agent_dir,
        c.VIEW_AHEAD,
        c.VIEW_BEHIND,
        c.VIEW_SIDE,
        c.CODE_WALL,
    )
    return jnp.stack(channels, axis=-1)


def one_hot(obs: jax.Array) -> jax.Array:
    """float32[..., 11, 11, 37]: one-hot planes of the three channels of uint8[..., 11, 11, 3]."""
    return jnp.concatenate(
        [
            grid.one_hot_codes(obs[..., 0], c.NUM_CELL_CODES),
            grid.one_hot_codes(obs[..., 1], c.NUM_WHO_CODES),
            grid.one_hot_codes(obs[..., 2], c.NUM_INFO_CODES),
        ],
        axis=-1,
    )
