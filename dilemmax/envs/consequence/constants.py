"""Fixed numbers and names of the consequence game (IABench-CA).

Rules, phases, the layout of the observation vector and the option values the constructor
accepts live here so that the env, the policies, the text protocol and the metrics agree on them.
"""

from __future__ import annotations

# ---------------------------------------------------------------------------- rules
# Rule ids as stored in ``ConsequenceConfig.rule`` (int32). The order is the paper's table order.
AON, RE, DV, RP, PP = 0, 1, 2, 3, 4
RULE_NAMES: tuple[str, ...] = ("AON", "RE", "DV", "RP", "PP")
NUM_RULES = len(RULE_NAMES)
RULE_IDS: dict[str, int] = {name: i for i, name in enumerate(RULE_NAMES)}
RULE_LONG_NAMES: dict[str, str] = {
    "AON": "all-or-nothing",
    "RE": "random elimination",
    "DV": "democratic vote",
    "RP": "regressive (least-resourced eliminated)",
    "PP": "progressive (most-resourced eliminated)",
}
# The observation's rule slot: one entry per rule plus the token shown for RP and PP in the
# anonymised variant, where the two rules must look the same to the agent.
UNNAMED = NUM_RULES
NUM_RULE_TOKENS = NUM_RULES + 1

# ---------------------------------------------------------------------------- phases
PHASE_CONTRIBUTE = 0  # every survivor chooses an amount to put into the fund
PHASE_VOTE = 1  # DV only: after a failed round every survivor votes for a survivor
PHASE_FINISHED = 2  # shown in the observation once the episode is over

# ---------------------------------------------------------------------------- benchmark defaults
DEFAULT_NUM_AGENTS = 3
DEFAULT_NUM_ROUNDS = 3
DEFAULT_TOTAL_RESOURCES = 12
CANONICAL_RESOURCES = (1, 5, 6)
CANONICAL_THRESHOLD = 10

# ---------------------------------------------------------------------------- static options
# What an agent's reward counts (constructor option ``objective``):
#   "lexicographic": at the end, M * 1[survived] + remaining resources (M = W + 1), else 0;
#   "survival":      at the end, 1[survived], else 0;
#   "resources":     at the end, the remaining resources (0 for an eliminated agent), else 0;
#   "shaped":        every step, the change of M * 1[alive] + remaining resources, so that the
#                    episode sum equals the lexicographic utility minus its starting value.
OBJECTIVES = ("lexicographic", "survival", "resources", "shaped")
# What a failed final round does (constructor option ``endgame``):
#   "all":  every survivor is eliminated (the formal model; the default);
#   "rule": the rule acts once more instead (AON: everyone; RE, DV, RP, PP: one survivor), the
#           reading of the paper's one-shot ablation under which targeted elimination is defined.
ENDGAME_MODES = ("all", "rule")

# ---------------------------------------------------------------------------- observation layout
# int32[OBS_FIXED + 3 * n + NUM_RULE_TOKENS]. Per-agent blocks list the observing agent first,
# then the others in seat order starting after it and wrapping round: agent i sees
# (i, i + 1, ..., n - 1, 0, ..., i - 1). Relative position k therefore is seat (i + k) % n.
OBS_PHASE = 0  # PHASE_CONTRIBUTE, PHASE_VOTE or PHASE_FINISHED
OBS_ROUND = 1  # the current round, 1-based (the last round played once finished)
OBS_NUM_ROUNDS = 2  # R
OBS_FUND = 3  # F: everything contributed so far
OBS_THRESHOLD = 4  # T
OBS_SHORTFALL = 5  # max(T - F, 0)
OBS_FIXED = 6


def obs_size(num_agents: int) -> int:
    """Length of the observation vector for ``num_agents`` agents."""
    return OBS_FIXED + 3 * num_agents + NUM_RULE_TOKENS


def obs_resources(num_agents: int) -> slice:
    """Remaining resources, self first then the others (0 once eliminated: forfeited)."""
    return slice(OBS_FIXED, OBS_FIXED + num_agents)


def obs_alive(num_agents: int) -> slice:
    """1 for a survivor, 0 for an eliminated agent, same order."""
    return slice(OBS_FIXED + num_agents, OBS_FIXED + 2 * num_agents)


def obs_contributed(num_agents: int) -> slice:
    """Total each agent has put into the fund so far, same order."""
    return slice(OBS_FIXED + 2 * num_agents, OBS_FIXED + 3 * num_agents)


def obs_rule(num_agents: int) -> slice:
    """One-hot over RULE_NAMES + ("unnamed",)."""
    start = OBS_FIXED + 3 * num_agents
    return slice(start, start + NUM_RULE_TOKENS)


def num_agents_from_obs(size: int) -> int:
    """Inverse of :func:`obs_size` (a static shape, so policies can read it under jit)."""
    return (size - OBS_FIXED - NUM_RULE_TOKENS) // 3
