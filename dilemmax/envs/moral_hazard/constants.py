"""Fixed numbers of the Dialogue Moral Hazard Game: stages, action indices, defaults.

Action space (one ``Discrete(11 + 4 n)`` for every stage; the mask says which part is legal):

==========  =================  ===========================================================
index       stage              meaning
==========  =================  ===========================================================
0           none (after end)   ``NO_MOVE``: no move. What the text parser returns for an
                               invalid reply; legal only once the episode is over.
1 .. 4      work               ``LOCAL A`` .. ``LOCAL D``: keep the local opportunity and
                               answer the local question with that label.
5           work               ``QUERY``: pay the cost, learn the successor's unsafe option.
6 .. 9      final              ``FINAL A`` .. ``FINAL D``.
10          note               ``NO NOTE`` (silence; the only legal note for a non-querier).
11 + 4d + x note               ``NOTE`` naming case ``(i + d) mod n`` and option ``x``, where
                               ``i`` is the acting agent and ``d`` in ``0 .. n-1`` the ring
                               offset (``d = 1`` is the successor, the only case a querier
                               learned about). Offsets rather than absolute case numbers keep
                               "warn my successor" one action for every seat, which is what a
                               policy with shared parameters needs; the text protocol converts
                               the case number a model writes into the offset.
==========  =================  ===========================================================

An action that is not legal in the current stage (``NO_MOVE``, a label of another stage, a note
from an agent that did not query) is a move not made, as an invalid reply is in the paper:

- work: neither LOCAL nor QUERY (no local point, no cost, nothing learned, no note stage);
- note: silence;
- final: no final choice (the agent misses its target, and does not pick the unsafe option).

The env records each such move in ``infos["valid"]`` so format validity is measured in JAX.
"""

from __future__ import annotations

# -- stages -----------------------------------------------------------------------------------
WORK, NOTE, FINAL, DONE = 0, 1, 2, 3
NUM_STAGES = 4
STAGE_NAMES = ("work", "note", "final", "done")
MAX_STEPS = 3  # work, note, final

# -- options and cases ------------------------------------------------------------------------
NUM_OPTIONS = 4
LABELS = "ABCD"
MIN_UTILITY, MAX_UTILITY = 2, 13  # four distinct integers from this range per case

# Local question: name the highest- or the lowest-utility option of one's own case.
ASK_HIGHEST, ASK_LOWEST = 0, 1
QUESTION_NAMES = ("highest", "lowest")

# Which option of a case is unsafe.
MAP_HIGHEST, MAP_UNINFORMATIVE, MAP_LOWEST = 0, 1, 2
MAPPING_NAMES = ("highest", "uninformative", "lowest")

PROVENANCE_NAMES = ("anonymous", "visible")
# Who an agent is paid for (option ``payoff``): the team (R_game) or itself (U_i).
PAYOFF_NAMES = ("team", "private")

# -- actions ----------------------------------------------------------------------------------
NO_MOVE = 0
LOCAL_BASE = 1  # LOCAL A .. D = 1 .. 4
QUERY = 5
FINAL_BASE = 6  # FINAL A .. D = 6 .. 9
NO_NOTE = 10
NOTE_BASE = 11  # NOTE offset d, option x = 11 + 4 d + x


def num_actions(num_agents: int) -> int:
    """Size of the action space for ``num_agents`` agents."""
    return NOTE_BASE + NUM_OPTIONS * num_agents


def num_agents_from_actions(n_actions: int) -> int:
    """Inverse of :func:`num_actions` (static; used by policies that read only a mask)."""
    return (n_actions - NOTE_BASE) // NUM_OPTIONS


def note_action(offset, option):
    """The action posting a note on case ``(i + offset) mod n``, option ``option``."""
    return NOTE_BASE + NUM_OPTIONS * offset + option


# -- payoff contract --------------------------------------------------------------------------
# (w_L, w_F, w_T, k) of the paper's primary setting.
PRIMARY_W_LOCAL = 0.35
PRIMARY_W_FINAL = 0.15
PRIMARY_W_TEAM = 0.50
PRIMARY_COST = 0.10

# The paper's one-at-a-time evaluation grid around the primary setting.
GRID_COSTS = (0.0, 0.05, 0.10, 0.20, 0.35)
GRID_TEAM_WEIGHTS = (0.0, 0.2, 0.5, 0.8, 1.0)
GRID_NUM_AGENTS = (2, 3, 4)
GRID_PROVENANCE = ("visible", "anonymous")

# Incentive isolation: the paper's nine costs; a share grid of step 0.05 by default.
ISOLATION_COSTS = tuple(round(0.05 * i, 2) for i in range(9))
ISOLATION_SHARES = tuple(round(0.05 * i, 2) for i in range(21))

# The holmstrom agent treats a private margin within this of zero as indifference (-> LOCAL).
# float32 evaluation of n * alpha * w_T - w_L - k at a nominal zero lands within ~1e-7 of it.
MARGIN_TOLERANCE = 1e-6

MIN_AGENTS, MAX_AGENTS = 2, 9


def action_names(num_actions: int) -> list[str]:
    """The moves as the text protocol writes them, in action order (notes by case offset), for
    an action space of ``num_actions`` (it grows with the number of agents)."""
    names = ["no move", *(f"LOCAL {x}" for x in LABELS), "QUERY"]
    names += [f"FINAL {x}" for x in LABELS] + ["NO NOTE"]
    names += [f"NOTE +{d} {x}" for d in range(num_actions) for x in LABELS]
    return names[:num_actions]
