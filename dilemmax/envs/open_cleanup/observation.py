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
from dilemmax.envs import packed_view
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

    Channels 0-2 come from one view per agent of the packed map layer
    (:mod:`dilemmax.envs.packed_view`); channel 3 is the observer's window code.
    """
    agent_info = packed_view.agent_info(state.orientations, state.frozen)
    layer = packed_view.packed_layer(state.grid, state.positions, agent_info)
    cells, who, info = packed_view.observe_channels(
        layer, state.positions, state.orientations, VIEW_AHEAD, VIEW_BEHIND, VIEW_SIDE, C.WALL
    )
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
