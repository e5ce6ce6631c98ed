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
  adaptation within an episode shows as an interval above zero;
- with ``--feedforward RUN``: a feed-forward IPPO run trained on the same setting (env options,
  configuration overrides, reward) is played on the same episodes (same key, so the same
  configurations), and the page gives RL^2 minus IPPO per episode with a paired 95% bootstrap
  interval, and the same last-minus-first control for the memoryless policy;
- the training cost of each run from its metrics.jsonl (env steps, seconds, env-steps/s).

    python benchmarks/learning/rl2_grid.py --env open_harvest --run-dir runs/rl2-open_harvest-team
    python benchmarks/learning/rl2_grid.py --env open_harvest --run-dir runs/rl2-harvest-t100-o2 \
        --feedforward runs/ff-harvest-t100-o2 --episodes 64
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
from dilemmax.envs.rollout import run_episodes
from dilemmax.statistics import bootstrap_ci
from dilemmax.train.config import TrainConfig
from dilemmax.train.configure import make_config, parse_sets
from dilemmax.train.envs import ConfiguredEnv, overrides_as_arrays
from dilemmax.train.run import CONFIG_FILE, TrainingRun


def per_trial_collective(metrics, key: str = "return_per_trial") -> np.ndarray:
    """float[episodes, K]: the sum over agents of ``key`` [episodes, K, A] in each trial."""
    return np.asarray(metrics[key], np.float64).sum(-1)


def interval(samples: np.ndarray, seed: int = 5) -> tuple[float, float, float]:
    mean, low, high = bootstrap_ci(jnp.asarray(samples, jnp.float32), jax.random.PRNGKey(seed))
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


# What must match for a feed-forward run to be a fair control of a recurrent one.
SETTING_KEYS = ("env", "env_kwargs", "eval_env_kwargs", "env_config", "reward", "reward_scale")


def setting_mismatch(recurrent: dict, feedforward: dict) -> list[str]:
    """The setting keys (:data:`SETTING_KEYS`) on which two run configs differ."""
    return [k for k in SETTING_KEYS if recurrent.get(k) != feedforward.get(k)]


