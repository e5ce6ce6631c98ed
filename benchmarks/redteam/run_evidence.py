"""Institutional red-teaming evidence: reference, populations, gap, ablations, safety case.

Steps (each writes under ``benchmarks/results/redteam/``):

1. the cooperative-refinement reference on all 228 contexts x 5 rules x 4 epsilons (exact);
2. populations over the grid: scripted (random, fair_share, threshold_aware, starve_then_cover,
   cooperative_tremble), the seated reference (eps = 0.10, a check that its gap is ~0), and an
   IPPO population trained per rule (as ``benchmarks/learning/consequence_rules.py`` does; its
   parameters are not stored there, so they are retrained here and saved);
3. the gap report: IAG with bootstrap CIs, contrasts, permutation tests, figures, the RP
   fingerprint, and the canonical instance's equilibrium set;
4. the ablation suite on the IPPO population (RP and PP, 17 contexts);
5. a sample safety case for a small deployment with dedicated evidence (IPPO, 300 episodes per
   context and rule).

    python benchmarks/redteam/run_evidence.py [--episodes 6] [--timesteps 131072]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

import dilemmax
from dilemmax.envs.consequence import constants as C
from dilemmax.envs.consequence.generator import context_table, cross_rules
from dilemmax.envs.rollout import run_episodes
from dilemmax.redteam import ablations as A
from dilemmax.redteam import gap, populations
from dilemmax.redteam import reference as R
from dilemmax.redteam import safety_case as SC
from dilemmax.redteam.figures import write_table
from dilemmax.redteam.inputs import context_index
from dilemmax.redteam.statistics import Population
from dilemmax.train.configure import make_config
from dilemmax.train.ppo import make_train

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "benchmarks" / "results" / "redteam"
SCRIPTED = ("random", "fair_share", "threshold_aware", "starve_then_cover", "cooperative_tremble")
DEPLOYMENT = [((1, 5, 6), 10), ((2, 4, 6), 6), ((3, 4, 5), 9), ((0, 4, 8), 8)]


def note() -> str:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return (
        f"{platform.machine()}, {os.cpu_count()} CPUs, jax {jax.__version__}, load average "
        f"{load} (shared machine, measured under load), commit {commit}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------- IPPO per rule
def train_ippo(timesteps: int, seed: int = 7) -> dict:
    """rule -> trained jittable policy (one seed per rule); parameters saved under OUT/ippo."""
    config = make_config(
        "consequence",
        "ippo",
        {
            "env_kwargs": {"rules": ["AON"]},
            "total_timesteps": timesteps,
            "progress": False,
        },
    )
    train = make_train(config)
    trainer = train.trainer
    train_j = jax.jit(lambda key, env_config: train(key, env_config)[0].params)
    out = {}
    (OUT / "ippo").mkdir(parents=True, exist_ok=True)
    for rule in range(C.NUM_RULES):
        key = jax.random.fold_in(jax.random.PRNGKey(seed), rule)
        params = train_j(key, {"rule": jnp.int32(rule)})
        name = C.RULE_NAMES[rule]
        (OUT / "ippo" / f"{name}.msgpack").write_bytes(serialization.to_bytes(params["actor"]))
        out[name] = trainer.policy_fn(params)
        log(f"  IPPO {name} trained")
    return out


# ---------------------------------------------------------------------------- steps
def step_reference() -> tuple[R.ReferenceTable, dict]:
    start = time.perf_counter()
    table = R.reference_grid()
    seconds = time.perf_counter() - start
    R.save_reference(table, OUT / "reference.npz")
    write_table(OUT / "reference", *R.summary_table(table))
    return table, {"seconds": seconds, "fallback_stages": table.fallback_stages}


def canonical_equilibria() -> dict:
    """The RP canonical instance: every round-one equilibrium and the selected one."""
    out = {}
    for rule in C.RULE_NAMES:
        solver = R.ReferenceSolver(rule)
        eqs = solver.stage_equilibria(3, C.CANONICAL_RESOURCES, C.CANONICAL_THRESHOLD)
        out[rule] = {
            "selected": list(solver.selected(3, C.CANONICAL_RESOURCES, C.CANONICAL_THRESHOLD)),
            "equilibria": len(eqs),
            "exploitative": [list(p) for p, o in eqs if o["exploitation"] > 0],
            "collapsing_or_lossy": [list(p) for p, o in eqs if o["survivors"] < 3],
        }
    return out


def step_ablations(ippo: dict, episodes: int) -> dict:
    play = A.arena_population(lambda env, arm, rule: ippo[rule])
    report = A.run_ablations(play, episodes=episodes, seed=0)
    (OUT / "ablations_ippo.json").write_text(json.dumps(report, indent=1))
    header, rows = A.ablation_table(report)
    write_table(OUT / "ablations_ippo", header, rows)
    return report


def step_safety_case(ippo: dict, table: R.ReferenceTable, episodes: int) -> dict:
    resources, thresholds = context_table(12, 3)
    idx = [context_index(w, t) for w, t in DEPLOYMENT]
    env = dilemmax.make("consequence")
    from dilemmax.envs.consequence.types import ConsequenceConfig

    grid = ConsequenceConfig(
        jnp.asarray(resources[idx]), jnp.asarray(thresholds[idx]), jnp.zeros(len(idx), jnp.int32)
    )
    metrics, rule_index, context_ix = {}, [], []
    for k, rule in enumerate(C.RULE_NAMES):
        _, m = run_episodes(
            env, ippo[rule], jax.random.PRNGKey(100 + k), episodes, cross_rules(grid, [rule])
        )
        for name in ("collapse", "exploitation", "fatality", "targeted_elimination"):
            metrics.setdefault(name, []).append(np.asarray(m[name]).reshape(-1))
        rule_index.append(np.full(len(idx) * episodes, k))
        context_ix.append(np.repeat(idx, episodes))
    pop = Population(
        "ippo",
        {k: np.concatenate(v) for k, v in metrics.items()},
        np.concatenate(rule_index),
        np.concatenate(context_ix),
        len(thresholds),
    )
    labels = [f"w={w} T={t}" for w, t in DEPLOYMENT]
    deployment = SC.Deployment(
        "IABench-CA sample deployment", idx, labels, list(C.RULE_NAMES), "IPPO per rule (this run)"
    )
    ur = table.ur_at(R.PRIMARY_EPSILON)
    reference_ur = {
        lbl: {r: float(ur[k, c]) for k, r in enumerate(C.RULE_NAMES)}
        for lbl, c in zip(labels, idx, strict=True)
    }
    case = SC.safety_case(pop, deployment, SC.Budgets(0.05, 0.05), reference_ur=reference_ur)
    SC.write_safety_case(case, OUT / "safety_case_ippo")
    return case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=6)
    parser.add_argument("--timesteps", type=int, default=131_072)
    parser.add_argument("--ablation-episodes", type=int, default=4)
    parser.add_argument("--case-episodes", type=int, default=300)
    parser.add_argument("--skip", nargs="*", default=[], help="steps to skip: ablations, case")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    summary = {"command": "python " + " ".join(sys.argv), "machine_start": note(), "seconds": {}}

    log("reference")
    table, info = step_reference()
    summary["reference"] = info
    summary["seconds"]["reference"] = info["seconds"]
    summary["canonical_equilibria"] = canonical_equilibria()

    pops = []
    for name in SCRIPTED:
        start = time.perf_counter()
        policy = dilemmax.make("consequence").scripted_policies()[name]
        pops.append(populations.grid_population(name, policy, args.episodes, seed=1))
        summary["seconds"][f"play {name}"] = time.perf_counter() - start
        log(f"played {name}")
    start = time.perf_counter()
    policy = populations.reference_policy_for(R.PRIMARY_EPSILON)
    pops.append(populations.grid_population("reference@0.1", policy, args.episodes, seed=2))
    summary["seconds"]["play reference"] = time.perf_counter() - start
    log("played the seated reference")
    start = time.perf_counter()
    ippo = train_ippo(args.timesteps)
    summary["seconds"]["train IPPO (5 rules)"] = time.perf_counter() - start
    start = time.perf_counter()
    pops.append(populations.grid_population("ippo", ippo, args.episodes, seed=3))
    summary["seconds"]["play ippo"] = time.perf_counter() - start
    log("played IPPO")
    for pop in pops:
        pop.save(OUT / f"population_{pop.name.replace('@', '_at_')}.npz")

    start = time.perf_counter()
    report = gap.write_gap_report(pops, table, OUT / "gap")
    summary["seconds"]["gap report"] = time.perf_counter() - start
    summary["population_x_rule"] = report.get("population_x_rule")
    summary["fingerprints"] = {n: e["fingerprint"] for n, e in report["populations"].items()}
    log("gap report written")

    if "ablations" not in args.skip:
        start = time.perf_counter()
        step_ablations(ippo, args.ablation_episodes)
        summary["seconds"]["ablations"] = time.perf_counter() - start
        log("ablations written")
    if "case" not in args.skip:
        case = step_safety_case(ippo, table, args.case_episodes)
        summary["certified_rules"] = case["certification"]["certified_rules"]
        log("safety case written")
    summary["machine_end"] = note()
    (OUT / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    log("done")


if __name__ == "__main__":
    main()
