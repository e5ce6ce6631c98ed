"""The backward-induction solver of the cooperative-refinement reference (the method is
described in :mod:`dilemmax.redteam.reference`)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from dilemmax.envs.consequence import constants as C
from dilemmax.envs.consequence.generator import rule_id

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
