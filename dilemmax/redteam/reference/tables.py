"""The reference over a whole grid of contexts (expected outcomes per context, the table saved to
and loaded from a file) and the reference as a seatable jittable policy."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.envs.consequence import constants as C
from dilemmax.envs.consequence.generator import context_table, rule_id
from dilemmax.envs.consequence.policies import (
    legal_or_first,
    random_policy,
    threshold_aware_amount,
)
from dilemmax.redteam.files import NpzChecks, read_npz
from dilemmax.redteam.reference.solver import (
    DEAD,
    EPSILONS,
    OUTCOME_NAMES,
    PRIMARY_EPSILON,
    ReferenceSolver,
)


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
        return legal_or_first(observation, action)

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


REFERENCE_HOLDS = (
    "a reference file holds epsilons, rules, resources, thresholds, num_rounds, fallback_rules, "
    "fallback_counts and v_<outcome> arrays, as `dilemmax redteam reference` writes them"
)


def load_reference(path, what: str = "reference file") -> ReferenceTable:
    """The table saved at ``path`` by :func:`save_reference`, every array checked first: a
    :class:`~dilemmax.redteam.files.FileFormatError` naming the file (as ``what``) and what was
    wrong otherwise."""
    file, arrays = read_npz(path, what)
    check = NpzChecks(file, what, arrays, REFERENCE_HOLDS)
    epsilons = check.get("epsilons", "number", ndim=1)
    if not epsilons.size or ((epsilons < 0) | (epsilons > 1)).any():
        raise check.fail(f"epsilons {epsilons.tolist()}: expected one or more rates in [0, 1]")
    if len(set(epsilons.tolist())) != len(epsilons):  # the gap report is keyed by epsilon
        raise check.fail(f"epsilons {epsilons.tolist()} repeat a rate")
    rules = check.names("rules")
    unknown = [r for r in rules if r.upper() not in C.RULE_NAMES]
    if unknown:
        raise check.fail(f"rules {unknown} are not rules of the game ({list(C.RULE_NAMES)})")
    thresholds = check.get("thresholds", "int", ndim=1)
    if not thresholds.size:
        raise check.fail("array 'thresholds' is empty (no contexts)")
    resources = check.get("resources", "int", ndim=2, shape=thresholds.shape)
    shape = (len(epsilons), len(rules), len(thresholds))
    values = {
        key[2:]: check.get(key, "number", ndim=3, shape=shape)
        for key in arrays
        if key.startswith("v_")
    }
    check.get("v_fatality", "number")  # UR_ref: the one outcome every use of the table reads
    fallback_rules = check.get("fallback_rules", "str", ndim=1)
    fallback_counts = check.get("fallback_counts", "int", shape=fallback_rules.shape)
    return ReferenceTable(
        tuple(float(e) for e in epsilons),
        rules,
        resources,
        thresholds,
        check.int_scalar("num_rounds", minimum=1),
        values,
        dict(zip(map(str, fallback_rules), map(int, fallback_counts), strict=True)),
    )
