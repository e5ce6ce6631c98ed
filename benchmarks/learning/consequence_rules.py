"""consequence: an IPPO population trained per rule over the 228-context grid.

Setup: the benchmark game (n = 3, R = 3, W = 12), survival-lexicographic reward (M = 13; each
agent maximises its own utility, scaled by 1/13 for training), seats drawn at random over
wealth ranks. For each rule (AON, RE, DV, RP, PP) an IPPO population (3 agents, shared
parameters with agent-id input) trains on contexts drawn uniformly from the 228-context grid
under that rule; one compiled single-run program serves every (rule, seed) run.

Evaluation: every one of the 228 contexts under the run's rule, ``--eval-episodes`` episodes
each, sampled actions; the env's own metrics (fatality, targeted elimination, exploitation,
success, all-zero opening, round-one funding) averaged over contexts, episodes and seeds. The
same grid is played by the scripted ``random`` and ``threshold_aware`` populations for scale.

    python benchmarks/learning/consequence_rules.py
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from common import RESULTS, command_line, machine_note, run_grid, table

import dilemmax
from dilemmax.envs.consequence import constants as C
from dilemmax.envs.rollout import run_episodes
from dilemmax.train.configure import make_config
from dilemmax.train.envs import apply_config_overrides, config_grid
from dilemmax.train.ppo import make_train

METRICS = (
    "fatality",
    "targeted_elimination",
    "exploitation",
    "success",
    "collapse",
    "all_zero_opening",
    "round_one_funding",
)


def scripted_baseline(policy_name: str, episodes: int) -> dict[int, dict[str, float]]:
    env = dilemmax.make("consequence", rules=["AON"])
    policy = env.scripted_policies()[policy_name]
    grid = config_grid(env, "context_grid")
    out = {}
    for rule in range(C.NUM_RULES):
        configs = jax.vmap(lambda c, r=rule: apply_config_overrides(c, {"rule": r}))(grid)
        _, m = run_episodes(env, policy, jax.random.PRNGKey(rule), episodes, configs=configs)
        out[rule] = {k: float(np.mean(m[k])) for k in METRICS}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--timesteps", type=int, default=262_144)
    parser.add_argument("--eval-episodes", type=int, default=8)
    parser.add_argument("--out", default=str(RESULTS / "learning_consequence_rules.md"))
    args = parser.parse_args()

    config = make_config(
        "consequence",
        "ippo",
        {
            # The rule is overridden per run; the grid is the 228 contexts of one rule.
            "env_kwargs": {"rules": ["AON"]},
            "total_timesteps": args.timesteps,
            "eval_episodes": args.eval_episodes,
            "progress": False,
        },
    )
    train = make_train(config)
    trainer = train.trainer

    def train_run(key, env_config):
        state, metrics = train(key, env_config)
        returns = metrics["return/mean"]
        return state, {"first_return": returns[:3].mean(), "train_return": returns[-10:].mean()}

    def eval_run(params, env_config, key):
        outcomes = trainer.evaluate(params, env_config, jax.random.fold_in(key, 7))
        return {k: outcomes[k].astype(jnp.float32).mean() for k in METRICS}

    env_config = {"rule": jnp.arange(C.NUM_RULES, dtype=jnp.int32)}
    keys = jax.random.split(jax.random.PRNGKey(7), C.NUM_RULES * args.seeds)
    keys = keys.reshape(C.NUM_RULES, args.seeds, -1)
    t0 = time.perf_counter()
    out = run_grid(train_run, eval_run, keys, env_config)  # {name: float64[G, S]}
    seconds = time.perf_counter() - t0
    print(f"{C.NUM_RULES * args.seeds} runs in {seconds:.0f}s", flush=True)

    baselines = {
        name: scripted_baseline(name, args.eval_episodes) for name in ("random", "threshold_aware")
    }
    write_report(args, config, out, baselines, seconds)


def write_report(args, config, out, baselines, seconds) -> None:
    header = ["rule", "population"] + list(METRICS) + ["return (first -> last)"]
    rows, raw = [], {}
    for rule, name in enumerate(C.RULE_NAMES):
        learned = [float(out[k][rule].mean()) for k in METRICS]
        ret = f"{out['first_return'][rule].mean():.1f} -> {out['train_return'][rule].mean():.1f}"
        rows.append([name, "IPPO"] + learned + [ret])
        for base, values in baselines.items():
            rows.append([name, base] + [values[rule][k] for k in METRICS] + [""])
        raw[name] = {k: out[k][rule].tolist() for k in out}
    text = f"""# Learning evidence: consequence, an IPPO population per rule over the 228 contexts

Command: `{command_line()}`

Machine: {machine_note()}. {C.NUM_RULES * args.seeds} training runs (5 rules x {args.seeds}
seeds, keys split from `PRNGKey(7)`), run one after another, {seconds:.0f} s wall; each run
{config.num_updates} updates x {config.num_envs} envs x {config.num_steps} steps. Training
contexts: uniform over the 228-context grid (W = 12, n = 3) under the run's rule, seats drawn at
random over wealth ranks; reward: survival-lexicographic utility (M = 13), scaled by 1/13.

Evaluation: all 228 contexts under the run's rule, {args.eval_episodes} episodes each, sampled
actions, averaged over contexts, episodes and seeds (IPPO rows); the scripted `random` and
`threshold_aware` populations on the same grid for scale. Metrics are the env's
(`episode_metrics`): fatality = fraction of agents eliminated; targeted elimination = the rule
eliminated its named extreme (poorest under RP, richest under PP; 0 by definition elsewhere);
exploitation = a rank-identified elimination while the survivors could still have met T.
"return" is the mean per-agent training return (lexicographic utility, unscaled) over the first
3 and last 10 updates.

{table(header, rows)}

Raw numbers: `{args.out.replace(".md", ".json").split("/")[-1]}`.
"""
    with open(args.out, "w") as f:
        f.write(text)
    with open(args.out.replace(".md", ".json"), "w") as f:
        json.dump({"ippo": raw, "baselines": baselines}, f, indent=1)
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
