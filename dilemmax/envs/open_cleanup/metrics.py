"""Episode metrics of OpenCleanup, computed in JAX from a :class:`~dilemmax.envs.base.Rollout`.

Works on a rollout of any length ``T`` (steps after the end have ``valid`` False and are
ignored). ``K`` is the number of trials, ``A`` the number of agents; "step" inside a trial counts
from 0. Definitions (after the paper's Section 4 and Appendix C):

- ``return_per_trial`` float32[K, A]: apples each agent ate in each trial (the game's payoff;
  the optional ``clean_reward`` shaping is not counted); ``apples_per_trial`` int32[K, A], the
  same as counts.
- ``recipes_known`` int32[K, A]: recipes (one per effect) an agent has seen work by the end of
  each trial, cumulative over the episode. An agent learns the recipe of an effect only from its
  own shots: a shot while holding a pair that carries the effect and that changed at least one
  waste cell. In the paper's game a pair carries at most one effect and each effect one pair;
  with ``recipe_length=1`` every pair ending in the recipe's tool carries it, and they count
  once.
- ``cleaning_per_trial`` float32[K, A]: waste cells the agent cleared to water ("waste tiles
  cleared"); ``total_cleaning`` float32[K] sums it over agents.
- ``effective_cleaners`` float32[K]: ``1 / sum_i s_i^2`` with ``s_i`` the agent's share of the
  trial's cleared cells (0 when nobody cleared anything).
- ``gini`` float32[K]: Gini coefficient of the agents' returns in each trial.
- ``first_clear_step`` / ``first_apple_step`` int32[K]: trial step of the team's first cell
  cleared to water / first apple eaten, -1 if it never happened.
- ``early_cleaning`` float32[K]: cells cleared or lightened in the first 50 steps of each trial.
- ``pickups`` / ``working_tools`` float32[K, A]: pick-ups, and pick-ups that completed a recipe
  (the window became one of the 7 working pairs); ``pickups_per_tool`` float32[K] is the team's
  ratio (0 where no working tool was made: check ``working_tools``). Two is the minimum unless
  the sliding window completes a recipe with one pick-up.
- ``first_test_share`` float32[K]: among the team's shots at waste with a full window, the share
  made with a pair the shooter had never before fired at waste in this episode (a first test of
  that pair); 0 with no such shots, and ``shots_at_waste`` float32[K] gives the denominator.
  Defined for any policy from the env's events. It is NOT the paper's "explore %", which is the
  share of steps a language agent itself reported being in explore mode: that one needs the
  agent's replies and is :func:`reported_explore_share`. Every metric is finite.
- ``return`` float32[A] and ``length`` int32[] over the whole episode, as every env reports.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dilemmax.envs import metrics as M
from dilemmax.envs.base import Rollout
from dilemmax.envs.open_cleanup import constants as C

# Each metric's axes (:mod:`dilemmax.envs.metrics`), in the order ``episode_metrics`` returns them.
METRIC_AXES = {
    "return": M.PER_AGENT,
    "length": M.SCALAR,
    "return_per_trial": M.PER_TRIAL_AGENT,
    "apples_per_trial": M.PER_TRIAL_AGENT,
    "recipes_known": M.PER_TRIAL_AGENT,
    "cleaning_per_trial": M.PER_TRIAL_AGENT,
    "total_cleaning": M.PER_TRIAL,
    "effective_cleaners": M.PER_TRIAL,
    "gini": M.PER_TRIAL,
    "first_clear_step": M.PER_TRIAL,
    "first_apple_step": M.PER_TRIAL,
    "early_cleaning": M.PER_TRIAL,
    "pickups": M.PER_TRIAL_AGENT,
    "working_tools": M.PER_TRIAL_AGENT,
    "pickups_per_tool": M.PER_TRIAL,
    "first_test_share": M.PER_TRIAL,
    "shots_at_waste": M.PER_TRIAL,
}


def _first_in_trial(flag: jax.Array, trial: jax.Array, step: jax.Array, num_trials: int):
    """int32[K]: the trial step of the first True of ``flag`` (bool[T]) in each trial, else -1."""
    in_trial = flag[:, None] & (trial[:, None] == jnp.arange(num_trials)[None, :])
    first = jnp.min(jnp.where(in_trial, step[:, None], jnp.iinfo(jnp.int32).max), axis=0)
    return jnp.where(jnp.any(in_trial, axis=0), first, -1).astype(jnp.int32)


def episode_metrics(rollout: Rollout, agents: list[str], num_trials: int) -> dict[str, jax.Array]:
    """The metrics above for one (unbatched) rollout."""
    infos, valid = rollout.infos, rollout.valid
    trial, step, done = infos["trial"], infos["trial_step"], infos["trial_done"]
    per_trial = lambda x: M.per_trial_sum(x, done, valid, num_trials)  # noqa: E731

    # Apples eaten, the game's payoff (rewards also carry the optional clean_reward shaping).
    apples = infos["ate"].astype(jnp.float32)  # [T, A]
    returns = per_trial(apples)
    cleared = infos["cleared"].astype(jnp.float32)  # [T, A]
    changed = infos["cleared"] + infos["lightened"]
    cleaning = per_trial(cleared)

    # Recipes seen working, per agent and effect, cumulative over trials.
    pair = infos["shot_pair"]  # [T, A], -1 when not firing or window not full
    pair_hot = jax.nn.one_hot(pair, C.NUM_PAIRS, dtype=jnp.float32)  # [T, A, 16]; -1 -> zeros
    effect = rollout.final_state.config.pair_effect[jnp.clip(pair, 0, None)]
    effect = jnp.where(pair >= 0, effect, C.NO_EFFECT)  # [T, A]
    effect_hot = jax.nn.one_hot(effect, C.NUM_EFFECTS, dtype=jnp.float32)  # NO_EFFECT -> zeros
    worked = effect_hot * (changed > 0)[..., None]
    learned = per_trial(worked) > 0  # [K, A, 7]
    known = jnp.cumsum(learned.astype(jnp.int32), axis=0) > 0
    recipes_known = jnp.sum(known, axis=-1).astype(jnp.int32)

    # First tests of a pair: shots at waste with a pair never before fired at waste.
    at_waste = pair_hot * (infos["shot_at_waste"] & valid[:, None])[..., None]  # [T, A, 16]
    tried_before = (jnp.cumsum(at_waste, axis=0) - at_waste) > 0
    first_test = jnp.sum(at_waste * ~tried_before, axis=-1)  # [T, A]
    shots = jnp.sum(at_waste, axis=-1)
    shots_per_trial = jnp.sum(per_trial(shots), -1)
    test_share = M.safe_divide(jnp.sum(per_trial(first_test), -1), shots_per_trial)

    pickups = per_trial((infos["picked_up"] >= 0).astype(jnp.float32))
    tools = per_trial(infos["made_tool"].astype(jnp.float32))
    any_clear = jnp.any(infos["cleared"] > 0, axis=-1) & valid
    any_apple = jnp.any(infos["ate"], axis=-1) & valid
    early = per_trial(jnp.sum(changed, -1) * (step < C.EARLY_STEPS))

    return {
        "return": jnp.sum(returns, axis=0),
        "length": jnp.sum(valid).astype(jnp.int32),
        "return_per_trial": returns,
        "apples_per_trial": jnp.round(returns).astype(jnp.int32),
        "recipes_known": recipes_known,
        "cleaning_per_trial": cleaning,
        "total_cleaning": jnp.sum(cleaning, axis=-1),
        "effective_cleaners": jax.vmap(M.effective_number)(cleaning),
        "gini": jax.vmap(M.gini)(returns),
        "first_clear_step": _first_in_trial(any_clear, trial, step, num_trials),
        "first_apple_step": _first_in_trial(any_apple, trial, step, num_trials),
        "early_cleaning": early,
        "pickups": pickups,
        "working_tools": tools,
        "pickups_per_tool": M.safe_divide(jnp.sum(pickups, -1), jnp.sum(tools, -1)),
        "first_test_share": test_share,
        "shots_at_waste": shots_per_trial,
    }


EXPLORE_MODE, EXPLOIT_MODE = "explore", "exploit"


def reported_explore_share(modes, trials, num_trials: int = C.NUM_TRIALS) -> dict:
    """The paper's "explore %": the share of an agent's steps on which it reported exploring.

    Computed outside JAX from what a language agent wrote (its replies' ``mode`` field, kept in
    ``ParsedReply.fields`` and in transcripts). Parsing is total: a mode is read
    case-insensitively after trimming; anything other than "explore" or "exploit" (None, a
    number, another word) counts as unreported and is left out of the share.

    Args:
        modes: one reported mode per step of one agent (any values).
        trials: the trial index (0..num_trials-1) of each of those steps; steps with an
            out-of-range or non-integer trial are skipped.

    Returns:
        {"explore_share": float[K] (0 where the trial has no reported mode), "reported": int[K]
        steps with a readable mode, "unreported": int[K] steps without one}.
    """
    explore = [0] * num_trials
    reported = [0] * num_trials
    unreported = [0] * num_trials
    for mode, trial in zip(modes, trials, strict=False):
        if isinstance(trial, bool) or not isinstance(trial, int) or not 0 <= trial < num_trials:
            continue
        word = mode.strip().lower() if isinstance(mode, str) else None
        if word not in (EXPLORE_MODE, EXPLOIT_MODE):
            unreported[trial] += 1
            continue
        reported[trial] += 1
        explore[trial] += word == EXPLORE_MODE
    share = [e / r if r else 0.0 for e, r in zip(explore, reported, strict=True)]
    return {"explore_share": share, "reported": reported, "unreported": unreported}
