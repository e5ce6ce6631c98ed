"""Incentive isolation: does a learning focal agent query exactly when its private margin is > 0?

Setup (the paper's incentive-isolation design, with a learner in the focal seat):
- moral_hazard, n = 2, primary weights (w_L, w_F, w_T) = (0.35, 0.15, 0.50), highest-unsafe
  mapping, private-share reward U_i = w_L L_i + w_F F_i + n alpha_i w_T T - k Q_i;
- seat 0 learns its work move (LOCAL / QUERY) with IPPO; its note and final choice are scripted
  (``with_scripted_followup``: correct warning after a query, then read the board); seat 1 is the
  scripted ``isolation_partner`` (it queries, warns the focal case, reads the board), so
  F_focal = 1 either way, QUERY + a correct note gives T = 1 and LOCAL gives T = 0;
- one independent training run per (k, alpha, seed), one after another with one compiled
  program; k in {0, 0.1, 0.2, 0.3}, alpha on a 0.025 grid.

Measured: the trained focal agent's query rate (sampled actions, ``--eval-episodes`` fresh
episodes per run), per alpha; the crossing of 50% by linear interpolation between neighbouring
alphas; compared with alpha*(k) = (w_L + k) / (n w_T) (pass: within 0.05).

    python benchmarks/learning/moral_hazard_isolation.py            # full sweep (~10-20 min CPU)
    python benchmarks/learning/moral_hazard_isolation.py --quick    # 2 costs, coarse alphas
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import matplotlib
import numpy as np
from common import RESULTS, command_line, machine_note, run_grid, table  # noqa: E402  (script folder)

from dilemmax.envs.moral_hazard import generator
from dilemmax.envs.moral_hazard.theory import alpha_star
from dilemmax.train.configure import make_config
from dilemmax.train.ppo import make_train

matplotlib.use("Agg")  # a script that only writes files
import matplotlib.pyplot as plt  # noqa: E402 (after the backend choice)


def crossing(alphas: np.ndarray, rates: np.ndarray) -> float:
    """The alpha where the query rate first crosses 0.5 upwards (linear interpolation)."""
    above = rates >= 0.5
    if above[0]:
        return float(alphas[0])
    idx = np.flatnonzero(above)
    if idx.size == 0:
        return float("nan")
    j = idx[0]
    a0, a1, r0, r1 = alphas[j - 1], alphas[j], rates[j - 1], rates[j]
    return float(a0 + (0.5 - r0) * (a1 - a0) / (r1 - r0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--costs", type=float, nargs="+", default=[0.0, 0.1, 0.2, 0.3])
    parser.add_argument("--alpha-step", type=float, default=0.025)
    parser.add_argument("--alpha-min", type=float, default=0.1)
    parser.add_argument("--alpha-max", type=float, default=0.9)
    parser.add_argument(
        "--window",
        type=float,
        default=0.15,
        help="alphas within this distance of alpha*(k) on the step grid (0: the min-max grid)",
    )
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--timesteps", type=int, default=65_536)
    parser.add_argument("--eval-episodes", type=int, default=512)
    parser.add_argument("--quick", action="store_true", help="2 costs, 0.05 alpha step, 1 seed")
    parser.add_argument("--out", default=str(RESULTS / "learning_moral_hazard_isolation.md"))
    args = parser.parse_args()
    if args.quick:
        args.costs, args.alpha_step, args.seeds = [0.0, 0.2], 0.05, 1

    if args.window > 0:
        offsets = np.arange(-args.window, args.window + 1e-9, args.alpha_step)
        alpha_grid = {k: np.round(alpha_star(2, k) + offsets, 4) for k in args.costs}
    else:
        grid = np.round(np.arange(args.alpha_min, args.alpha_max + 1e-9, args.alpha_step), 4)
        alpha_grid = {k: grid for k in args.costs}
    config = make_config(
        "moral_hazard",
        "ippo",
        {
            "env_kwargs": {"num_agents": 2, "payoff": "private", "mapping": "highest"},
            "learners": [0],
            "partner_policy": "isolation_partner",
            # Only the work move (LOCAL / QUERY) is learned; after a query the focal agent posts
            # the correct warning and reads the board (the paper's isolation design).
            "learner_transform": "dilemmax.envs.moral_hazard.policies:with_scripted_followup",
            "train_grid": None,
            "eval_grid": None,
            "total_timesteps": args.timesteps,
            "eval_episodes": args.eval_episodes,
            "progress": False,
        },
    )
    train = make_train(config)
    trainer = train.trainer

    def train_run(key, env_config):
        state, metrics = train(key, env_config)
        return state, {"final_return": metrics["return/learners"][-10:].mean()}

    def eval_run(params, env_config, key):
        outcomes = trainer.evaluate(params, env_config, jax.random.fold_in(key, 7))
        return {
            "query_rate": outcomes["query_by_agent"][:, 0].mean(),
            "team_success": outcomes["team_success"].mean(),
        }

    results = {}
    started = time.perf_counter()
    for k in args.costs:
        alphas = alpha_grid[k]
        grid = generator.incentive_grid(costs=[k], shares=list(alphas)).configs
        env_config = {"cost": grid.cost, "shares": grid.shares}
        keys = jax.random.split(jax.random.PRNGKey(int(round(k * 1000))), len(alphas) * args.seeds)
        keys = keys.reshape(len(alphas), args.seeds, -1)
        t0 = time.perf_counter()
        out = run_grid(train_run, eval_run, keys, env_config)
        rates = np.asarray(out["query_rate"]).mean(1)
        results[k] = {
            "alphas": alphas.tolist(),
            "query_rate": rates.tolist(),
            "query_rate_per_seed": np.asarray(out["query_rate"]).tolist(),
            "team_success": np.asarray(out["team_success"]).mean(1).tolist(),
            "crossing": crossing(alphas, rates),
            "alpha_star": float(alpha_star(2, k)),
            "seconds": time.perf_counter() - t0,
        }
        r = results[k]
        print(
            f"k={k:.2f}: crossing {r['crossing']:.3f} vs alpha* {r['alpha_star']:.3f} "
            f"({r['seconds']:.0f}s)",
            flush=True,
        )
    total = time.perf_counter() - started
    write_report(args, config, results, total)


def write_report(args, config, results, total_seconds) -> None:
    out = args.out
    png = out.replace(".md", ".png")
    fig, ax = plt.subplots(figsize=(7, 4))
    for k, r in results.items():
        line = ax.plot(r["alphas"], r["query_rate"], marker=".", label=f"k = {k:.2f}")[0]
        ax.axvline(r["alpha_star"], color=line.get_color(), ls="--", lw=0.8)
    ax.axhline(0.5, color="grey", lw=0.5)
    ax.set_xlabel("focal share alpha")
    ax.set_ylabel("learned query rate")
    ax.set_title("moral_hazard incentive isolation: IPPO focal agent (dashed: alpha*(k))")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)

    rows = []
    for k, r in results.items():
        gap = abs(r["crossing"] - r["alpha_star"])
        rows.append(
            [f"{k:.2f}", r["alpha_star"], r["crossing"], gap, "yes" if gap <= 0.05 else "NO"]
        )
    detail_rows = []
    for k, r in results.items():
        for a, q, t in zip(r["alphas"], r["query_rate"], r["team_success"], strict=True):
            detail_rows.append([f"{k:.2f}", f"{a:.3f}", f"{a - r['alpha_star']:+.3f}", q, t])
    num_runs = sum(len(r["alphas"]) for r in results.values()) * args.seeds
    text = f"""# Learning evidence: moral_hazard incentive isolation (IPPO focal agent)

