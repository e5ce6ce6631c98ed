"""Observations of OpenCleanup: the 11 x 11 egocentric window as compact uint8 codes.

An observation is ``uint8[11, 11, 4]``; view row 0 is 9 cells ahead, the observer sits at
``[9, 5]`` facing up, view column 0 is 5 cells to its left.

- channel 0, the cell: the cell code of ``constants`` (ground, wall, water, 15 waste types,
  orchard soil, apple, 4 stations); cells beyond the edge of the world read as wall. Agents do not
  hide what they stand on (a station under an agent still shows).
- channel 1, who stands there: 0 nobody, 1 the observer itself (always and only at ``[9, 5]``),
  2 + the other agent's facing relative to the observer (0 faces the same way, 1 the observer's
  right, 2 towards the observer, 3 its left).
- channel 2, agent info, as in OpenHarvest: 0 nobody, else 1 + the agent's absolute orientation
  (north, east, south, west) + 4 if it is frozen by a zap. At ``[9, 5]`` this is the observer's
  own compass facing, which compass moves need.
- channel 3, the observer's pick-up window, the same in every cell: ``(first + 1) * 5 +
  (second + 1)`` with -1 for an empty slot, so 0 = no pick-up yet, 1..4 = one pick-up, 6..24 two.

The one-hot view (``observation="one_hot"``) is float32[11, 11, 24 + 6 + 9 + 10]: one-hot planes
of channels 0-2 and of each window slot (5 values each: empty, tool 0..3).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dilemmax.envs import grid as G
from dilemmax.envs.open_cleanup import constants as C
from dilemmax.envs.open_cleanup.types import OpenCleanupState

VIEW_AHEAD, VIEW_BEHIND, VIEW_SIDE = 9, 1, 5
VIEW_SIZE = (VIEW_AHEAD + VIEW_BEHIND + 1, 2 * VIEW_SIDE + 1)
SELF_ROW, SELF_COL = VIEW_AHEAD, VIEW_SIDE
NUM_CHANNELS = 4
NUM_INFO_CODES = 9
CODES_HIGH = C.NUM_WINDOW_CODES - 1  # 24, the largest code in any channel
ONE_HOT_CHANNELS = C.NUM_CELL_CODES + C.NUM_AGENT_CODES + NUM_INFO_CODES + 2 * (C.NUM_TOOLS + 1)


def window_codes(window: jax.Array) -> jax.Array:
    """uint8[A]: channel-3 code of each window (int32[A, 2], -1 = empty slot)."""
    return ((window[:, 0] + 1) * (C.NUM_TOOLS + 1) + (window[:, 1] + 1)).astype(jnp.uint8)


def observe(state: OpenCleanupState) -> jax.Array:
    """uint8[A, 11, 11, 4]: every agent's observation (see the module docstring).

    The cell code and the index of the agent standing there are packed into one int32 layer
    (``code + 256 * (agent + 1)``), so all views come from a single gather.
    """
    positions, orientations = state.positions, state.orientations
    num_agents = positions.shape[0]
    who_grid = G.agent_grid(positions, state.grid.shape, fill=-1)
    packed = state.grid.astype(jnp.int32) + 256 * (who_grid + 1)
    views = G.egocentric_views(
        packed, positions, orientations, VIEW_AHEAD, VIEW_BEHIND, VIEW_SIDE, C.WALL
    )
    cells = (views & 255).astype(jnp.uint8)
    index = (views >> 8) - 1  # -1 where nobody stands
    safe = jnp.clip(index, 0, None)
    observer = jnp.arange(num_agents, dtype=jnp.int32)[:, None, None]
    facing = G.relative_orientation(orientations[safe], orientations[:, None, None])
    who = jnp.where(
        index < 0,
        C.AGENT_NONE,
        jnp.where(index == observer, C.AGENT_SELF, C.AGENT_OTHER_BASE + facing),
    ).astype(jnp.uint8)
    info_of = (1 + orientations + 4 * (state.frozen > 0)).astype(jnp.uint8)
    info = jnp.where(index < 0, jnp.uint8(0), info_of[safe])
    window = jnp.broadcast_to(window_codes(state.window)[:, None, None], cells.shape)
    return jnp.stack([cells, who, info, window], axis=-1)


def one_hot(obs: jax.Array) -> jax.Array:
    """float32[..., 11, 11, 49]: one-hot planes of a codes observation ``uint8[..., 11, 11, 4]``."""
    window = obs[..., 3].astype(jnp.int32)
    slots = (window // (C.NUM_TOOLS + 1), window % (C.NUM_TOOLS + 1))
    return jnp.concatenate(
        [
            G.one_hot_codes(obs[..., 0], C.NUM_CELL_CODES),
            G.one_hot_codes(obs[..., 1], C.NUM_AGENT_CODES),
            G.one_hot_codes(obs[..., 2], NUM_INFO_CODES),
            G.one_hot_codes(slots[0], C.NUM_TOOLS + 1),
            G.one_hot_codes(slots[1], C.NUM_TOOLS + 1),
        ],
        axis=-1,
    )
