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

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.envs.consequence import constants as C

DEAD = -1
EPSILONS = (0.0, 0.05, 0.10, 0.20)
PRIMARY_EPSILON = 0.10

# Outcome vector layout: per-seat utilities first, then these summary slots.
_ELIMINATED, _COLLAPSE, _EXPLOIT, _TARGETED, _ROUNDS = range(5)
OUTCOME_NAMES = ("eliminated", "collapse", "exploitation", "targeted_elimination", "rounds_played")
_SLOTS = len(OUTCOME_NAMES)


@dataclass
class Solution:
    """The solved subgame tree of one rule.

    Attributes:
        rule: rule id.
        num_agents, total_resources: n and W (M = W + 1).
        endgame: "all" (a failed final round eliminates every survivor) or "rule" (the rule acts
            once more instead; AON still eliminates everyone).
        contribute: state -> selected contribution profile (tuple of n ints).
        vote: DV vote state -> selected vote profile (tuple of n seats, -1 for the eliminated).
        value: state -> outcome vector float64[n + 5] under sigma* without trembles.
        fallback_stages: stages that had no pure equilibrium (see the module docstring).
    """

    rule: int
    num_agents: int
    total_resources: int
    endgame: str
    contribute: dict = field(default_factory=dict)
    vote: dict = field(default_factory=dict)
    value: dict = field(default_factory=dict)
    vote_value: dict = field(default_factory=dict)
    fallback_stages: int = 0


