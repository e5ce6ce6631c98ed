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
import numpy as np

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


# One uint16 code per map cell: the cell code in the low bits, the channel-2 code of the agent
# standing there (0 = nobody) above them, so channels 0-2 come from one view of one layer.
_CELL_BITS = 5  # cell codes are 0..23


def packed_layer(state: OpenCleanupState) -> jax.Array:
    """uint16[H, W]: ``cell | agent_info << 5`` (agent info as in channel 2, 0 = nobody)."""
    info = (1 + state.orientations + 4 * (state.frozen > 0)).astype(jnp.uint16)
    agents = G.paint_agents(jnp.zeros(state.grid.shape, jnp.uint16), state.positions, info)
    return state.grid.astype(jnp.uint16) | (agents << _CELL_BITS)


def observe(state: OpenCleanupState) -> jax.Array:
    """uint8[A, 11, 11, 4]: every agent's observation (see the module docstring).

    One view of the packed layer per agent; the channels are decoded from it. Another agent's
    facing relative to the observer follows from its absolute facing (in its info code) and the
    observer's; the observer is the only agent on its own view cell ``[9, 5]``.
    """
    views = G.egocentric_views(
        packed_layer(state),
        state.positions,
        state.orientations,
        VIEW_AHEAD,
        VIEW_BEHIND,
        VIEW_SIDE,
        C.WALL,
    )
    cells = (views & ((1 << _CELL_BITS) - 1)).astype(jnp.uint8)
    info = (views >> _CELL_BITS).astype(jnp.uint8)
    their_facing = (info - 1) & 3
    facing = (their_facing - state.orientations.astype(jnp.uint8)[:, None, None]) % 4
    who = jnp.where(info > 0, C.AGENT_OTHER_BASE + facing, C.AGENT_NONE).astype(jnp.uint8)
    who = jnp.where(_SELF_CELL, jnp.uint8(C.AGENT_SELF), who)
    window = jnp.broadcast_to(window_codes(state.window)[:, None, None], cells.shape)
    return jnp.stack([cells, who, info, window], axis=-1)


_SELF_CELL = np.zeros(VIEW_SIZE, bool)
_SELF_CELL[SELF_ROW, SELF_COL] = True


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
