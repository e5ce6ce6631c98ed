"""Trains the zoo shipped in dilemmax/agents/zoo_runs/ and writes its manifest.

    python benchmarks/scenarios/train_zoo.py                      # every population below
    python benchmarks/scenarios/train_zoo.py --only moral_hazard  # one game
    python benchmarks/scenarios/train_zoo.py --only open_harvest/mappo  # one population
    python benchmarks/scenarios/train_zoo.py --zoo /tmp/zoo       # somewhere else

Each population is one `dilemmax train` run with two training seeds (vmapped in one program),
trained in self-play on the game's train split with small networks and without the agent-id
input (so a population also sits in a scenario, whose focal seats are a subset of the game's).
Only what a seat needs is kept: config.json, the last checkpoint and metrics.jsonl. The manifest
names each seed as its own population (``<game>/<algo>_s<k>``) with the run folder that holds
it, the command that trained it and the digest of the run's files, which scenario hashes
include. The shipped MAPPO populations of the grid games were trained one seed per run (run
folders ``<algo>_s<k>``), when two vmapped seeds stalled XLA's CPU runtime (benchmarks/xla_stall/;
``import dilemmax`` now sets the XLA flag that cures it); their manifest entries name those
folders, and retraining a population replaces its old folders.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from dilemmax.agents import zoo
from dilemmax.envs.registry import env_version

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_ZOO = ROOT / "dilemmax" / "agents" / "zoo_runs"
SEEDS = 2
SMALL = {"agent_id": False, "hidden": 32, "keep_checkpoints": 1, "progress": False,
         "num_seeds": SEEDS, "eval_every": 1000, "checkpoint_every": 1000}  # fmt: skip
# game -> algo -> extra settings. The grid games' budgets are small next to their learning runs
# (benchmarks/results/learning_open_*): enough to move off random, kept to minutes on 2 cores.
GRID = {"total_timesteps": 200_000, "reward": "team", "conv_features": []}
POPULATIONS = {
    "consequence": {
        "ippo": {"total_timesteps": 300_000},
        "mappo": {"total_timesteps": 300_000},
    },
    "moral_hazard": {
        "ippo": {"total_timesteps": 300_000},
        "mappo": {"total_timesteps": 300_000},
        "rl2": {"total_timesteps": 300_000, "recurrent": True, "gru_hidden": 32},
        # Every population above reads its case off the public utilities and never queries (the
        # babbling equilibrium of benchmarks/results/learning_moral_hazard_team.md). This one
        # learns the work move only, its warning and final choice scripted (the learner
        # transform, which a seat loading it plays too), on the team's reward where querying
        # pays (uninformative mapping, w_T = 1, k = 0.05): a partner who queries and warns.
        "ippo_followup": {
            "total_timesteps": 300_000,
            "reward": "team",
            "env_kwargs.mapping": "uninformative",
            "env_config.w_team": 1.0,
            "env_config.cost": 0.05,
            "learner_transform": "dilemmax.envs.moral_hazard.policies:with_scripted_followup",
        },
    },
    "open_harvest": {"ippo": GRID, "mappo": GRID},
    "open_cleanup": {"ippo": GRID, "mappo": GRID},
}
KEEP = ("config.json", "metrics.jsonl")


def command(game: str, algo: str, settings: dict, out: Path) -> list[str]:
    base = {"rl2": "ippo", "ippo_followup": "ippo"}.get(algo, algo)
    sets = {**SMALL, **settings}
    args = [sys.executable, "-m", "dilemmax.cli", "train", game, "--algo", base, "--out", str(out)]
    for key, value in sets.items():
        text = json.dumps(value) if isinstance(value, list) else str(value)
        args += ["--set", f"{key}={text}"]
    return args


def prune(run: Path) -> None:
    """Keeps config.json, metrics.jsonl and the newest checkpoint."""
    checkpoints = sorted((run / "checkpoints").glob("ckpt_*"))
    for path in run.iterdir():
        if path.name not in (*KEEP, "checkpoints"):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    for old in checkpoints[:-1]:
        shutil.rmtree(old) if old.is_dir() else old.unlink()


def train_run(game: str, algo: str, name: str, settings: dict, folder: Path) -> tuple[str, float]:
    """Trains one run folder ``<game>/<name>``; returns its command as shown and its seconds."""
    run = folder / game / name
    if run.exists():
        shutil.rmtree(run)
    run.parent.mkdir(parents=True, exist_ok=True)
    args = command(game, algo, settings, run)
    start = time.time()
    subprocess.run(args, check=True, cwd=ROOT)
    prune(run)
    return " ".join(["dilemmax", *args[3:]]).replace(str(folder), "<zoo>"), time.time() - start


def entry(game: str, algo: str, run: str, seed: int, shown: str, seconds: float, folder: Path):
    digest = zoo.run_digest(folder / game / run)
    return {"run": f"{game}/{run}", "seed": seed, "game": game, "algo": algo, "command": shown,
            "train_seconds": round(seconds, 1), "digest": digest,
            "env_version": env_version(game)}  # fmt: skip


def train(game: str, algo: str, settings: dict, folder: Path) -> dict:
    """The manifest entries of population ``game/algo``, one per seed of its one run."""
    shown, seconds = train_run(game, algo, algo, settings, folder)
    return {f"{game}/{algo}_s{seed}": entry(game, algo, algo, seed, shown, seconds, folder)
            for seed in range(SEEDS)}  # fmt: skip


def remove_replaced(old: dict, new: dict, folder: Path) -> None:
    """Removes the run folders of ``old`` entries that no ``new`` entry names (a population
    once trained one seed per run, ``<algo>_s<k>``, retrained as one run)."""
    kept = {e["run"] for e in new.values()}
    for run in {e["run"] for e in old.values()} - kept:
        if (folder / run).is_dir():
            shutil.rmtree(folder / run)


def retire(manifest: dict, folder: Path) -> dict:
    """The manifest without populations no longer listed above (their run folders removed)."""
    kept = {}
    for name, entry in manifest.items():
        if entry.get("algo") in POPULATIONS.get(entry.get("game"), {}):
            kept[name] = entry
        elif (folder / entry["run"]).is_dir():
            shutil.rmtree(folder / entry["run"])
    return kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", type=Path, default=DEFAULT_ZOO)
    parser.add_argument("--only", nargs="*", help="games or game/algo populations to (re)train; "
                        "the others are kept")  # fmt: skip
    parser.add_argument("--scale", type=float, default=1.0, help="budget multiplier (a dry run)")
    args = parser.parse_args()
    args.zoo.mkdir(parents=True, exist_ok=True)
    manifest = retire(zoo.manifest(args.zoo), args.zoo)
    for game, algos in POPULATIONS.items():
        for algo, settings in algos.items():
            if args.only and game not in args.only and f"{game}/{algo}" not in args.only:
                continue
            print(f"training {game}/{algo}", flush=True)
            old = {k: v for k, v in manifest.items()
                   if (v.get("game"), v.get("algo")) == (game, algo)}  # fmt: skip
            manifest = {k: v for k, v in manifest.items() if k not in old}
            scaled = {**settings, "total_timesteps": int(settings["total_timesteps"] * args.scale)}
            new = train(game, algo, scaled, args.zoo)
            remove_replaced(old, new, args.zoo)
            manifest.update(new)
            (args.zoo / zoo.MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    print(f"zoo: {len(manifest)} populations in {args.zoo}")


if __name__ == "__main__":
    main()