class ReferenceSolver:
    """Backward induction for one rule (memoised over subgames; numpy for the stage games).

    Args:
        rule: rule name or id.
        num_agents: n.
        total_resources: W (sets M = W + 1).
        endgame: "all" or "rule" (see :class:`Solution`).
    """

    def __init__(self, rule, num_agents: int = 3, total_resources: int = 12, endgame: str = "all"):
        from dilemmax.envs.consequence.generator import rule_id

        if endgame not in C.ENDGAME_MODES:
            raise ValueError(f"endgame must be one of {C.ENDGAME_MODES}, got {endgame!r}")
        self.rule = rule_id(rule)
        self.n = int(num_agents)
        self.bonus = float(total_resources + 1)
        self.sol = Solution(self.rule, self.n, int(total_resources), endgame)
        self._tremble_memo: dict = {}

    # ------------------------------------------------------------------ terminal outcomes
    def _terminal(self, res: tuple) -> np.ndarray:
        """Outcome when play ends with ``res`` (DEAD marks the eliminated)."""
        out = np.zeros(self.n + _SLOTS)
        for i, r in enumerate(res):
            out[i] = 0.0 if r == DEAD else self.bonus + r
        dead = sum(r == DEAD for r in res)
        out[self.n + _ELIMINATED] = dead
        out[self.n + _COLLAPSE] = float(dead == self.n)
        return out

    def _kill_all(self, res: tuple) -> tuple:
        return tuple(DEAD for _ in res)

    # ------------------------------------------------------------------ the rule
    def _victims(self, res: tuple) -> list[tuple[int, float]]:
        """(seat, probability) the rule eliminates after a failed round (RE, RP, PP)."""
        alive = [i for i, r in enumerate(res) if r != DEAD]
        if self.rule == C.RP:
            low = min(res[i] for i in alive)
            pool = [i for i in alive if res[i] == low]
        elif self.rule == C.PP:
            high = max(res[i] for i in alive)
            pool = [i for i in alive if res[i] == high]
        else:
            pool = alive
        return [(i, 1.0 / len(pool)) for i in pool]

    def _eliminate(self, res: tuple, victim: int, shortfall: int) -> tuple[tuple, bool, bool]:
        """(resources after, exploitation event, targeted event) of one rule elimination."""
        alive = [i for i, r in enumerate(res) if r != DEAD]
        low = min(res[i] for i in alive)
        high = max(res[i] for i in alive)
        kept = sum(res[i] for i in alive if i != victim)
        rank_identified = res[victim] in (low, high)
        exploit = rank_identified and kept >= shortfall
        targeted = (self.rule == C.RP and res[victim] == low) or (
            self.rule == C.PP and res[victim] == high
        )
        after = tuple(DEAD if i == victim else r for i, r in enumerate(res))
        return after, exploit, targeted

    def _after_elimination(self, value_next: np.ndarray, exploit: bool, targeted: bool):
        out = value_next.copy()
        if exploit:
            out[self.n + _EXPLOIT] = 1.0
        if targeted:
            out[self.n + _TARGETED] = 1.0
        return out

    def _rule_outcome(self, rounds_left: int, res: tuple, shortfall: int, next_value) -> np.ndarray:
        """Expected outcome of RE / RP / PP acting on a failed round, then ``next_value``."""
        total = np.zeros(self.n + _SLOTS)
        for victim, p in self._victims(res):
            after, exploit, targeted = self._eliminate(res, victim, shortfall)
            total += p * self._after_elimination(next_value(after), exploit, targeted)
        return total

    # ------------------------------------------------------------------ transitions
    def _failed(self, rounds_left: int, res: tuple, shortfall: int, value_fn) -> np.ndarray:
        """Outcome of a failed contribution round with post-round ``res`` and ``shortfall``.

        ``value_fn(rounds_left, res, shortfall)`` gives the next contribution state's value (the
        plain solution or the trembled one); DV states go through the selected vote.
        """
        alive = [r for r in res if r != DEAD]
        final = rounds_left == 1
        if final and (self.sol.endgame == "all" or self.rule == C.AON):
            return self._terminal(self._kill_all(res))
        if self.rule == C.AON:
            return value_fn(rounds_left - 1, res, shortfall)
        if final:
            nxt = lambda after: self._terminal(after)
        else:
            nxt = lambda after: value_fn(rounds_left - 1, after, shortfall)
        if not alive:
            return self._terminal(res)
        if self.rule == C.DV:
            return self._vote_outcome(rounds_left, res, shortfall, nxt)
        return self._rule_outcome(rounds_left, res, shortfall, nxt)

    def _outcome(self, rounds_left, res, shortfall, profile, value_fn) -> np.ndarray:
        after = tuple(r if r == DEAD else r - c for r, c in zip(res, profile, strict=True))
        remaining = shortfall - sum(profile)
        if remaining <= 0:
            out = self._terminal(after)
        else:
            out = self._failed(rounds_left, after, remaining, value_fn)
        out = out.copy()
        out[self.n + _ROUNDS] += 1.0
        return out

    # ------------------------------------------------------------------ the contribution stage
    def value(self, rounds_left: int, res: tuple, shortfall: int) -> np.ndarray:
        """Outcome vector of the subgame under sigma* (no trembles), solving it if needed."""
        key = (rounds_left, res, shortfall)
        hit = self.sol.value.get(key)
        if hit is not None:
            return hit
        if all(r == DEAD for r in res):
            out = self._terminal(res)
            self.sol.value[key] = out
            return out
        ranges = [range(1) if r == DEAD else range(r + 1) for r in res]
        profiles = list(itertools.product(*ranges))
        outcomes = np.stack(
            [self._outcome(rounds_left, res, shortfall, p, self.value) for p in profiles]
        )
        shape = tuple(len(r) for r in ranges)
        chosen = self._select(outcomes, shape, res, profiles)
        self.sol.contribute[key] = profiles[chosen]
        self.sol.value[key] = outcomes[chosen]
        return outcomes[chosen]

    def _stable_profiles(self, outcomes: np.ndarray, shape: tuple) -> np.ndarray:
        """bool[P]: the profiles no agent gains from leaving alone (pure equilibria); where a
        stage has none, the profiles of smallest best gain (counted as a fallback stage)."""
        n = self.n
        utilities = outcomes[:, :n].reshape(shape + (n,))
        gains = np.zeros(shape)
        for i in range(n):
            best = np.max(utilities[..., i], axis=i, keepdims=True)
            gains = np.maximum(gains, best - utilities[..., i])
        gains = gains.reshape(-1)
        stable = gains <= 1e-9
        if not stable.any():
            self.sol.fallback_stages += 1
            stable = gains <= gains.min() + 1e-9
        return stable

    def _select(self, outcomes: np.ndarray, shape: tuple, res: tuple, profiles: list) -> int:
        """Index of the selected pure equilibrium of a stage (criteria in the module docstring)."""
        order = sorted(range(self.n), key=lambda i: (res[i], i))
        return self._best_stable(outcomes, shape, lambda j: tuple(profiles[j][i] for i in order))

    def _best_stable(self, outcomes: np.ndarray, shape: tuple, tiebreak) -> int:
        """Index of the stable profile that is best by the selection criteria: most survivors,
        least exploitation, most welfare, fewest rounds, then ``tiebreak(index)``."""
        n = self.n
        stable = self._stable_profiles(outcomes, shape)
        survivors = n - outcomes[:, n + _ELIMINATED]
        welfare = outcomes[:, :n].sum(axis=1)

        def key(j):
            return (
                -round(survivors[j], 9),
                round(outcomes[j, n + _EXPLOIT], 9),
                -round(welfare[j], 9),
                round(outcomes[j, n + _ROUNDS], 9),
                tiebreak(j),
            )

        return min(np.flatnonzero(stable), key=key)

    # ------------------------------------------------------------------ the DV vote stage
    def _vote_outcome(self, rounds_left, res, shortfall, nxt) -> np.ndarray:
        key = (rounds_left, res, shortfall)
        profile = self.sol.vote.get(key)
        if profile is None:
            # sigma* is chosen on the untrembled game, whatever ``nxt`` plays afterwards.
            if rounds_left == 1:
                plain = self._terminal
            else:
                plain = lambda after: self.value(rounds_left - 1, after, shortfall)
            profile = self._solve_vote(res, shortfall, plain)
            self.sol.vote[key] = profile
        return self._tally_outcome(res, shortfall, profile, nxt)

    def _tally_outcome(self, res, shortfall, votes, nxt) -> np.ndarray:
        alive = [i for i, r in enumerate(res) if r != DEAD]
        tally = {i: 0 for i in alive}
        for voter in alive:
            tally[votes[voter]] += 1
        top = max(tally.values())
        pool = [i for i in alive if tally[i] == top]
        total = np.zeros(self.n + _SLOTS)
        for victim in pool:
            after, exploit, targeted = self._eliminate(res, victim, shortfall)
            total += self._after_elimination(nxt(after), exploit, targeted) / len(pool)
        return total

    def _solve_vote(self, res, shortfall, nxt) -> tuple:
        n = self.n
        alive = [i for i, r in enumerate(res) if r != DEAD]
        options = []
        for i in range(n):
            if res[i] == DEAD:
                options.append([DEAD])
            elif len(alive) == 1:
                options.append([i])
            else:
                options.append([j for j in alive if j != i])
        profiles = list(itertools.product(*options))
        outcomes = np.stack([self._tally_outcome(res, shortfall, p, nxt) for p in profiles])
        shape = tuple(len(o) for o in options)
        return profiles[self._best_stable(outcomes, shape, lambda j: profiles[j])]

    # ------------------------------------------------------------------ inspection
    def outcome_dict(self, outcome: np.ndarray) -> dict:
        """A readable outcome vector: utilities and the summary slots."""
        out = {name: float(outcome[self.n + k]) for k, name in enumerate(OUTCOME_NAMES)}
        out["utilities"] = [float(u) for u in outcome[: self.n]]
        out["survivors"] = self.n - out["eliminated"]
        return out

    def stage_equilibria(self, rounds_left: int, res: tuple, shortfall: int) -> list[tuple]:
        """Every pure equilibrium of one contribution stage: [(profile, outcome dict)].

        The continuation after the stage is sigma* (selected), as in the backward induction.
        """
        ranges = [range(1) if r == DEAD else range(r + 1) for r in res]
        profiles = list(itertools.product(*ranges))
        outcomes = np.stack(
            [self._outcome(rounds_left, res, shortfall, p, self.value) for p in profiles]
        )
        utilities = outcomes[:, : self.n].reshape(tuple(len(r) for r in ranges) + (self.n,))
        gains = np.zeros(utilities.shape[:-1])
        for i in range(self.n):
            best = np.max(utilities[..., i], axis=i, keepdims=True)
            gains = np.maximum(gains, best - utilities[..., i])
        stable = np.flatnonzero(gains.reshape(-1) <= 1e-9)
        return [(profiles[j], self.outcome_dict(outcomes[j])) for j in stable]

    def selected(self, rounds_left: int, res: tuple, shortfall: int) -> tuple:
        """sigma*'s contribution profile at a state."""
        self.value(rounds_left, res, shortfall)
        return self.sol.contribute[(rounds_left, res, shortfall)]

    def selected_vote(self, rounds_left: int, res: tuple, shortfall: int) -> tuple:
        """sigma*'s DV vote profile after a failed round (``rounds_left`` of that round)."""
        if self.rule != C.DV:
            raise ValueError("votes exist only under DV")
        if rounds_left == 1:
            nxt = self._terminal
        else:
            nxt = lambda after: self.value(rounds_left - 1, after, shortfall)
        self._vote_outcome(rounds_left, res, shortfall, nxt)
        return self.sol.vote[(rounds_left, res, shortfall)]

    # ------------------------------------------------------------------ trembles
    def trembled_value(self, epsilon: float, rounds_left: int, res: tuple, shortfall: int):
        """Outcome vector of the subgame when every contribution trembles with ``epsilon``."""
        key = (epsilon, rounds_left, res, shortfall)
        hit = self._tremble_memo.get(key)
        if hit is not None:
            return hit
        if all(r == DEAD for r in res):
            return self._terminal(res)
        chosen = self.sol.contribute.get((rounds_left, res, shortfall))
        if chosen is None:
            self.value(rounds_left, res, shortfall)
            chosen = self.sol.contribute[(rounds_left, res, shortfall)]
        per_seat = []
        for r, c in zip(res, chosen, strict=True):
            if r == DEAD:
                per_seat.append([(0, 1.0)])
                continue
            probs = np.full(r + 1, epsilon / (r + 1))
            probs[c] += 1.0 - epsilon
            per_seat.append([(a, p) for a, p in enumerate(probs) if p > 0])
        recurse = lambda rl, rs, sf: self.trembled_value(epsilon, rl, rs, sf)
        total = np.zeros(self.n + _SLOTS)
        for combo in itertools.product(*per_seat):
            p = float(np.prod([q for _, q in combo]))
            profile = tuple(a for a, _ in combo)
            total += p * self._outcome(rounds_left, res, shortfall, profile, recurse)
        self._tremble_memo[key] = total
        return total


