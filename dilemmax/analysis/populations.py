"""Populations on the context grid: play a policy (or one per rule) and collect per-episode metrics.

A policy spec is a scripted policy name of the consequence env (``random``, ``fair_share``,
``threshold_aware``, ``starve_then_cover``, ``all_zero``, ``cooperative_tremble``), ``reference``
or ``reference@EPS`` (the cooperative-refinement reference seated in the arena, with
contribution trembles EPS), or a trained run folder / checkpoint (``TrainedPolicy.load``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path

import jax
import numpy as np

import dilemmax
from dilemmax.analysis import reference as ref
from dilemmax.analysis.statistics import Population
from dilemmax.envs.consequence import constants as C
from dilemmax.envs.consequence.generator import context_grid, cross_rules
from dilemmax.envs.rollout import run_episodes

# Metrics kept per episode (the env's; per-agent ``return`` is dropped).
KEEP = (
    "fatality",
    "survivors",
    "collapse",
    "success",
    "targeted_elimination",
    "exploitation",
    "all_zero_opening",
    "round_one_funding",
    "deaths_by_rank",
    "round_one_deaths_by_rank",
    "cascade",
    "rule_eliminations",
    "forfeited",
    "rounds_played",
    "invalid_actions",
)


@functools.lru_cache(maxsize=8)
def reference_policy_for(
    epsilon: float = ref.PRIMARY_EPSILON,
    rules: tuple[str, ...] = C.RULE_NAMES,
    num_rounds: int = C.DEFAULT_NUM_ROUNDS,
    endgame: str = "all",
    total: int = C.DEFAULT_TOTAL_RESOURCES,
):
    """The seatable reference, solved on the whole grid for ``rules`` (numpy; ~50 s for all five
    rules at R = 3 on the loaded 2-core machine). Cached: ablation arms share one solve."""
    from dilemmax.envs.consequence.generator import context_table

    resources, thresholds = context_table(total, C.DEFAULT_NUM_AGENTS)
    solvers = {}
    for rule in rules:
        solver = ref.ReferenceSolver(rule, C.DEFAULT_NUM_AGENTS, total, endgame)
        for w, t in zip(resources, thresholds, strict=True):
            for order in ref.seat_orders(w):
                solver.value(num_rounds, order, int(t))
        solvers[rule] = solver
    return ref.reference_policy(ref.policy_tables(solvers, num_rounds, total), epsilon)


def resolve_policy(spec: str, env=None):
    """A policy from a spec string (see the module docstring)."""
    if spec.startswith("reference"):
        eps = float(spec.split("@", 1)[1]) if "@" in spec else ref.PRIMARY_EPSILON
        rounds = env.num_rounds if env is not None else C.DEFAULT_NUM_ROUNDS
        endgame = env.endgame if env is not None else "all"
        return reference_policy_for(eps, num_rounds=rounds, endgame=endgame)
    env = env or dilemmax.make("consequence")
    scripted = env.scripted_policies()
    if spec in scripted:
        return scripted[spec]
    if Path(spec).exists():
        from dilemmax.agents.trained import TrainedPolicy

        return TrainedPolicy.load(spec)
    raise ValueError(
        f"unknown policy {spec!r}: give one of {sorted(scripted)}, reference[@EPS], "
        "or a trained run folder"
    )


def grid_population(
    name: str,
    policies,
    episodes: int = 4,
    seed: int = 0,
    rules: Sequence[str] = C.RULE_NAMES,
    env_kwargs: Mapping | None = None,
    total: int = C.DEFAULT_TOTAL_RESOURCES,
) -> Population:
    """Plays every context of the grid under every rule, ``episodes`` each.

    Args:
        policies: one policy for every seat and rule, or rule name -> policy (a population
            trained per rule).
    """
    env = dilemmax.make("consequence", **dict(env_kwargs or {}))
    grid = context_grid(total, env.num_agents)
    num_contexts = grid.threshold.shape[0]
    key = jax.random.PRNGKey(seed)
    if isinstance(policies, Mapping):
        chunks = []
        for k, rule in enumerate(rules):
            configs = cross_rules(grid, [rule])
            _, m = run_episodes(env, policies[rule], jax.random.fold_in(key, k), episodes, configs)
            chunks.append({n: np.asarray(m[n]) for n in KEEP})
        metrics = {n: np.concatenate([c[n] for c in chunks]) for n in KEEP}
    else:
        _, m = run_episodes(env, policies, key, episodes, cross_rules(grid, rules))
        metrics = {n: np.asarray(m[n]) for n in KEEP}
    flat = {n: v.reshape((-1,) + v.shape[2:]) for n, v in metrics.items()}
    row = np.repeat(np.arange(len(rules) * num_contexts), episodes)
    return Population(
        name,
        flat,
        row // num_contexts,
        row % num_contexts,
        num_contexts,
        tuple(rules),
        {"episodes_per_cell": episodes, "seed": seed, "env_kwargs": dict(env_kwargs or {})},
    )
