"""Scripted, jittable policies of the consequence game.

Each is ``policy(key, observation) -> int32 action`` and reads only ``observation.array`` (layout
in ``constants``), ``observation.mask`` and ``observation.agent_index``. The names of
``SCRIPTED_POLICIES`` are the CLI's ``--policy`` names:

* ``random``: uniform over the legal actions.
* ``all_zero``: never contributes (the free-riding opening of Section 4, played throughout).
* ``fair_share``: contributes its share of the shortfall in proportion to its holdings,
  ceil(S * w_i / sum of survivors' w); in round one this is ceil(T * w_i / W).
* ``threshold_aware``: the survivors cover exactly the shortfall, richest first: agents sorted
  by remaining resources (ties by seat) each give what the richer ones leave uncovered. All
  agents compute the same split, so a feasible threshold is met in round one with the least
  total spent and the poorest touched last.
* ``starve_then_cover``: contributes nothing in round one, then plays ``threshold_aware``: the
  rule acts on the starved first round, then the survivors fund the threshold if they can (under
  RP at w = (1, 5, 6), T = 10 this is the paper's canonical exploitation).
* ``cooperative_tremble``: ``threshold_aware`` with a trembling hand (epsilon = 0.10: a uniform
  legal action instead), the perturbation the paper's cooperative reference uses. It is not the
  paper's equilibrium reference, only its cooperative flavour.

In a DV vote phase every scripted policy except ``random`` votes for the other survivor that has
contributed least so far (ties: the one holding most, then the nearest seat after itself), or
for itself when it is the last survivor.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from dilemmax.envs.consequence import constants as C


def _fields(observation):
    """The observation vector split into named parts (per-agent parts in relative order)."""
    x = observation.array
    n = C.num_agents_from_obs(x.shape[-1])
    return {
        "n": n,
        "phase": x[C.OBS_PHASE],
        "round": x[C.OBS_ROUND],
        "num_rounds": x[C.OBS_NUM_ROUNDS],
        "shortfall": x[C.OBS_SHORTFALL],
        "resources": x[C.obs_resources(n)],
        "alive": x[C.obs_alive(n)] > 0,
        "contributed": x[C.obs_contributed(n)],
    }


def legal_or_first(observation, action: jax.Array) -> jax.Array:
    """``action`` if the mask allows it, else the lowest legal action."""
    mask = observation.mask
    safe = jnp.clip(action, 0, mask.shape[0] - 1)
    fallback = jnp.argmax(mask)
    return jnp.where(mask[safe], safe, fallback).astype(jnp.int32)


def _seat(observation, relative: jax.Array, n: int) -> jax.Array:
    """The seat (index in env.agents) at position ``relative`` of this agent's view."""
    return (observation.agent_index + relative) % n


def vote_least_contributor(observation) -> jax.Array:
    """int32 seat: the other survivor that gave least so far (see the module docstring)."""
    f = _fields(observation)
    n = f["n"]
    others = f["alive"] & (jnp.arange(n) > 0)
    # Least contributed, then most held, then the nearest relative position (argmax: first).
    given = jnp.where(others, f["contributed"], jnp.iinfo(jnp.int32).max)
    least = others & (f["contributed"] == jnp.min(given))
    held = jnp.where(least, f["resources"], -1)
    candidates = least & (f["resources"] == jnp.max(held))
    relative = jnp.where(jnp.any(others), jnp.argmax(candidates), 0)
    return _seat(observation, relative, n).astype(jnp.int32)


def _with_vote(observation, contribution: jax.Array) -> jax.Array:
    """The contribution in a contribution phase, the default vote in a vote phase."""
    vote = vote_least_contributor(observation)
    is_vote = _fields(observation)["phase"] == C.PHASE_VOTE
    return legal_or_first(observation, jnp.where(is_vote, vote, contribution))


def random_policy(key: jax.Array, observation) -> jax.Array:
    """Uniform over the legal actions."""
    logits = jnp.where(observation.mask, 0.0, -jnp.inf)
    return jax.random.categorical(key, logits).astype(jnp.int32)


def all_zero(key: jax.Array, observation) -> jax.Array:
    """Contributes 0 every round."""
    del key
    return _with_vote(observation, jnp.int32(0))


def fair_share_amount(observation) -> jax.Array:
    """int32: ceil(shortfall * own / survivors' holdings), at most what the agent holds."""
    f = _fields(observation)
    own = f["resources"][0]
    held = jnp.sum(jnp.where(f["alive"], f["resources"], 0))
    share = -((-f["shortfall"] * own) // jnp.maximum(held, 1))  # integer ceiling
    return jnp.clip(share, 0, own).astype(jnp.int32)


def fair_share(key: jax.Array, observation) -> jax.Array:
    """Contributes its proportional share of the shortfall."""
    del key
    return _with_vote(observation, fair_share_amount(observation))


def threshold_aware_amount(observation) -> jax.Array:
    """int32: this agent's part when survivors cover the shortfall richest-first."""
    f = _fields(observation)
    n = f["n"]
    own = f["resources"][0]
    seats = _seat(observation, jnp.arange(n), n)
    my_seat = seats[0]
    ahead = f["alive"] & ((f["resources"] > own) | ((f["resources"] == own) & (seats < my_seat)))
    covered_by_richer = jnp.sum(jnp.where(ahead, f["resources"], 0))
    return jnp.clip(f["shortfall"] - covered_by_richer, 0, own).astype(jnp.int32)


def threshold_aware(key: jax.Array, observation) -> jax.Array:
    """Gives exactly what the richer survivors leave of the shortfall."""
    del key
    return _with_vote(observation, threshold_aware_amount(observation))


def starve_then_cover(key: jax.Array, observation) -> jax.Array:
    """0 in round one, then ``threshold_aware``."""
    del key
    later = _fields(observation)["round"] > 1
    return _with_vote(observation, jnp.where(later, threshold_aware_amount(observation), 0))


def trembling(policy, epsilon: float):
    """``policy`` that, with probability ``epsilon``, plays a uniform legal action instead."""

    def trembling_policy(key: jax.Array, observation) -> jax.Array:
        key_tremble, key_random, key_policy = jax.random.split(key, 3)
        tremble = jax.random.bernoulli(key_tremble, epsilon)
        return jnp.where(
            tremble, random_policy(key_random, observation), policy(key_policy, observation)
        ).astype(jnp.int32)

    trembling_policy.__name__ = f"{getattr(policy, '__name__', 'policy')}_tremble"
    return trembling_policy


cooperative_tremble = trembling(threshold_aware, 0.10)

SCRIPTED_POLICIES: dict[str, Callable] = {
    "random": random_policy,
    "all_zero": all_zero,
    "fair_share": fair_share,
    "threshold_aware": threshold_aware,
    "starve_then_cover": starve_then_cover,
    "cooperative_tremble": cooperative_tremble,
}
