"""Numbers and codes of OpenCleanup.

Source: the OpenSocialJax paper (Sections 3.2-4, Appendix A listing 1). Where it prints no
number, the value chosen here is marked "chosen".

Cell codes (one uint8 per grid cell, the ``grid`` of the state and channel 0 of an observation):

=====  ==========================================================
code   meaning
=====  ==========================================================
0      ground (walkable, nothing on it)
1      wall (also every cell beyond the edge of the world)
2      water: a clean river cell or a stream cell
3-17   waste: ``3 + hue * 3 + shade`` (the paper's colour code + 3)
18     orchard soil without an apple
19     apple (on orchard soil)
20-23  tool station of base tool 0..3
=====  ==========================================================
"""

from __future__ import annotations

import math

import numpy as np

# ----------------------------------------------------------------------------- map (static)
GRID_HEIGHT, GRID_WIDTH = 12, 16
NUM_AGENTS = 5

# Layout counts of the reference pool (spec: 26 polluted + 6 clean river cells, 5 stream cells,
# 48 orchard cells, 8 stations = 4 kinds x 2, 7 spawn points).
NUM_POLLUTED_START = 26
NUM_CLEAN_START = 6
NUM_RIVER = NUM_POLLUTED_START + NUM_CLEAN_START  # cells where waste lives and can reappear
NUM_STREAM = 5  # always water; counts in the pollution denominator
NUM_ORCHARD = 48
NUM_STATIONS = 8
NUM_SPAWNS = 7

# Layout generator geometry (chosen, after the reference pool's description: a 2-wide meandering
# river, an orchard at least 7 steps from it, a chain of stations with one empty cell between
# consecutive stations, 4-6 steps from the river and 2-4 from the orchard for the first station,
# 3-7 / 2-5 for the rest, spawn points 1-7 steps from both river and orchard).
RIVER_WALK_STEPS = 64
RIVER_TURN_PROB = 0.25
STREAM_WALK_STEPS = 32
STREAM_TURN_PROB = 0.2
ORCHARD_MIN_RIVER_DIST = 7
ORCHARD_AXIS_BIAS = 3.0  # extra weight of frontier cells within 1 row/col of the orchard seed
STATION_FIRST_RIVER_DIST = (4, 6)
STATION_FIRST_ORCHARD_DIST = (2, 4)
STATION_RIVER_DIST = (3, 7)
STATION_ORCHARD_DIST = (2, 5)
STATION_KEEP_DIRECTION_WEIGHT = 4.0  # the chain prefers to keep going straight
SPAWN_DIST = (1, 7)
STATION_CHAIN_TRIES = 8  # chains tried in parallel per layout attempt
MAX_LAYOUT_ROUNDS = 64  # chunks of attempts before giving up (about half of all attempts succeed)

# ----------------------------------------------------------------------------- cell codes
GROUND = 0
WALL = 1
WATER = 2
WASTE_BASE = 3
NUM_HUES = 5
NUM_SHADES = 3
NUM_WASTE_TYPES = NUM_HUES * NUM_SHADES  # 15
LIGHT, MID, DARK = 0, 1, 2
ORCHARD = WASTE_BASE + NUM_WASTE_TYPES  # 18
APPLE = ORCHARD + 1  # 19
STATION_BASE = APPLE + 1  # 20
NUM_TOOLS = 4
NUM_CELL_CODES = STATION_BASE + NUM_TOOLS  # 24

HUE_NAMES = ("red", "yellow", "green", "cyan", "purple")
HUE_LETTERS = ("R", "Y", "G", "C", "P")
SHADE_NAMES = ("light", "mid", "dark")

# ----------------------------------------------------------------------------- agent codes
# Channel 1 of an observation: who stands on each view cell.
AGENT_NONE = 0
AGENT_SELF = 1
AGENT_OTHER_BASE = 2  # + the other agent's facing relative to the observer (0 up .. 3 left)
NUM_AGENT_CODES = AGENT_OTHER_BASE + 4  # 6