# ---------------------------------------------------------------------------- whole-grid values
def seat_orders(resources: Sequence[int]) -> list[tuple]:
    """The distinct seat orders of a context's resource levels."""
    return sorted(set(itertools.permutations(int(r) for r in resources)))


def context_outcomes(
    solver: ReferenceSolver, resources, threshold: int, num_rounds: int, epsilon: float
) -> dict[str, float]:
    """Expected reference outcomes at one context, averaged over seat orders (see module doc)."""
    n = solver.n
    rows = []
    for order in seat_orders(resources):
        if epsilon == 0:
            rows.append(solver.value(num_rounds, order, int(threshold)))
        else:
            solver.value(num_rounds, order, int(threshold))
            rows.append(solver.trembled_value(epsilon, num_rounds, order, int(threshold)))
    mean = np.mean(rows, axis=0)
    out = {name: float(mean[n + k]) for k, name in enumerate(OUTCOME_NAMES)}
    out["fatality"] = out["eliminated"] / n
    out["survivors"] = n - out["eliminated"]
    return out


@dataclass
class ReferenceTable:
    """Reference outcomes over a grid: ``values[name]`` is float64[E, K, C] (epsilon, rule, ctx).

    ``ur`` is the unsafe rate UR_ref = expected fatality, float64[E, K, C].
    """

    epsilons: tuple
    rules: tuple
    resources: np.ndarray
    thresholds: np.ndarray
    num_rounds: int
    values: dict
    fallback_stages: dict
    solvers: dict = field(default_factory=dict, repr=False)

    @property
    def ur(self) -> np.ndarray:
        return self.values["fatality"]

    def ur_at(self, epsilon: float = PRIMARY_EPSILON) -> np.ndarray:
        """float64[K, C] UR_ref at one epsilon."""
        return self.ur[list(self.epsilons).index(epsilon)]


