"""open_cleanup / open_harvest: does IPPO beat the random and scripted greedy policies?

Trains IPPO with the env's default training config (``make_config(env, "ippo")``: 5 agents,
shared parameters, embedding + CNN on the 11x11 code views) into a run folder, then plays the
held-out split (``split="held_out"``: layouts and rules never trained on) with three
populations: the trained policy, uniform random legal play, and the scripted ``greedy`` policy.
Compared: mean collective return per trial (sum over agents of the per-trial return, averaged
over the 5 trials and the episodes).

    python benchmarks/learning/grid_baselines.py --env open_harvest
    python benchmarks/learning/grid_baselines.py --env open_cleanup --set total_timesteps=4000000
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import numpy as np
from common import RESULTS, command_line, machine_note, table

import dilemmax
from dilemmax.agents.policy import random_policy
from dilemmax.agents.trained import TrainedPolicy
from dilemmax.envs.rollout import run_episodes
from dilemmax.train.config import make_config, parse_sets
from dilemmax.train.run import TrainingRun


def collective_per_trial(metrics) -> float:
    """Mean over episodes of sum over agents of the mean per-trial return."""
    per_agent = np.asarray(metrics["mean_return_per_trial"])  # [episodes, agents]
    return float(per_agent.sum(-1).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True, choices=["open_cleanup", "open_harvest"])
    parser.add_argument("--set", action="append", help="training config key=value")
    parser.add_argument("--episodes", type=int, default=8, help="held-out episodes per policy")
    parser.add_argument("--run-dir", default=None)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()

    config = make_config(args.env, "ippo", parse_sets(args.set))
    run_dir = Path(args.run_dir or f"runs/grid-{args.env}-ippo")
    TrainingRun(config, run_dir).train(resume=args.resume)

    env = dilemmax.make(args.env, **{**config.env_kwargs, "split": "held_out"})
    trained = TrainedPolicy.load(run_dir)
    populations = {
        "IPPO (trained)": trained,
        "random": random_policy,
        "greedy (scripted)": env.scripted_policies()["greedy"],
    }
    rows = []
    for name, policy in populations.items():
        _, metrics = run_episodes(env, policy, jax.random.PRNGKey(11), args.episodes)
        rows.append([name, collective_per_trial(metrics)])
        print(rows[-1], flush=True)
    out = RESULTS / f"learning_{args.env}.md"
    out.write_text(
        f"""# Learning evidence: {args.env}, IPPO vs random and greedy on held-out configurations

Command: `{command_line()}`

Machine: {machine_note()}. Training: {config.num_updates} updates x {config.num_envs} envs x
{config.num_steps} steps ({config.num_updates * config.num_envs * config.num_steps} env steps),
seed {config.seed}, run folder `{run_dir}` (curve.png, metrics.jsonl). Evaluation: held-out
split, {args.episodes} episodes of 5 trials per population, same key.

{table(["population", "mean collective return per trial"], rows)}
"""
    )
    print(f"written {out}")


if __name__ == "__main__":
    main()
