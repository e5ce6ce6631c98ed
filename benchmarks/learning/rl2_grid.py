"""Recurrent PPO (RL^2) on open_harvest / open_cleanup: does the agent adapt within an episode?

Evaluates a recurrent training run (``dilemmax train <env> --set recurrent=True ...``, or
``--train`` here with the same ``--set`` overrides) on the run's evaluation env (the held-out
split by default) beside uniform random play and the env's scripted policies, and writes a
results page with:

- the mean collective return per trial of every population, with a 95% bootstrap interval over
  episodes (the number the recorded feed-forward IPPO pages report);
- the recurrent agent's trial-by-trial table: collective return, apples, and what it knows of the
  hidden rules (open_harvest: share of colour-stage pays tasted; open_cleanup: recipes seen
  working, cells cleared), from the env's own events;
- last trial minus first trial collective return, per episode, with a 95% bootstrap interval:
  adaptation within an episode shows as an interval above zero.

    python benchmarks/learning/rl2_grid.py --env open_harvest --run-dir runs/rl2-open_harvest-team
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from common import RESULTS, command_line, machine_note, table

import dilemmax
from dilemmax.agents.policy import random_policy
from dilemmax.agents.trained import TrainedPolicy
from dilemmax.envs.metrics import bootstrap_ci
from dilemmax.envs.rollout import run_episodes
from dilemmax.train.config import TrainConfig, make_config, parse_sets
from dilemmax.train.envs import ConfiguredEnv, overrides_as_arrays
from dilemmax.train.run import TrainingRun


def per_trial_collective(metrics, key: str = "return_per_trial") -> np.ndarray:
    """float[episodes, K]: the sum over agents of ``key`` [episodes, K, A] in each trial."""
    return np.asarray(metrics[key], np.float64).sum(-1)


def interval(samples: np.ndarray, seed: int = 5) -> tuple[float, float, float]:
    mean, low, high = bootstrap_ci(jax.random.PRNGKey(seed), jnp.asarray(samples, jnp.float32))
    return float(mean), float(low), float(high)


def recorded_baseline(path: Path, row: str = "IPPO (trained)") -> float | None:
    """The mean collective return per trial of ``row`` in a recorded results page, if any."""
    if not path.is_file():
        return None
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == row and len(cells) > 1:
            try:
                return float(cells[1])
            except ValueError:
                return None
    return None


def knowledge_columns(env_id: str, metrics) -> dict[str, np.ndarray]:
    """Per-trial [episodes, K] team measures of what the agents know of the hidden rules."""
    if env_id == "open_harvest":
        return {
            "apples (team)": np.asarray(metrics["apples_per_trial"]).sum(-1),
            "pays tasted (mean share)": np.asarray(metrics["payoffs_known_per_trial"]).mean(-1),
        }
    return {
        "apples (team)": np.asarray(metrics["apples_per_trial"]).sum(-1),
        "cells cleared (team)": np.asarray(metrics["cleaning_per_trial"]).sum(-1),
        "recipes known (best agent)": np.asarray(metrics["recipes_known"]).max(-1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True, choices=["open_cleanup", "open_harvest"])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--train", action="store_true", help="train (or resume) the run first")
    parser.add_argument("--set", action="append", help="training config key=value (--train)")
    parser.add_argument("--episodes", type=int, default=16, help="evaluation episodes per policy")
    parser.add_argument("--references", action="store_true", help="also the informed scripts")
    parser.add_argument("--baseline", default=None, help="recorded feed-forward results page")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    run_dir = Path(args.run_dir)
    if args.train:
        overrides = {"recurrent": True, **parse_sets(args.set)}
        config = make_config(args.env, "ippo", overrides)
        TrainingRun(config, run_dir).train(resume=True)
    config = TrainConfig.from_dict(json.loads((run_dir / "config.json").read_text()))
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps_done = records[-1]["env_steps"] if records else 0

    env_kwargs = {**config.env_kwargs, **config.eval_env_kwargs}
    base = dilemmax.make(args.env, **env_kwargs)
    # The run's configuration overrides (say a pollution threshold) apply to evaluation too.
    template = base.sample_config(jax.random.PRNGKey(0))
    env = ConfiguredEnv(base, overrides_as_arrays(config.env_config, template))
    trained = TrainedPolicy.load(run_dir)
    populations = {"RL^2 (trained, recurrent)": trained, "random": random_policy}
    scripted = base.scripted_policies()
    for name, policy in scripted.items():
        if name == "greedy" or (args.references and name != "random"):
            populations[f"{name} (scripted)"] = policy

    rows, per_trial = [], {}
    for name, policy in populations.items():
        _, metrics = run_episodes(env, policy, jax.random.PRNGKey(11), args.episodes)
        metrics = jax.tree.map(np.asarray, metrics)
        trials = per_trial_collective(metrics)  # [episodes, K]
        mean, low, high = interval(trials.mean(-1))
        apples = np.asarray(metrics["apples_per_trial"]).sum(-1).mean()
        rows.append([name, mean, f"[{low:.1f}, {high:.1f}]", float(apples)])
        per_trial[name] = (trials, knowledge_columns(args.env, metrics))
        print(rows[-1], flush=True)

    trials, knowledge = per_trial["RL^2 (trained, recurrent)"]
    num_trials = trials.shape[1]
    trial_rows = []
    for k in range(num_trials):
        row = [k + 1, float(trials[:, k].mean())]
        row += [float(v[:, k].mean()) for v in knowledge.values()]
        trial_rows.append(row)
    gain = trials[:, -1] - trials[:, 0]
    g_mean, g_low, g_high = interval(gain, seed=7)
    adapts = g_low > 0
    score = {row[0]: row[1] for row in rows}
    rl2 = score["RL^2 (trained, recurrent)"]
    bars = max(score["random"], score["greedy (scripted)"])
    rl2_apples = rows[0][3]
    apple_bar = max(r[3] for r in rows if r[0] in ("random", "greedy (scripted)"))

    baseline_path = Path(args.baseline) if args.baseline else None
    baseline = recorded_baseline(baseline_path) if baseline_path else None
    lines = [
        f"- Trial {num_trials} minus trial 1 collective return: {g_mean:.2f}, 95% bootstrap "
        f"interval [{g_low:.2f}, {g_high:.2f}] over {len(gain)} episodes: "
        + ("**the interval excludes zero (improves within the episode)**." if adapts else
           "the interval does NOT exclude zero (no within-episode improvement shown)."),
        f"- Versus random and greedy (mean collective return per trial): {rl2:.2f} vs "
        f"{score['random']:.2f} and {score['greedy (scripted)']:.2f}: "
        + ("**beats both**." if rl2 > bars else "does NOT beat both."),
        f"- Apples eaten per trial (team): {rl2_apples:.2f} vs the better of random and greedy "
        f"{apple_bar:.2f}: " + ("**more**." if rl2_apples > apple_bar else "NOT more."),
    ]  # fmt: skip
    if baseline is not None:
        lines.append(
            f"- Versus the recorded feed-forward IPPO (`{baseline_path}`): {rl2:.2f} vs "
            f"{baseline:.2f} mean collective return per trial: "
            + ("**higher**." if rl2 > baseline else "NOT higher.")
        )
    population_header = [
        "population",
        "mean collective return per trial",
        "95% bootstrap CI",
        "apples per trial (team)",
    ]
    population_table = table(population_header, rows)
    trial_table = table(["trial", "collective return", *knowledge], trial_rows)
    default_out = RESULTS / f"learning_{args.env}_rl2_{run_dir.name}.md"
    out = Path(args.out) if args.out else default_out
    out.write_text(
        f"""# Learning evidence: {args.env}, recurrent PPO (RL^2) on held-out configurations

Command: `{command_line()}`

Machine: {machine_note()}. Run folder `{run_dir}` (config.json, metrics.jsonl, curve.png):
{steps_done} env steps trained (of {config.num_updates * config.num_envs * config.num_steps}
configured; a run stopped early is evaluated at its last checkpoint), {config.num_envs} envs x
{config.num_steps} steps per update, reward `{config.reward}`, GRU {config.gru_hidden}, network
embedding {config.embed_dim} per code, conv features {config.conv_features}, hidden
{config.hidden}. Training env options {json.dumps(config.env_kwargs)}; evaluation env options
{json.dumps(env_kwargs)}, configuration overrides {json.dumps(config.env_config)}.
Evaluation: {args.episodes} episodes per population, the trained policy
sampling (not greedy), same key for every population; intervals resample episodes.

{chr(10).join(lines)}

## Populations

{population_table}

## The recurrent agent, trial by trial (means over episodes)

{trial_table}
"""
    )
    print(f"written {out}")


if __name__ == "__main__":
    main()
