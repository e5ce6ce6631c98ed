"""The consequence game's elimination mechanics, as pure functions of the state and the step's
draw (:class:`~dilemmax.envs.consequence.env.ConsequenceEnv`'s ``step_env`` composes them): who a
rule eliminates, what the metrics learn about it, the removal itself, and the step's events.

Every choice among seats is one float32 uniform per step (:func:`pick_uniform`) and every write
a select (:func:`set_row`): no gather or scatter under vmap.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dilemmax.envs import unrolled
from dilemmax.envs.consequence import constants as C
from dilemmax.envs.consequence.types import ConsequenceState


def rule_victim(draw, rule, alive, resources) -> jax.Array:
    """bool[n]: the survivor RE, RP or PP would eliminate (ties and RE drawn uniformly by
    ``draw``, the step's float32[] uniform)."""
    lowest = unrolled.minimum(jnp.where(alive, resources, jnp.iinfo(jnp.int32).max))
    highest = unrolled.maximum(jnp.where(alive, resources, -1))
    candidates = jnp.select(
        [rule == C.RP, rule == C.PP], [resources == lowest, resources == highest], True
    )
    return pick_uniform(draw, alive & candidates)


def elimination_event(state: ConsequenceState, victims, by_rule) -> dict:
    """What metrics need about a rule elimination, judged before the victim leaves.

    A victim is rank-identified when it held the least or the most remaining resources among
    the survivors; the survivors could cover when what they keep reaches the shortfall.
    """
    alive = state.alive
    by_rule = by_rule & unrolled.any_(victims)
    lowest = unrolled.minimum(jnp.where(alive, state.resources, jnp.iinfo(jnp.int32).max))
    highest = unrolled.maximum(jnp.where(alive, state.resources, -1))
    kept = unrolled.total(jnp.where(alive & ~victims, state.resources, 0))
    shortfall = state.config.threshold - state.fund
    return {
        "rule_elimination": by_rule,
        "victim_poorest": by_rule & unrolled.any_(victims & (state.resources == lowest)),
        "victim_richest": by_rule & unrolled.any_(victims & (state.resources == highest)),
        "survivors_could_cover": by_rule & (kept >= shortfall),
    }


def eliminate(state: ConsequenceState, victims, endgame) -> ConsequenceState:
    """Removes ``victims`` (bool[n]); their remaining resources are forfeited."""
    return state.replace(
        alive=state.alive & ~victims,
        resources=jnp.where(victims, 0, state.resources),
        forfeited=jnp.where(victims, state.resources, state.forfeited),
        eliminated_round=jnp.where(victims, state.round, state.eliminated_round),
        endgame=state.endgame | (victims & endgame),
    )


def step_infos(old, new, contributions, votes, event) -> dict:
    """The fixed-structure events of one step (see ``metrics`` for how they are used)."""
    return {
        "round": old.round,
        "phase": old.phase,
        "contributions": contributions,
        "votes": votes,
        "fund": new.fund,
        "eliminated": old.alive & ~new.alive,
        "resources": new.resources,
        **event,
    }


def pick_uniform(u: jax.Array, candidates: jax.Array) -> jax.Array:
    """bool[n]: one of the True entries of ``candidates``, uniformly (all False if none), picked
    by ``u``, a float32[] uniform in [0, 1)."""
    count = unrolled.total(candidates)
    # The draw picks the k-th candidate, k uniform in 0..count - 1.
    k = jnp.floor(u * count).astype(jnp.int32)  # 0..count
    # An identity (0 <= k <= count) that makes XLA compute k once. Its CPU fusion copies cheap
    # elementwise work into every consumer, so the hash behind ``u`` and the tally behind
    # ``count`` were recomputed in each of the dozen state leaves the victim reaches; an integer
    # remainder by a traced divisor is an op it rates expensive and never duplicates, so k is
    # stored once. (+17% for vmap(env.step) at 65,536 envs; benchmarks/results/fast_envs.md.)
    k = jax.lax.rem(k, count + 1)
    k = jnp.minimum(k, count - 1)
    return candidates & (unrolled.cumsum(candidates) - 1 == k)


def set_row(table: jax.Array, row: jax.Array, values: jax.Array) -> jax.Array:
    """``table.at[row].set(values)`` as a select (no scatter under vmap; an out-of-range row
    changes nothing, as the scatter drops it)."""
    hit = jnp.arange(table.shape[0])[:, None] == row
    return jnp.where(hit, values[None, :], table)