# ----------------------------------------------------------------------------- hidden recipes
WINDOW = 2  # an agent's window holds its last two pick-ups, oldest first
EMPTY_SLOT = -1
NUM_PAIRS = NUM_TOOLS**WINDOW  # 16 ordered pairs, repetition allowed
# Effects 0..4: clear light waste of hue h to water; 5: mid -> light (any hue); 6: dark -> mid.
EFFECT_MID_TO_LIGHT = NUM_HUES
EFFECT_DARK_TO_MID = NUM_HUES + 1
NUM_EFFECTS = NUM_HUES + 2  # 7
NO_EFFECT = NUM_EFFECTS  # index of "does nothing" in the transform table
# Window code in channel 2 of an observation: (slot0 + 1) * 5 + (slot1 + 1), 0 = empty window.
NUM_WINDOW_CODES = (NUM_TOOLS + 1) ** WINDOW  # 25


# ----------------------------------------------------------------------------- difficulty
# Curriculum options (defaults: the paper's game). A recipe is the last ``recipe_length``
# pick-ups (1 or 2); stations offer ``num_tools`` kinds of tool (2-4); waste comes in
# ``num_hues`` hues (1-5), so ``num_hues + 2`` effects need a recipe each. Not in the paper.
RECIPE_LENGTH = WINDOW
RECIPE_LENGTHS = (1, 2)
MIN_TOOLS = 2


def num_recipes(recipe_length: int = RECIPE_LENGTH, num_tools: int = NUM_TOOLS) -> int:
    """Distinct recipes: ordered sequences of ``recipe_length`` tools, repetition allowed."""
    return num_tools**recipe_length


def rule_space_size(
    recipe_length: int = RECIPE_LENGTH, num_tools: int = NUM_TOOLS, num_hues: int = NUM_HUES
) -> int:
    """Number of rules the sampler can draw: injective maps of the effects in play (``num_hues``
    light-waste clears, mid -> light, dark -> mid) into the recipes."""
    return math.perm(num_recipes(recipe_length, num_tools), num_hues + 2)


def pair_index(first: int, second: int) -> int:
    """The pair index of window ``[first, second]`` (``first * NUM_TOOLS + second``)."""
    return first * NUM_TOOLS + second


# ----------------------------------------------------------------------------- actions
# The paper's numbering (Appendix A listing 3 and item 2.5): compass moves do not turn.
NORTH_ACTION, SOUTH_ACTION, EAST_ACTION, WEST_ACTION = 0, 1, 2, 3
TURN_LEFT_ACTION, TURN_RIGHT_ACTION = 4, 5
FIRE_ACTION = 6
STAY_ACTION = 7
PICK_UP_ACTION = 8
ZAP_ACTION = 9  # only with zap=True
NUM_BASE_ACTIONS = 9
ACTION_NAMES = (
    "north",
    "south",
    "east",
    "west",
    "turn_left",
    "turn_right",
    "fire",
    "stay",
    "pick_up",
    "zap",
)
# grid.py orientation code (NORTH=0, EAST=1, SOUTH=2, WEST=3) of each move action, -1 otherwise.
ACTION_MOVE_DIR = np.array([0, 2, 1, 3, -1, -1, -1, -1, -1, -1], np.int32)
ACTION_TURN = np.array([0, 0, 0, 0, -1, 1, 0, 0, 0, 0], np.int32)
# Move action that steps in each orientation (inverse of ACTION_MOVE_DIR on moves).
DIR_TO_ACTION = np.array([NORTH_ACTION, EAST_ACTION, SOUTH_ACTION, WEST_ACTION], np.int32)

# ----------------------------------------------------------------------------- dynamics
NUM_TRIALS = 5
TRIAL_STEPS = 400
APPLE_RATE = 0.05  # per empty orchard cell and step, on a fully clean river
POLLUTION_THRESHOLD = 0.4  # no growth once this share of river + stream cells is polluted
WASTE_SPAWN_START = 50  # waste may reappear from trial step 50 on (steps count from 0)
P_SPAWN = 0.1  # paper runs
SKEW = 1.0  # paper runs: reappearing waste always has the dominant hue
# Agent-zapping beam (reference option, off by default): a hit agent goes back to a spawn point
# and is frozen for this many steps (chosen: the value the paper gives for OpenHarvest's zap).
ZAP_FREEZE_STEPS = 12
EARLY_STEPS = 50  # "cells cleaned in the first 50 steps" metric

# ----------------------------------------------------------------------------- pools
DEFAULT_NUM_LAYOUTS = 256
DEFAULT_NUM_RULES = 100_000
DEFAULT_TRAIN_FRACTION = 0.8
LAYOUT_POOL_SEED = 0
RULE_POOL_SEED = 1
