"""The paper's OpenHarvest measurements, computed in JAX from a rollout.

Works on a :class:`~dilemmax.envs.base.Rollout` of any length ``T`` (``valid`` masks the padding
after the end) and vmaps over episodes. ``K`` is the number of trials, ``A`` of agents.

Shares and ratios over zero apples are reported as 0; the apple counts returned beside them let
an aggregate weight or drop such entries.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dilemmax.envs import metrics as M
from dilemmax.envs.base import Rollout
from dilemmax.envs.metrics import gini, safe_divide
from dilemmax.envs.open_harvest import constants as c

# Each metric's axes (:mod:`dilemmax.envs.metrics`), in the order ``episode_metrics`` returns them.
METRIC_AXES = {
    "return": M.PER_AGENT,
    "return_per_trial": M.PER_TRIAL_AGENT,
    "mean_return_per_trial": M.PER_TRIAL,
    "apples": M.PER_AGENT,
    "apples_per_trial": M.PER_TRIAL_AGENT,
    "trials_played": M.SCALAR,
    "length": M.SCALAR,
    "orchard_lifetime": M.PER_TRIAL,
    "orchard_died": M.PER_TRIAL,
    "gini_per_trial": M.PER_TRIAL,
    "gini": M.SCALAR,
    "payoffs_known": M.PER_AGENT,
    "payoffs_known_per_trial": M.PER_TRIAL_AGENT,
    "best_stage_share": M.PER_AGENT,
    "premature_share": M.PER_AGENT,
    "best_stage_share_team": M.SCALAR,
    "premature_share_team": M.SCALAR,
    "points_per_apple": M.PER_AGENT,
    "points_per_apple_team": M.SCALAR,
    "zaps_fired": M.PER_AGENT,
    "zaps_received": M.PER_AGENT,
}


def episode_metrics(rollout: Rollout, agents: list[str], num_trials: int) -> dict[str, jax.Array]:
    """Per-episode metrics.

    Returns a dict of:
        return: float32[A], points per agent over the episode.
        return_per_trial: float32[K, A].
        mean_return_per_trial: float32[K], the mean over agents.
        apples_per_trial: int32[K, A]; apples: int32[A].
        trials_played: int32[]; length: int32[], steps played.
        orchard_lifetime: int32[K], the step of the trial at which the orchard died (the last
            apple eaten with nothing left to regrow), or the trial's length if it never died
            (400 for a full trial); 0 for trials not played.
        orchard_died: bool[K].
        gini_per_trial: float32[K], Gini of the agents' returns within each trial; gini:
            float32[], its mean over the trials played.
        payoffs_known: float32[A], share of the colour-stage pays the agent has tasted by the
            end, out of those it could taste (3 stages x the colours on the map);
            payoffs_known_per_trial: float32[K, A], the same at the end of each trial.
        best_stage_share, premature_share: float32[A], share of the agent's apples eaten at the
            stage that pays most for their colour, and at an earlier stage; ``*_team``:
            float32[], the same over all agents' apples.
        points_per_apple: float32[A]; points_per_apple_team: float32[].
        zaps_fired, zaps_received: int32[A].
    """
    valid = rollout.valid  # [T]
    infos = rollout.infos
    config = rollout.final_state.config
    rewards = jnp.stack([rollout.rewards[a] for a in agents], axis=-1)  # [T, A]
    rewards = jnp.where(valid[:, None], rewards, 0.0)
    in_trial = jax.nn.one_hot(infos["trial"], num_trials, dtype=jnp.float32)  # [T, K]
    in_trial = in_trial * valid[:, None]

    ate = infos["ate"] & valid[:, None]  # [T, A]
    return_per_trial = in_trial.T @ rewards  # [K, A]
    apples_per_trial = jnp.round(in_trial.T @ ate.astype(jnp.float32)).astype(jnp.int32)
    played = jnp.any(in_trial > 0, axis=0)  # [K]

    # A trial's last step carries its length; if the orchard died it died on that step.
    steps_played = jnp.where(valid, infos["trial_step"] + 1, 0)
    lifetime = jnp.max(in_trial * steps_played[:, None], axis=0).astype(jnp.int32)
    died = jnp.any((in_trial > 0) & infos["orchard_dead"][:, None], axis=0)

    gini_per_trial = jax.vmap(gini)(return_per_trial)
    num_played = jnp.maximum(jnp.sum(played), 1)
    mean_gini = jnp.sum(jnp.where(played, gini_per_trial, 0.0)) / num_played

    # Which colour-stage pairs each agent has tasted by the end of each trial.
    pair = infos["ate_colour"] * c.NUM_STAGES + infos["ate_stage"]  # [T, A], <0 when none
    tasted = jax.nn.one_hot(jnp.where(ate, pair, -1), c.NUM_COLOURS * c.NUM_STAGES) > 0
    tasted_by_trial = jnp.einsum("tk,tap->kap", in_trial, tasted.astype(jnp.float32)) > 0
    known_by_trial = jax.lax.cummax(tasted_by_trial.astype(jnp.int32), axis=0)  # [K, A, 15]
    present = jnp.zeros(c.NUM_COLOURS, bool).at[config.patch_colours].set(True)
    learnable = jnp.repeat(present, c.NUM_STAGES)  # [15]
    known_count = jnp.sum(known_by_trial * learnable, axis=-1)  # [K, A]
    payoffs_known_per_trial = known_count / (c.NUM_STAGES * jnp.sum(present))

    best = config.best_stage[jnp.clip(infos["ate_colour"], 0, c.NUM_COLOURS - 1)]  # [T, A]
    at_best = ate & (infos["ate_stage"] == best)
    premature = ate & (infos["ate_stage"] < best)
    apples = jnp.sum(ate, axis=0)
    total = jnp.sum(rewards, axis=0)

    zaps_fired = jnp.sum(infos["zap_fired"] & valid[:, None], axis=0)
    zaps_received = jnp.sum(infos["zapped"] & valid[:, None], axis=0)

    return {
        "return": total,
        "return_per_trial": return_per_trial,
        "mean_return_per_trial": jnp.mean(return_per_trial, axis=-1),
        "apples": apples.astype(jnp.int32),
        "apples_per_trial": apples_per_trial,
        "trials_played": jnp.sum(played).astype(jnp.int32),
        "length": jnp.sum(valid).astype(jnp.int32),
        "orchard_lifetime": lifetime,
        "orchard_died": died,
        "gini_per_trial": gini_per_trial,
        "gini": mean_gini.astype(jnp.float32),
        "payoffs_known": payoffs_known_per_trial[-1].astype(jnp.float32),
        "payoffs_known_per_trial": payoffs_known_per_trial.astype(jnp.float32),
        "best_stage_share": safe_divide(jnp.sum(at_best, axis=0), apples),
        "premature_share": safe_divide(jnp.sum(premature, axis=0), apples),
        "best_stage_share_team": safe_divide(jnp.sum(at_best), jnp.sum(apples)),
        "premature_share_team": safe_divide(jnp.sum(premature), jnp.sum(apples)),
        "points_per_apple": safe_divide(total, apples),
        "points_per_apple_team": safe_divide(jnp.sum(total), jnp.sum(apples)),
        "zaps_fired": zaps_fired.astype(jnp.int32),
        "zaps_received": zaps_received.astype(jnp.int32),
    }
