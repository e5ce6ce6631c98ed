"""Trains the zoo shipped in dilemmax/agents/zoo_runs/ and writes its manifest.

    python benchmarks/scenarios/train_zoo.py                      # every population below
    python benchmarks/scenarios/train_zoo.py --only moral_hazard  # one game
    python benchmarks/scenarios/train_zoo.py --zoo /tmp/zoo       # somewhere else

Each population is one `dilemmax train` run with two training seeds (vmapped in one program),
trained in self-play on the game's train split with small networks and without the agent-id
input (so a population also sits in a scenario, whose focal seats are a subset of the game's).
Only what a seat needs is kept: config.json, the last checkpoint and metrics.jsonl. The manifest
names each seed as its own population (``<game>/<algo>_s<k>``) with the command that trained it
and the digest of the run's files, which scenario hashes include.
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

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_ZOO = ROOT / "dilemmax" / "agents" / "zoo_runs"
SEEDS = 2
SMALL = {"agent_id": False, "hidden": 32, "keep_checkpoints": 1, "progress": False,
         "num_seeds": SEEDS, "eval_every": 1000, "checkpoint_every": 1000}  # fmt: skip
# game -> algo -> extra settings. The grid games' budgets are small next to their learning runs
# (benchmarks/results/learning_open_*): enough to move off random, kept to minutes on 2 cores.
POPULATIONS = {
    "consequence": {
        "ippo": {"total_timesteps": 300_000},
        "mappo": {"total_timesteps": 300_000},
    },
    "moral_hazard": {
        "ippo": {"total_timesteps": 300_000},
        "mappo": {"total_timesteps": 300_000},
        "rl2": {"total_timesteps": 300_000, "recurrent": True, "gru_hidden": 32},
    },
    # MAPPO on open_harvest (two seeds) stalled here: every thread idle in XLA's CPU runtime
    # (jaxlib 0.10.2), the stall docs/distributed.md describes; the grid games ship IPPO only.
    "open_harvest": {
        "ippo": {"total_timesteps": 200_000, "reward": "team", "conv_features": []},
    },
    "open_cleanup": {
        "ippo": {"total_timesteps": 200_000, "reward": "team", "conv_features": []},
    },
}
KEEP = ("config.json", "metrics.jsonl")


def command(game: str, algo: str, settings: dict, out: Path) -> list[str]:
    base = "ippo" if algo == "rl2" else algo
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


def train(game: str, algo: str, settings: dict, folder: Path) -> dict:
    run = folder / game / algo
    if run.exists():
        shutil.rmtree(run)
    run.parent.mkdir(parents=True, exist_ok=True)
    args = command(game, algo, settings, run)
    start = time.time()
    subprocess.run(args, check=True, cwd=ROOT)
    prune(run)
    shown = " ".join(["dilemmax", *args[3:]]).replace(str(folder), "<zoo>")
    entries = {}
    for seed in range(SEEDS):
        entries[f"{game}/{algo}_s{seed}"] = {
            "run": f"{game}/{algo}",
            "seed": seed,
            "game": game,
            "algo": algo,
            "command": shown,
            "train_seconds": round(time.time() - start, 1),
            "digest": zoo.run_digest(run),
        }
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", type=Path, default=DEFAULT_ZOO)
    parser.add_argument("--only", nargs="*", help="games to (re)train; the others are kept")
    parser.add_argument("--scale", type=float, default=1.0, help="budget multiplier (a dry run)")
    args = parser.parse_args()
    args.zoo.mkdir(parents=True, exist_ok=True)
    manifest = zoo.manifest(args.zoo)
    for game, algos in POPULATIONS.items():
        if args.only and game not in args.only:
            continue
        for algo, settings in algos.items():
            print(f"training {game}/{algo}", flush=True)
            manifest = {k: v for k, v in manifest.items() if v.get("run") != f"{game}/{algo}"}
            scaled = {**settings, "total_timesteps": int(settings["total_timesteps"] * args.scale)}
            manifest.update(train(game, algo, scaled, args.zoo))
            (args.zoo / zoo.MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
    print(f"zoo: {len(manifest)} populations in {args.zoo}")


if __name__ == "__main__":
    main()
