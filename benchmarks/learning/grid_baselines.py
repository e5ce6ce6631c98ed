"""open_cleanup / open_harvest: does IPPO beat the random and scripted greedy policies?

Trains IPPO with the env's default training config (``make_config(env, "ippo")``: 5 agents,
shared parameters, embedding + MLP on the 11x11 code views) plus ``--set`` overrides (say
``reward=team``: every agent trains on the mean reward) into a run folder, then plays the
held-out split (``split="held_out"``: layouts and rules never trained on) with three
populations: the trained policy, uniform random legal play, and the scripted ``greedy`` policy.
Compared: mean collective return per trial (sum over agents of the per-trial return, averaged
over the 5 trials and the episodes).

    python benchmarks/learning/grid_baselines.py --env open_harvest
    python benchmarks/learning/grid_baselines.py --env open_cleanup --set reward=team
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from common import RESULTS, command_line, machine_note, table

import dilemmax
from dilemmax.agents.policy import random_policy
from dilemmax.agents.trained import TrainedPolicy
from dilemmax.envs.rollout import run_episodes
from dilemmax.statistics import bootstrap_ci
from dilemmax.train.configure import make_config, parse_sets
from dilemmax.train.run import TrainingRun


def collective_per_trial(metrics) -> np.ndarray:
    """float[episodes]: sum over agents of the mean per-trial return, per episode."""
    if "mean_return_per_trial" in metrics:  # open_harvest: [episodes, agents]
        per_agent = np.asarray(metrics["mean_return_per_trial"])
    else:  # open_cleanup: return_per_trial [episodes, trials, agents]
        per_agent = np.asarray(metrics["return_per_trial"]).mean(-2)
    return per_agent.sum(-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True, choices=["open_cleanup", "open_harvest"])
    parser.add_argument("--set", action="append", help="training config key=value")
    parser.add_argument("--episodes", type=int, default=8, help="held-out episodes per policy")
    parser.add_argument("--run-dir", default=None)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--out", default=None, help="default: results/learning_<env>_<reward>.md")
    args = parser.parse_args()

    config = make_config(args.env, "ippo", parse_sets(args.set))
    run_dir = Path(args.run_dir or f"runs/grid-{args.env}-ippo")
    TrainingRun(config, run_dir).train(resume=args.resume)

    # The evaluation env: the run's eval_env_kwargs (held-out split by default) over its env_kwargs.
    env = dilemmax.make(args.env, **{**config.env_kwargs, **config.eval_env_kwargs})
    trained = TrainedPolicy.load(run_dir)
    populations = {"IPPO (trained)": trained, "random": random_policy}
    # Every scripted reference of the env; "greedy" is the bar to beat, the informed ones
    # (privileged rules) show how much a population could earn.
    scripted = env.scripted_policies()
    populations.update({f"{n} (scripted)": p for n, p in scripted.items() if n != "random"})
    rows = []
    for name, policy in populations.items():
        _, metrics = run_episodes(env, policy, jax.random.PRNGKey(11), args.episodes)
        per_episode = collective_per_trial(metrics)
        _, low, high = bootstrap_ci(jnp.asarray(per_episode), jax.random.PRNGKey(5))
        rows.append([name, float(per_episode.mean()), f"[{float(low):.1f}, {float(high):.1f}]"])
        if "total_cleaning" in metrics:  # open_cleanup: is anyone cleaning the river?
            rows[-1].append(float(np.asarray(metrics["total_cleaning"]).mean()))
        print(rows[-1], flush=True)
    score = {row[0]: row[1] for row in rows}
    trained_score, random_score = score["IPPO (trained)"], score["random"]
    greedy_score = score["greedy (scripted)"]
    verdict = "beats" if trained_score > max(random_score, greedy_score) else "does NOT beat"
    header = ["population", "mean collective return per trial", "95% bootstrap CI"]
    if len(rows[0]) > len(header):
        header.append("cells cleared per trial (team)")
    out = Path(args.out or RESULTS / f"learning_{args.env}_{config.reward}.md")
    out.write_text(
        f"""# Learning evidence: {args.env}, IPPO vs random and greedy on held-out configurations

Command: `{command_line()}`

Machine: {machine_note()}. Training: {config.num_updates} updates x {config.num_envs} envs x
{config.num_steps} steps ({config.num_updates * config.num_envs * config.num_steps} env steps),
seed {config.seed}, run folder `{run_dir}` (curve.png, metrics.jsonl). Evaluation: held-out
split, {args.episodes} episodes of 5 trials per population, same key; the interval
resamples episodes.

Reward trained on: `{config.reward}` ("team": every agent receives the mean reward of all
agents; "individual": its own). Network: embedding {config.embed_dim} per code, conv features
{config.conv_features}, hidden {config.hidden}. Training curve: `curve.png` in the run folder.

IPPO {verdict} random and greedy on held-out configurations.

{table(header, rows)}
"""
    )
    print(f"written {out}")


if __name__ == "__main__":
    main()
