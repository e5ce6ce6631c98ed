"""How much is open_harvest's hidden pay rule worth, and what would learning it in trial 1 show?

Before training a memory agent on a setting, this plays scripted policies on held-out
configurations and reports the mean collective return of each trial:

- ``random``, ``greedy`` (eats whatever it reaches), ``sustainable`` and ``oracle`` (the env's
  own scripted policies; the oracle reads the hidden rule and also holds back for regrowth);
- ``informed greedy``: greedy that reads the hidden rule and eats each colour only at its best
  stage (no restraint): what knowing the rule is worth to a forager;
- ``taster``: a scripted learner. It reads only what it has tasted itself this episode
  (``state.known_pay`` of its own seat and those pays): a colour whose best stage follows from
  its tastes (among the stage orders the env draws from, ``stage_orders``) is eaten only at that
  stage; a colour it has not pinned down is eaten greedily (which tastes it). Its knowledge
  starts empty at the episode start and persists across trials, as an RL^2 agent's memory
  does, so its trial-5 minus trial-1 gap is what adaptation within an episode looks like here.

A setting separates informed from uninformed play when ``informed greedy`` is far above
``greedy``, and can show adaptation when ``taster`` climbs from trial 1 to trial 5.

    python benchmarks/learning/harvest_rule_value.py --set stage_orders=2 --set trial_steps=100 \
        --set 'pay_levels=[1,0,-0.5]' --episodes 64
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from common import RESULTS, command_line, machine_note, table

import dilemmax
from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest import policies as scripted
from dilemmax.envs.rollout import run_episodes
from dilemmax.statistics import bootstrap_ci


def _eat_allowed(key, observation, stage_ok):
    """Greedy towards visible apples that ``stage_ok(cells)`` allows (no restraint)."""
    return scripted.eat_selectively(key, observation, lambda cells, apples: stage_ok(cells))


def informed_greedy(key, observation):
    """Greedy at each colour's best stage, read from the hidden rule (privileged)."""
    best = observation.state.config.best_stage
    return _eat_allowed(key, observation, scripted.at_best_stage(best))


def make_taster(stage_orders: int, pay_levels, shared_pay_order: bool = False):
    """The scripted learner for an env drawing each colour's pay order from ``stage_orders``
    rows: per colour, the rows consistent with the agent's own tastes; the best stage is known
    when they all agree on it. With ``shared_pay_order`` a taste of any colour counts for all."""
    rows = np.asarray(c.STAGE_PERMUTATIONS)[list(c.STAGE_ORDER_PREFERENCE[:stage_orders])]
    row_pays = jnp.asarray(np.asarray(pay_levels, np.float32)[rows])  # [R, G]
    row_best = jnp.argmax(row_pays, axis=-1)  # [R]

    def taster(key, observation):
        state = observation.state
        known = state.known_pay[observation.agent_index]  # bool[C, G]: what it tasted itself
        if shared_pay_order:  # every colour's pay row is the same: pool the tastes
            known = jnp.broadcast_to(jnp.any(known, axis=0), known.shape)
        pay = state.config.pay  # read only where tasted
        matches = (~known[:, None, :]) | (row_pays[None] == pay[:, None, :])  # [C, R, G]
        consistent = jnp.all(matches, axis=-1)  # [C, R]
        candidate_best = jnp.where(consistent, row_best[None], -1)  # [C, R]
        first = jnp.max(candidate_best, axis=-1)
        pinned = jnp.all((candidate_best == first[:, None]) | ~consistent, axis=-1)
        return _eat_allowed(key, observation, scripted.at_best_stage(first, ~pinned))

    return taster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", default=[], help="env option key=JSON value")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    options = {"split": "held_out"}
    for item in args.set:
        key, _, value = item.partition("=")
        options[key] = json.loads(value)
    env = dilemmax.make("open_harvest", **options)
    populations = dict(env.scripted_policies())
    populations["informed greedy"] = informed_greedy
    populations["taster"] = make_taster(env.stage_orders, env.pay_levels, env.shared_pay_order)

    rows = []
    for name, policy in populations.items():
        _, metrics = run_episodes(env, policy, jax.random.PRNGKey(11), args.episodes)
        trials = np.asarray(metrics["return_per_trial"], np.float64).sum(-1)  # [E, K]
        apples = float(np.asarray(metrics["apples_per_trial"]).sum(-1).mean())
        gain = jnp.asarray(trials[:, -1] - trials[:, 0], jnp.float32)
        g_mean, g_low, g_high = (float(v) for v in bootstrap_ci(gain, jax.random.PRNGKey(7)))
        rows.append(
            [name, float(trials.mean()), *(f"{v:.1f}" for v in trials.mean(0)), apples]
            + [f"{g_mean:+.1f} [{g_low:.1f}, {g_high:.1f}]"]
        )
        print(rows[-1], flush=True)

    header = ["policy", "mean per trial"]
    header += [f"trial {k + 1}" for k in range(env.num_trials)]
    header += ["apples per trial", "trial 5 - trial 1 [95%]"]
    name = args.out or "learning_open_harvest_rule_value.md"
    page = [
        "# open_harvest: what the hidden pay rule is worth to scripted play",
        "",
        f"Command: `{command_line()}`",
        "",
        f"Machine: {machine_note()} (scripted play only; no timing reported).",
        "",
        f"Env options: {json.dumps(options)}; {args.episodes} held-out episodes per policy "
        f"(the same key, so the same configurations). Collective return (sum over the "
        f"{env.num_agents} agents), mean over episodes; the last column is a 95% bootstrap "
        "interval over episodes.",
        "",
        table(header, rows),
        "",
        "taster: greedy on colours it has not pinned down, and only each colour's best stage "
        "once its own tastes pin that down (knowledge kept across trials, empty at the episode "
        "start). informed greedy: the same forager that reads the hidden rule from the start.",
    ]
    path = RESULTS / name if os.sep not in name else Path(name)
    path.write_text("\n".join(page) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