def training_cost(run_dir: Path) -> dict:
    """Env steps, summed chunk seconds (the first chunk includes compiling) and the median
    env-steps/s of a run folder's metrics.jsonl."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    if not records:
        return {"env_steps": 0, "seconds": 0.0, "median_sps": 0.0}
    return {
        "env_steps": int(records[-1]["env_steps"]),
        "seconds": float(sum(r["seconds"] for r in records)),
        "median_sps": float(np.median([r["env_steps_per_s"] for r in records])),
    }


def cost_line(name: str, run_dir: Path, config: TrainConfig) -> str:
    cost = training_cost(run_dir)
    configured = config.num_updates * config.num_envs * config.num_steps
    return (
        f"- {name} `{run_dir}`: {cost['env_steps']} env steps trained (of {configured} "
        f"configured), {cost['seconds'] / 60:.1f} min of chunks, median "
        f"{cost['median_sps']:.0f} env-steps/s; {config.num_envs} envs x {config.num_steps} "
        f"steps, {config.update_epochs} epochs x {config.num_minibatches} minibatches, lr "
        f"{config.lr}, "
        + (f"recurrent (GRU {config.gru_hidden})." if config.recurrent else "feed-forward.")
    )


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


def evaluate(env, policy, env_id: str, episodes: int) -> dict:
    """Plays ``episodes`` episodes (key 11, the same for every population) and returns the
    collective return per trial float[episodes, K], the knowledge columns and the team apples."""
    _, metrics = run_episodes(env, policy, jax.random.PRNGKey(11), episodes)
    metrics = jax.tree.map(np.asarray, metrics)
    return {
        "trials": per_trial_collective(metrics),
        "knowledge": knowledge_columns(env_id, metrics),
        "apples": float(np.asarray(metrics["apples_per_trial"]).sum(-1).mean()),
    }


def load_config(run_dir: Path) -> TrainConfig:
    return TrainConfig.from_dict(json.loads((run_dir / "config.json").read_text()))


def gain_line(name: str, trials: np.ndarray) -> str:
    """The last-minus-first-trial line of a population (trials float[episodes, K])."""
    gain = trials[:, -1] - trials[:, 0]
    mean, low, high = interval(gain, seed=7)
    verdict = (
        "**the interval excludes zero (improves within the episode)**."
        if low > 0
        else "the interval does NOT exclude zero (no within-episode improvement shown)."
    )
    return (
        f"- {name}: trial {trials.shape[1]} minus trial 1 collective return: {mean:.2f}, 95% "
        f"bootstrap interval [{low:.2f}, {high:.2f}] over {len(gain)} episodes: {verdict}"
    )


RL2 = "RL^2 (trained, recurrent)"
FEEDFORWARD = "IPPO (trained, feed-forward)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", required=True, choices=["open_cleanup", "open_harvest"])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--train", action="store_true", help="train (or resume) the run first")
    parser.add_argument("--set", action="append", help="training config key=value (--train)")
    parser.add_argument("--episodes", type=int, default=16, help="evaluation episodes per policy")
    parser.add_argument("--references", action="store_true", help="also the informed scripts")
    parser.add_argument("--baseline", default=None, help="recorded feed-forward results page")
    parser.add_argument(
        "--feedforward", default=None, help="feed-forward run folder trained on the same setting"
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    run_dir = Path(args.run_dir)
    if args.train:
        overrides = {"recurrent": True, **parse_sets(args.set)}
        config = make_config(args.env, "ippo", overrides)
        # Resume a run folder this script already started; a new folder starts a new run.
        TrainingRun(config, run_dir).train(resume=(run_dir / CONFIG_FILE).exists())
    config = load_config(run_dir)
    ff_dir = Path(args.feedforward) if args.feedforward else None
    if ff_dir is not None:
        ff_config = load_config(ff_dir)
        mismatch = setting_mismatch(config.to_dict(), ff_config.to_dict())
        if mismatch or ff_config.recurrent:
            raise SystemExit(
                f"--feedforward {ff_dir}: not a feed-forward run on the same setting "
                f"(differs in {mismatch or ['recurrent']})"
            )

    env_kwargs = {**config.env_kwargs, **config.eval_env_kwargs}
    base = dilemmax.make(args.env, **env_kwargs)
    # The run's configuration overrides (say a pollution threshold) apply to evaluation too.
    template = base.sample_config(jax.random.PRNGKey(0))
    env = ConfiguredEnv(base, overrides_as_arrays(config.env_config, template))
    populations = {RL2: TrainedPolicy.load(run_dir)}
    if ff_dir is not None:
        populations[FEEDFORWARD] = TrainedPolicy.load(ff_dir)
    populations["random"] = random_policy
    for name, policy in base.scripted_policies().items():
        if name == "greedy" or (args.references and name != "random"):
            populations[f"{name} (scripted)"] = policy

    rows, results = [], {}
    for name, policy in populations.items():
        result = evaluate(env, policy, args.env, args.episodes)
        mean, low, high = interval(result["trials"].mean(-1))
        per_apple = mean / result["apples"] if result["apples"] else float("nan")
        rows.append([name, mean, f"[{low:.1f}, {high:.1f}]", result["apples"], per_apple])
        results[name] = result
        print(rows[-1], flush=True)

    rl2_trials = results[RL2]["trials"]
    num_trials = rl2_trials.shape[1]
    trial_header = [
        "trial",
        "RL^2 collective return",
        *(f"RL^2 {k}" for k in results[RL2]["knowledge"]),
    ]
    if ff_dir is not None:
        trial_header.append("IPPO collective return")
    trial_rows = []
    for k in range(num_trials):
        row = [k + 1, float(rl2_trials[:, k].mean())]
        row += [float(v[:, k].mean()) for v in results[RL2]["knowledge"].values()]
        if ff_dir is not None:
            row.append(float(results[FEEDFORWARD]["trials"][:, k].mean()))
        trial_rows.append(row)

    score = {row[0]: row[1] for row in rows}
    apples = {row[0]: row[3] for row in rows}
    rl2 = score[RL2]
    bars = max(score["random"], score["greedy (scripted)"])
    apple_bar = max(apples["random"], apples["greedy (scripted)"])
    lines = [gain_line("RL^2", rl2_trials)]
    if ff_dir is not None:
        lines.append(gain_line("Feed-forward IPPO (control)", results[FEEDFORWARD]["trials"]))
        diff = rl2_trials.mean(-1) - results[FEEDFORWARD]["trials"].mean(-1)
        d_mean, d_low, d_high = interval(diff, seed=9)
        verdict = (
            "**RL^2 higher, the interval excludes zero**."
            if d_low > 0
            else "**RL^2 higher**, but the interval does not exclude zero."
            if d_mean > 0
            else "RL^2 NOT higher."
        )
        lines.append(
            f"- RL^2 minus feed-forward IPPO, mean collective return per trial (paired, same "
            f"episodes): {d_mean:.2f}, 95% bootstrap interval [{d_low:.2f}, {d_high:.2f}] "
            f"({rl2:.2f} vs {score[FEEDFORWARD]:.2f}): {verdict}"
        )
    lines += [
        f"- Versus random and greedy (mean collective return per trial): {rl2:.2f} vs "
        f"{score['random']:.2f} and {score['greedy (scripted)']:.2f}: "
        + ("**beats both**." if rl2 > bars else "does NOT beat both."),
        f"- Apples eaten per trial (team): {apples[RL2]:.2f} vs the better of random and greedy "
        f"{apple_bar:.2f}: " + ("**more**." if apples[RL2] > apple_bar else "NOT more."),
    ]
    baseline_path = Path(args.baseline) if args.baseline else None
    baseline = recorded_baseline(baseline_path) if baseline_path else None
    if baseline is not None:
        lines.append(
            f"- Versus the recorded feed-forward IPPO (`{baseline_path}`): {rl2:.2f} vs "
            f"{baseline:.2f} mean collective return per trial: "
            + ("**higher**." if rl2 > baseline else "NOT higher.")
        )
    costs = [cost_line("RL^2", run_dir, config)]
    if ff_dir is not None:
        costs.append(cost_line("Feed-forward IPPO", ff_dir, ff_config))

    population_header = [
        "population",
        "mean collective return per trial",
        "95% bootstrap CI",
        "apples per trial (team)",
        "points per apple",
    ]
    population_table = table(population_header, rows)
    trial_table = table(trial_header, trial_rows)
    default_out = RESULTS / f"learning_{args.env}_rl2_{run_dir.name}.md"
    out = Path(args.out) if args.out else default_out
    out.write_text(
        f"""# Learning evidence: {args.env}, recurrent PPO (RL^2) on held-out configurations

Command: `{command_line()}`

Machine: {machine_note()}. Network: embedding {config.embed_dim} per code, conv features
{config.conv_features}, hidden {config.hidden}; reward `{config.reward}`. Training env options
{json.dumps(config.env_kwargs)}; evaluation env options {json.dumps(env_kwargs)}, configuration
overrides {json.dumps(config.env_config)}. A run stopped early is evaluated at its last
checkpoint. Evaluation: {args.episodes} episodes per population, trained policies sampling (not
greedy), the same key for every population (so the same configurations); intervals resample
episodes.

Training (run folders under `runs/`, not committed; config.json, metrics.jsonl, curve.png):

{chr(10).join(costs)}

{chr(10).join(lines)}

## Populations

{population_table}

## Trial by trial (means over episodes)

{trial_table}
"""
    )
    print(f"written {out}")


if __name__ == "__main__":
    main()
