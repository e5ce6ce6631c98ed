"""Numbers and codes of OpenHarvest.

Where a number comes from: [paper] is printed in ``papers/opensocialjax.txt``; [spec] is on the
spec sheet (taken from the authors' public implementation); [chosen] is ours because neither
prints it, and the reason is given beside it.
"""

from __future__ import annotations

import itertools

import numpy as np

# ---------------------------------------------------------------- episode
NUM_AGENTS = 5  # [paper] teams of five
NUM_TRIALS = 5  # [paper]
TRIAL_STEPS = 400  # [paper] a trial lasts at most 400 steps

# ---------------------------------------------------------------- map
GRID_HEIGHT = 16  # [spec] 16 x 22
GRID_WIDTH = 22
NUM_PATCHES = 6  # [paper]
# [spec] reference patch sizes: four diamonds of 13 cells (Manhattan radius 2) and two
# triangles of 6 cells (3 + 2 + 1, inside a 3 x 3 box); the shapes are [chosen] to match the
# patches drawn in the paper's Listing 4 (e.g. "red rows 4-8 cols 8-12": a 5 x 5 diamond, and a
# green 6-cell patch laid out as 1 / 2 / 3 cells on rows 13 / 14 / 15).
PATCH_SIZES = (13, 13, 13, 13, 6, 6)
NUM_TREES = sum(PATCH_SIZES)  # 64
NUM_SPAWNS = 20  # [spec]
SPAWN_FIRST_COL = 1  # [chosen] the 20 spawn cells are columns 1-20 of the spawn row
# [chosen] trees of two different patches are at least this Manhattan distance apart, so a
# cell's 12-cell neighbourhood never reaches into another patch ("apples hanging in another
# patch do nothing for it", paper Listing 2).
PATCH_SEPARATION = 3
# [reference] every tree lies at least this many rows from the spawn row (so at least this many
# steps from every spawn cell): being zapped back to spawn costs a walk back to the orchard.
SPAWN_TREE_DISTANCE = 4
MAX_LAYOUT_ATTEMPTS = 64  # [chosen] rejection-sampling bound of the layout generator

# ---------------------------------------------------------------- apples
NUM_COLOURS = 5  # [paper] red, yellow, green, cyan, purple
COLOUR_NAMES = ("red", "yellow", "green", "cyan", "purple")
COLOUR_LETTERS = ("R", "Y", "G", "C", "P")  # [paper] Listing 2, section 3.2
NUM_STAGES = 3  # [paper] unripe, ripe, over-ripe
STAGE_NAMES = ("unripe", "ripe", "over-ripe")
STAGE_LETTERS = ("g", "r", "o")  # [paper] Listing 2
UNRIPE, RIPE, OVERRIPE = 0, 1, 2

STAGE_LENGTH_MIN = 15  # [paper] each stage lasts 15-20 steps (inclusive), drawn per apple
STAGE_LENGTH_MAX = 20
ROT_AFTER_STAGES = 3  # [spec] an apple rots at age 3 x its stage length
ROT_REGROW_MIN = 2  # [paper] a rotted cell grows a new apple after 2-5 steps (inclusive)
ROT_REGROW_MAX = 5

# [spec] base regrowth probability of an eaten cell by the number n of apples within Manhattan
# distance 2 (12 cells): index min(n, 3).
BASE_REGROWTH = (0.0, 0.001, 0.005, 0.025)
NEIGHBOURHOOD_RADIUS = 2
NEIGHBOURHOOD_SIZE = 12  # cells at Manhattan distance 1 or 2

# [paper] hidden rule levels; a rule assigns each colour a permutation of each list to stages.
PAY_LEVELS = (1.0, 0.5, 0.25)
REGROWTH_MULTIPLIERS = (2.0, 1.0, 0.5)
# Every ordering of three levels over the three stages: row k maps stage -> level index. The
# rule sampler draws a row index per colour, so the rule space is derived from this table.
STAGE_PERMUTATIONS = np.array(list(itertools.permutations(range(NUM_STAGES))), dtype=np.int32)
# Curriculum option (not in the paper): ``stage_orders`` k < 6 draws each colour's pay and
# regrowth rows from the first k rows of this order only, so the rule space shrinks from 6^10 to
# k^10. The order puts the two most different rows first: the top level on the unripe stage
# (row 0: 0, 1, 2) and on the over-ripe stage (row 5: 2, 1, 0).
STAGE_ORDER_PREFERENCE = (0, 5, 1, 4, 2, 3)
DEFAULT_STAGE_ORDERS = len(STAGE_ORDER_PREFERENCE)  # 6: the paper's rule space