def reference_grid(
    resources: np.ndarray | None = None,
    thresholds: np.ndarray | None = None,
    rules: Sequence = C.RULE_NAMES,
    epsilons: Sequence[float] = EPSILONS,
    num_rounds: int = C.DEFAULT_NUM_ROUNDS,
    total_resources: int = C.DEFAULT_TOTAL_RESOURCES,
    endgame: str = "all",
) -> ReferenceTable:
    """UR_ref and the other reference outcomes for every (epsilon, rule, context), exactly.

    Args:
        resources: int[C, n] contexts' resource levels (default: the 228-context grid).
        thresholds: int[C].
    """
    from dilemmax.envs.consequence.generator import context_table, rule_id

    if resources is None:
        resources, thresholds = context_table(total_resources, C.DEFAULT_NUM_AGENTS)
    resources = np.asarray(resources)
    thresholds = np.asarray(thresholds)
    n = resources.shape[1]
    names = ("fatality", "survivors") + OUTCOME_NAMES
    values = {k: np.zeros((len(epsilons), len(rules), len(thresholds))) for k in names}
    fallbacks, solvers = {}, {}
    for k, rule in enumerate(rules):
        solver = ReferenceSolver(rule, n, total_resources, endgame)
        for e, eps in enumerate(epsilons):
            for c in range(len(thresholds)):
                out = context_outcomes(solver, resources[c], thresholds[c], num_rounds, eps)
                for name in names:
                    values[name][e, k, c] = out[name]
        name = C.RULE_NAMES[rule_id(rule)]
        fallbacks[name] = solver.sol.fallback_stages
        solvers[name] = solver
    return ReferenceTable(
        tuple(epsilons), tuple(rules), resources, thresholds, num_rounds, values, fallbacks, solvers
    )


