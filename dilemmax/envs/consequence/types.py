"""Configuration and state pytrees of the consequence game.

``n`` is the number of agents and ``R`` the number of rounds (both static). A batched
configuration (say the 228-context grid) has an extra leading axis on every leaf.
"""

from __future__ import annotations

import jax
from flax import struct


@struct.dataclass
class ConsequenceConfig:
    """One context c = (w, T) and one consequence rule.

    Attributes:
        resources: int32[n], the starting resources w_1 <= ... <= w_n in ascending order: entry r
            is the resource level of wealth rank r (0 = poorest). Which seat holds which level is
            decided at reset (see ``ConsequenceState.rank``).
        threshold: int32[], T, with 1 <= T <= sum(resources).
        rule: int32[], one of constants.AON, RE, DV, RP, PP.
    """

    resources: jax.Array
    threshold: jax.Array
    rule: jax.Array


@struct.dataclass
class ConsequenceState:
    """Everything about one episode; seat-indexed arrays follow ``env.agents``.

    Attributes:
        config: the episode's ConsequenceConfig.
        rank: int32[n], the wealth rank of each seat: seat i starts with
            ``config.resources[rank[i]]`` (0 = poorest; equal levels are ranked by the seat
            permutation drawn at reset).
        resources: int32[n], remaining resources (0 after elimination: forfeited).
        alive: bool[n], True for survivors.
        fund: int32[], F, the sum of every contribution so far.
        round: int32[], the current round, 0-based.
        phase: int32[], constants.PHASE_CONTRIBUTE or PHASE_VOTE.
        done: bool[], the episode is over.
        success: bool[], the fund reached the threshold.
        contributions: int32[R, n], the (legal, effective) contribution of each seat per round.
        votes: int32[R, n], the counted vote of each seat after round t (-1: none cast or counted).
        eliminated_round: int32[n], the 0-based round after which the seat was eliminated, -1 for
            a survivor.
        endgame: bool[n], True for seats eliminated by the failed final round.
        forfeited: int32[n], the resources a seat held when it was eliminated.
        step_count: int32[], the number of step_env calls so far.
    """

    config: ConsequenceConfig
    rank: jax.Array
    resources: jax.Array
    alive: jax.Array
    fund: jax.Array
    round: jax.Array
    phase: jax.Array
    done: jax.Array
    success: jax.Array
    contributions: jax.Array
    votes: jax.Array
    eliminated_round: jax.Array
    endgame: jax.Array
    forfeited: jax.Array
    step_count: jax.Array
