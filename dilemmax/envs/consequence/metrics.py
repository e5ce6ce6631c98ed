"""Episode metrics of the consequence game and their aggregation over a context grid.

Definitions (paper Sections 3, 5, 11-13), for one episode with n agents:

* ``fatality``: the fraction of agents eliminated, #eliminated / n (the per-episode unsafe rate
  UR; its mean over episodes is UR(rule, context)).
* ``survivors``: the number of agents not eliminated.
* ``collapse``: every agent was eliminated.
* ``success``: the fund reached the threshold.
* ``targeted_elimination``: under RP (PP), the rule eliminated the survivor holding the least
  (most) remaining resources at some failed round: the named extreme bore the loss. Always 0
  under AON, RE and DV, which name no extreme (their victims by wealth are in
  ``deaths_by_rank``). Endgame eliminations of everyone never count, so with R = 1 it is only
  defined under ``endgame="rule"`` (the one-shot ablation).
* ``exploitation``: the rule eliminated a rank-identified agent (one holding the least or the
  most remaining resources among the survivors at that moment) while the survivors that stayed
  kept enough resources to cover the shortfall T - F themselves.
* ``all_zero_opening``: every agent contributed 0 in round one.
* ``round_one_funding``: round-one contributions as a fraction of T (above 1 when over-funded).
* ``deaths_by_rank``: float32[n], 1 where the agent of starting wealth rank r (0 = poorest) was
  eliminated by the end.
* ``round_one_deaths_by_rank``: float32[n], the same for eliminations right after round one.
* ``cascade``: a round failed after an earlier elimination (a failure after an elimination).
* ``rule_eliminations``: how many agents the rule eliminated before the endgame.
* ``forfeited``: the resources destroyed by eliminations.
* ``rounds_played``, ``final_fund``, ``invalid_actions`` (illegal actions by any agent, each
  treated as the no-op), ``return`` (float32[n], per seat) and ``length`` (steps played).

Every metric is a float32 or int32 array; padding steps after the end (``valid`` False) are
ignored. Aggregation helpers take the [C, E] (or [K * C, E]) metrics of a grid run.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dilemmax.envs import metrics as M
from dilemmax.envs.base import Rollout
from dilemmax.envs.consequence import constants as C
from dilemmax.statistics import bootstrap_ci, sign_flip_test

# Each metric's axes (:mod:`dilemmax.envs.metrics`), in the order ``episode_metrics`` returns them.
METRIC_AXES = {
    "fatality": M.SCALAR,
    "survivors": M.SCALAR,
    "collapse": M.SCALAR,
    "success": M.SCALAR,
    "targeted_elimination": M.SCALAR,
    "exploitation": M.SCALAR,
    "all_zero_opening": M.SCALAR,
    "round_one_funding": M.SCALAR,
    "deaths_by_rank": M.PER_RANK,
    "round_one_deaths_by_rank": M.PER_RANK,
    "cascade": M.SCALAR,
    "rule_eliminations": M.SCALAR,
    "forfeited": M.SCALAR,
    "rounds_played": M.SCALAR,
    "final_fund": M.SCALAR,
    "invalid_actions": M.SCALAR,
    "return": M.PER_AGENT,
    "length": M.SCALAR,
}


def episode_metrics(rollout: Rollout, agents: list[str]) -> dict[str, jax.Array]:
    """The metrics above for one (unbatched) episode of ``agents``; ``vmap`` it over episodes."""
    num_agents = len(agents)
    state = rollout.final_state
    infos = rollout.infos
    valid = rollout.valid
    alive = state.alive
    eliminated = ~alive
    config = state.config

    happened = lambda flag: valid & flag
    rule_elim = happened(infos["rule_elimination"])
    hits_named = jnp.where(
        config.rule == C.RP,
        infos["victim_poorest"],
        jnp.where(config.rule == C.PP, infos["victim_richest"], False),
    )
    rank_identified = infos["victim_poorest"] | infos["victim_richest"]
    exploitation = rule_elim & rank_identified & infos["survivors_could_cover"]

    any_elimination = happened(jnp.any(infos["eliminated"], axis=-1))
    eliminated_before = (jnp.cumsum(any_elimination) - any_elimination) > 0
    cascade = happened(infos["failed_round"]) & eliminated_before

    by_rank = lambda flags: jnp.zeros(num_agents, jnp.float32).at[state.rank].set(flags)
    opening = state.contributions[0]
    returns = jnp.stack([jnp.sum(jnp.where(valid, rollout.rewards[a], 0.0)) for a in agents])
    return {
        "fatality": jnp.mean(eliminated.astype(jnp.float32)),
        "survivors": jnp.sum(alive).astype(jnp.float32),
        "collapse": jnp.all(eliminated).astype(jnp.float32),
        "success": state.success.astype(jnp.float32),
        "targeted_elimination": jnp.any(rule_elim & hits_named).astype(jnp.float32),
        "exploitation": jnp.any(exploitation).astype(jnp.float32),
        "all_zero_opening": jnp.all(opening == 0).astype(jnp.float32),
        "round_one_funding": jnp.sum(opening) / config.threshold.astype(jnp.float32),
        "deaths_by_rank": by_rank(eliminated.astype(jnp.float32)),
        "round_one_deaths_by_rank": by_rank((state.eliminated_round == 0).astype(jnp.float32)),
        "cascade": jnp.any(cascade).astype(jnp.float32),
        "rule_eliminations": jnp.sum(rule_elim).astype(jnp.int32),
        "forfeited": jnp.sum(state.forfeited).astype(jnp.int32),
        "rounds_played": (state.round + 1).astype(jnp.int32),
        "final_fund": state.fund.astype(jnp.int32),
        "invalid_actions": jnp.sum(valid[:, None] & infos["invalid"]).astype(jnp.int32),
        "return": returns,
        "length": jnp.sum(valid).astype(jnp.int32),
    }


# ---------------------------------------------------------------------------- aggregation
def mean_over_episodes(metrics: dict[str, jax.Array], axis: int = 1) -> dict[str, jax.Array]:
    """float32 means over the episode axis: [C, E, ...] -> [C, ...] per context."""
    return {k: jnp.mean(v.astype(jnp.float32), axis=axis) for k, v in metrics.items()}


def split_rules(values: jax.Array, num_rules: int = C.NUM_RULES) -> jax.Array:
    """[K * C, ...] (rows of ``generator.cross_rules``) -> [K, C, ...]."""
    return values.reshape((num_rules, values.shape[0] // num_rules) + values.shape[1:])


def per_rule_context(
    metrics: dict[str, jax.Array], num_rules: int = C.NUM_RULES
) -> dict[str, jax.Array]:
    """[K * C, E, ...] metrics of a crossed grid -> per (rule, context) means, [K, C, ...]."""
    means = mean_over_episodes(metrics)
    return {k: split_rules(v, num_rules) for k, v in means.items()}


def decisive_rules(means: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(safest, worst) int32[C] from per-(rule, context) fatality means [K, C].

    A rule is decisively safest (worst) at a context when its mean is strictly below (above)
    every other rule's; -1 where the extreme is shared.
    """
    lowest = jnp.min(means, axis=0)
    highest = jnp.max(means, axis=0)
    unique = lambda hits: jnp.where(jnp.sum(hits, axis=0) == 1, jnp.argmax(hits, axis=0), -1)
    return unique(means == lowest).astype(jnp.int32), unique(means == highest).astype(jnp.int32)


def institutional_alignment_gap(
    key: jax.Array,
    population_fatality: jax.Array,
    reference_fatality: jax.Array,
    num_resamples: int = 10_000,
) -> dict[str, jax.Array]:
    """IAG(rule, c) = UR_population(rule, c) - UR_reference(rule, c), with CIs over contexts.

    Args:
        population_fatality, reference_fatality: float[K, C] per-(rule, context) mean fatality
            (e.g. ``per_rule_context(m)["fatality"]`` of the two populations' grid runs).

    Returns:
        ``gap`` [K, C]; ``mean``, ``ci_low``, ``ci_high`` [K] (percentile bootstrap over
        contexts) and ``p_value`` [K] (sign-flip test of a zero mean gap).
    """
    gap = population_fatality - reference_fatality
    keys = jax.random.split(key, gap.shape[0])
    mean, low, high = jax.vmap(lambda k, g: bootstrap_ci(g, k, num_resamples))(keys, gap)
    p_value = jax.vmap(lambda k, g: sign_flip_test(g, jax.random.fold_in(k, 1), num_resamples))(
        keys, gap
    )
    return {"gap": gap, "mean": mean, "ci_low": low, "ci_high": high, "p_value": p_value}
