"""The cooperative-refinement reference of the consequence game (paper Appendix 11).

For each rule the reference plays a subgame-perfect equilibrium of the game under the survival-
lexicographic utility u_i = M * 1[i survives] + w_i^end (M = W + 1 > W), found by backward
induction, and selected in every subgame by, in order:

1. the most expected survivors;
2. the least probability of exploitation (a rule elimination of a survivor holding the least or
   the most remaining resources while the survivors that stay keep enough to cover the
   shortfall, the env's ``exploitation`` event);
3. the largest sum of expected utilities (no wasted contributions);
4. the fewest expected rounds (fund the threshold as early as the equilibrium allows: waiting
   costs nothing without trembles but exposes play to more of them);
5. a fixed order on the remaining ties: with the seats sorted by remaining resources (poorest
   first, equal holdings by seat), the lexicographically smallest contribution vector, i.e. the
   poorer give as little as possible and the richer cover first. Votes: the lexicographically
   smallest vote vector by seat.

(Criteria 1-4 compare expectations without trembles.)

The state of a subgame is (rounds left, remaining resources per seat with eliminated seats marked,
shortfall T - F). It does not depend on the starting context, so one memo serves all 228 contexts
of a rule, and a context's value is read at its starting state.

Each stage is a simultaneous-move game whose payoffs are the expected continuation utilities. Its
pure Nash equilibria are enumerated exactly (every joint contribution profile, every unilateral
deviation). If a stage had none, the profile with the smallest largest unilateral gain would be
played (an approximate equilibrium) and counted in ``Solution.fallback_stages``; on the benchmark
grid (n = 3, W = 12, R <= 3) this count is 0 for every rule (see the tests).

The DV vote. After a failed non-final round under DV every survivor votes; plurality eliminates,
ties are drawn uniformly (as in the env). Voting for oneself is weakly dominated, so each voter
votes for another survivor (a lone survivor votes for itself); among these undominated profiles
the pure equilibria of the vote stage (no voter can gain by switching its vote) are selected by
the same criteria. Every equilibrium of this stage eliminates exactly one survivor, so criterion 1
judges the continuation: the vote spares the agents whose holdings keep the threshold reachable.

Trembling hand. The selected profile sigma* is fixed (computed without noise); play is perturbed
at every contribution: with probability epsilon a survivor contributes an amount drawn uniformly
from 0..(its remaining resources) instead of sigma*'s amount. Votes are not perturbed (the paper's
tremble is "contributes a uniform feasible amount"). UR_ref(rule, c) = E[# eliminated] / n is
computed exactly by enumerating the tremble tree (every joint amount with its probability, every
random elimination), averaged over the seat orders of the context's resources (the env draws
seats at random, and tie-break 5 uses seat order).

The reference is also a seatable policy: :func:`reference_policy` turns the solved tables into a
jittable ``policy(key, observation) -> action`` for the arena (look-up tables as arrays).
"""

from dilemmax.redteam.reference.solver import (
    DEAD,
    EPSILONS,
    OUTCOME_NAMES,
    PRIMARY_EPSILON,
    ReferenceSolver,
    Solution,
)
from dilemmax.redteam.reference.tables import (
    ReferenceTable,
    context_outcomes,
    load_reference,
    policy_tables,
    reference_grid,
    reference_policy,
    save_reference,
    seat_orders,
    summary_table,
)

__all__ = [
    "DEAD",
    "EPSILONS",
    "OUTCOME_NAMES",
    "PRIMARY_EPSILON",
    "ReferenceSolver",
    "ReferenceTable",
    "Solution",
    "context_outcomes",
    "load_reference",
    "policy_tables",
    "reference_grid",
    "reference_policy",
    "save_reference",
    "seat_orders",
    "summary_table",
]