# ---------------------------------------------------------------- agents and zap
FREEZE_STEPS = 12  # [paper] a zapped agent cannot act for 12 steps
ZAP_COOLDOWN = 2  # [spec] after firing, the beam cannot fire on the next 2 steps
BEAM_LENGTH = 2  # the faced cell and the one beyond (plus two diagonals: 4 cells in all)

# ---------------------------------------------------------------- actions
# [paper] Listing 4: "0 north | 1 south | 2 east | 3 west | 4 turn left | 5 turn right |
# 6 zap | 7 stay". Moves are absolute and keep the facing.
NORTH_ACTION, SOUTH_ACTION, EAST_ACTION, WEST_ACTION = 0, 1, 2, 3
TURN_LEFT, TURN_RIGHT, ZAP, STAY = 4, 5, 6, 7
NUM_ACTIONS = 8
ACTION_NAMES = ("north", "south", "east", "west", "turn_left", "turn_right", "zap", "stay")
# Orientation code (grid.py: NORTH=0, EAST=1, SOUTH=2, WEST=3) moved along by actions 0-3.
ACTION_MOVE_DIR = np.array([0, 2, 1, 3, -1, -1, -1, -1], dtype=np.int32)
ACTION_TURN = np.array([0, 0, 0, 0, -1, 1, 0, 0], dtype=np.int32)
# The movement action that walks one cell towards orientation code d (inverse of the above).
DIR_TO_ACTION = np.array([NORTH_ACTION, EAST_ACTION, SOUTH_ACTION, WEST_ACTION], dtype=np.int32)

# ---------------------------------------------------------------- observation
VIEW_AHEAD, VIEW_BEHIND, VIEW_SIDE = 9, 1, 5  # [paper] 11 x 11: 9 ahead, 1 behind, 5 aside
VIEW_HEIGHT = VIEW_AHEAD + VIEW_BEHIND + 1
VIEW_WIDTH = 2 * VIEW_SIDE + 1
SELF_ROW, SELF_COL = VIEW_AHEAD, VIEW_SIDE  # the observer's own cell in its view

# An observation is uint8[11, 11, 3]; channels 0-2 have the same meaning as OpenCleanup's.
# Channel 0, the cell (agents do not hide what they stand on).
CODE_WALL = 0  # a wall, or outside the map (the paper draws both as ##)
CODE_GROUND = 1
CODE_EMPTY_TREE = 2  # + colour: 2..6, a tree cell with no apple
CODE_APPLE = 7  # + colour * 3 + stage: 7..21
NUM_CELL_CODES = 22
# Channel 1, who stands there: nobody, the observer itself (always and only at [9, 5]), or
# another agent: 2 + its facing relative to the observer (0 the same way, 1 the observer's
# right, 2 towards the observer, 3 its left).
WHO_NOBODY, WHO_SELF, WHO_OTHER = 0, 1, 2
NUM_WHO_CODES = 6
# Channel 2, agent info: 0 nobody, else 1 + the agent's absolute orientation (N, E, S, W) + 4 if
# it is frozen. At [9, 5] this is the observer's own compass facing (which compass moves need)
# and whether it is frozen, both of which its text view states too.
NUM_INFO_CODES = 9
OBS_CHANNELS = 3
OBS_HIGH = NUM_CELL_CODES - 1  # the largest value in any channel

# ---------------------------------------------------------------- pools
DEFAULT_NUM_LAYOUTS = 256  # [spec]
DEFAULT_NUM_RULES = 100_000  # [spec]
DEFAULT_TRAIN_FRACTION = 0.8  # [spec] 80 / 20 split