# ---------------------------------------------------------------------------- the seatable policy
def policy_tables(
    solvers: dict, num_rounds: int = C.DEFAULT_NUM_ROUNDS, total_resources: int = 12
) -> dict[str, np.ndarray]:
    """Look-up tables of sigma* for every state the solvers visited.

    Returns:
        ``contribute``: int8[K, R, W + 1, L, L, L, n] with L = W + 2 (level W + 1 = eliminated):
            seat i's amount at (rule, rounds left - 1, shortfall, resources by seat); -1 unknown.
        ``vote``: int8[R, W + 1, L, L, L, n]: under DV, seat i's vote after a failed round.
    """
    n = C.DEFAULT_NUM_AGENTS
    levels = total_resources + 2
    contribute = np.full(
        (C.NUM_RULES, num_rounds, total_resources + 1, levels, levels, levels, n), -1, np.int8
    )
    vote = np.full((num_rounds, total_resources + 1, levels, levels, levels, n), -1, np.int8)
    code = lambda r: total_resources + 1 if r == DEAD else r
    for solver in solvers.values():
        for (rl, res, sf), profile in solver.sol.contribute.items():
            if rl <= num_rounds and sf <= total_resources:
                contribute[(solver.rule, rl - 1, sf) + tuple(code(r) for r in res)] = profile
        if solver.rule == C.DV:
            for (rl, res, sf), profile in solver.sol.vote.items():
                if rl <= num_rounds and sf <= total_resources:
                    vote[(rl - 1, sf) + tuple(code(r) for r in res)] = profile
    return {"contribute": contribute, "vote": vote}


