"""Grid-world mechanics shared by the grid games (OpenCleanup, OpenHarvest).

Conventions used everywhere in this module:

- A cell is ``(row, col)``, int32. Row 0 is the top (north) edge, rows grow southward; col 0 is the
  west edge, cols grow eastward.
- Orientation codes: ``NORTH=0, EAST=1, SOUTH=2, WEST=3`` (clockwise). Turning right adds 1,
  turning left subtracts 1, modulo 4.
- ``A`` is the number of agents, ``H x W`` the grid shape. Shapes (``A``, ``H``, ``W`` and the view
  size) are static; everything else may be traced, so every function here is jittable and
  vmappable over environments.

Everything that depends only on static sizes (view offset tables, beam footprints) is computed
once with numpy and enters the traced program as a constant, so an observation is a single gather
and a beam a handful of additions.
"""

from dilemmax.envs.grid.core import (
    BEAM_FORWARD_RIGHT,
    BEAM_LENGTH,
    DIRECTION_DELTAS,
    DIRECTION_DELTAS_NP,
    EAST,
    NO_MOVE,
    NO_TURN,
    NORTH,
    NUM_ORIENTATIONS,
    ORIENTATION_NAMES,
    SOUTH,
    TURN_LEFT,
    TURN_RIGHT,
    WEST,
    GridShape,
    as_shape,
    beam_cells,
    beam_hits_agents,
    beam_mask,
    gather_cells,
    in_bounds,
    propose_moves,
    relative_orientation,
    resolve_moves,
    rotate_delta,
    turn,
)
from dilemmax.envs.grid.placement import (
    agent_grid,
    occupancy,
    paint_agents,
    respawn_positions,
    sample_spawn_positions,
)
from dilemmax.envs.grid.views import (
    egocentric_agent_views,
    egocentric_view,
    egocentric_views,
    one_hot_codes,
    view_offsets,
)

__all__ = [
    "BEAM_FORWARD_RIGHT",
    "BEAM_LENGTH",
    "DIRECTION_DELTAS",
    "EAST",
    "GridShape",
    "NORTH",
    "NO_MOVE",
    "NO_TURN",
    "NUM_ORIENTATIONS",
    "ORIENTATION_NAMES",
    "SOUTH",
    "TURN_LEFT",
    "TURN_RIGHT",
    "WEST",
    "DIRECTION_DELTAS_NP",
    "as_shape",
    "agent_grid",
    "beam_cells",
    "beam_hits_agents",
    "beam_mask",
    "egocentric_agent_views",
    "egocentric_view",
    "egocentric_views",
    "gather_cells",
    "in_bounds",
    "occupancy",
    "one_hot_codes",
    "paint_agents",
    "propose_moves",
    "relative_orientation",
    "resolve_moves",
    "respawn_positions",
    "rotate_delta",
    "sample_spawn_positions",
    "turn",
    "view_offsets",
]