Command: `{command_line()}`

Machine: {machine_note()}. Wall time {total_seconds:.0f} s for
{num_runs} training runs of {config.num_updates} updates x
{config.num_envs} envs x {config.num_steps} steps ({
        config.num_updates * config.num_envs * config.num_steps
    } env steps each), seeds per (k, alpha): {args.seeds} (keys derived from
`PRNGKey(round(1000 k))`).

Setup: n = 2, primary weights (w_L, w_F, w_T) = (0.35, 0.15, 0.50), highest-unsafe mapping,
private-share reward; seat 0 learns (IPPO, shared defaults of `make_config("moral_hazard")`:
lr {config.lr}, entropy {config.ent_coef}, gamma {config.gamma}); seat 1 plays the scripted
`isolation_partner`. Only the focal work move is learned (`learner_transform` =
`with_scripted_followup`: after a query the correct warning is posted and the final choice reads
the board; those scripted steps carry no policy gradient). A first attempt that let the learner
play note and final too never queried at any alpha: the note is only reached after a query, and
with an untrained note a query pays less than LOCAL, so the policy abandons QUERY before the
note is learned. Query rate: sampled actions of the trained
policy over {args.eval_episodes} fresh episodes per run, averaged over seeds. Crossing: linear
interpolation of the first upward crossing of 50%.

{table(["k", "alpha*(k)", "learned crossing", "abs. gap", "within 0.05"], rows)}

![query rate vs alpha]({png.split("/")[-1]})

Per run group (mean over seeds):

{table(["k", "alpha", "alpha - alpha*", "query rate", "team success"], detail_rows)}

Raw numbers: `{out.replace(".md", ".json").split("/")[-1]}`.
"""
    with open(out, "w") as f:
        f.write(text)
    with open(out.replace(".md", ".json"), "w") as f:
        json.dump({str(k): v for k, v in results.items()}, f, indent=1)
    print(f"written {out}")


if __name__ == "__main__":
    main()