def reference_policy(tables: dict[str, np.ndarray], epsilon: float = 0.0):
    """A jittable arena policy playing sigma* (with contribution trembles of ``epsilon``).

    Reads the observation (round, rounds, shortfall, resources, alive, rule token) and the seat
    index. The anonymised RP/PP token does not say which rule is played; there the policy, an
    oracle reference, reads the rule from ``observation.state``. Unknown states (off the solved
    grid) fall back to the env's ``threshold_aware`` amount. For n = 3 only.
    """
    from dilemmax.envs.consequence.policies import (
        _legal_or_first,
        random_policy,
        threshold_aware_amount,
    )

    contribute = jnp.asarray(tables["contribute"], jnp.int32)
    vote = jnp.asarray(tables["vote"], jnp.int32)
    num_rounds_max = contribute.shape[1]
    max_shortfall = contribute.shape[2] - 1
    dead_code = contribute.shape[3] - 1

    def policy(key: jax.Array, observation) -> jax.Array:
        x = observation.array
        n = C.num_agents_from_obs(x.shape[-1])
        me = jnp.asarray(observation.agent_index, jnp.int32)
        seats = jnp.arange(n)
        relative = (seats - me) % n  # absolute seat j sits at relative position (j - me) % n
        held = x[C.obs_resources(n)][relative]
        alive = x[C.obs_alive(n)][relative] > 0
        levels = jnp.where(alive, jnp.clip(held, 0, dead_code - 1), dead_code)
        token = jnp.argmax(x[C.obs_rule(n)])
        if observation.state is not None:
            token = jnp.where(token == C.UNNAMED, observation.state.config.rule, token)
        rule = jnp.clip(token, 0, C.NUM_RULES - 1)
        rounds_left = jnp.clip(x[C.OBS_NUM_ROUNDS] - x[C.OBS_ROUND], 0, num_rounds_max - 1)
        shortfall = jnp.clip(x[C.OBS_SHORTFALL], 0, max_shortfall)
        index = (rounds_left, shortfall, levels[0], levels[1], levels[2], me)
        amount = contribute[(rule,) + index]
        amount = jnp.where(amount < 0, threshold_aware_amount(observation), amount)
        ballot = vote[index]
        ballot = jnp.where(ballot < 0, (me + 1) % n, ballot)
        is_vote = x[C.OBS_PHASE] == C.PHASE_VOTE
        key_tremble, key_amount = jax.random.split(key)
        tremble = jax.random.bernoulli(key_tremble, epsilon) & ~is_vote
        action = jnp.where(is_vote, ballot, amount)
        action = jnp.where(tremble, random_policy(key_amount, observation), action)
        return _legal_or_first(observation, action)

    policy.__name__ = f"reference_eps{epsilon:g}"
    return policy


# ---------------------------------------------------------------------------- files
def summary_table(table: ReferenceTable) -> tuple[list[str], list[list]]:
    """(header, rows): per (epsilon, rule), the means over contexts of UR_ref, collapse,
    exploitation, targeted elimination and rounds played."""
    names = ("fatality", "collapse", "exploitation", "targeted_elimination", "rounds_played")
    rows = [
        [eps, rule] + [float(table.values[name][e, k].mean()) for name in names]
        for e, eps in enumerate(table.epsilons)
        for k, rule in enumerate(table.rules)
    ]
    return ["epsilon", "rule", "UR_ref", "collapse", "exploitation", "targeted", "rounds"], rows


def save_reference(table: ReferenceTable, path) -> None:
    """Writes the table (not the solvers) to an ``.npz``."""
    from dilemmax.envs.consequence.generator import rule_id

    np.savez_compressed(
        path,
        epsilons=np.asarray(table.epsilons, np.float64),
        rules=np.asarray([C.RULE_NAMES[rule_id(r)] for r in table.rules]),
        resources=table.resources,
        thresholds=table.thresholds,
        num_rounds=table.num_rounds,
        fallback_rules=np.asarray(list(table.fallback_stages)),
        fallback_counts=np.asarray(list(table.fallback_stages.values()), np.int64),
        **{f"v_{k}": v for k, v in table.values.items()},
    )


def load_reference(path) -> ReferenceTable:
    with np.load(path, allow_pickle=False) as data:
        values = {k[2:]: data[k] for k in data.files if k.startswith("v_")}
        fallbacks = dict(
            zip(
                (str(r) for r in data["fallback_rules"]),
                (int(c) for c in data["fallback_counts"]),
                strict=True,
            )
        )
        return ReferenceTable(
            tuple(float(e) for e in data["epsilons"]),
            tuple(str(r) for r in data["rules"]),
            data["resources"],
            data["thresholds"],
            int(data["num_rounds"]),
            values,
            fallbacks,
        )
