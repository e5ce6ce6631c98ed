"""The Shared Well's fixed sizes and action encoding.

Action ``a`` (0 .. MAX_TAKE) asks the well for ``a`` units this round; 0 (take nothing) is always
legal, and an action is legal while the well holds at least that much.
"""

MAX_TAKE = 3  # the most one agent may ask for in a round
NUM_ACTIONS = MAX_TAKE + 1  # actions 0 .. MAX_TAKE
MIN_AGENTS, MAX_AGENTS = 2, 4
OBS_SIZE = 5  # see SharedWellEnv.get_obs
