"""Self-play return against scenario return: which populations generalise, exploit or collapse.

    python benchmarks/scenarios/zoo_vs_scenarios.py --games consequence moral_hazard \
        --scenario-trained runs/scen   # also train one population per game on the train set

For every game, every zoo population (self-play trained) and, with ``--scenario-trained``, one
IPPO population trained against the game's train scenario set (``dilemmax train scenarios``,
same budget and network as the zoo's IPPO) is scored

* in self-play: the population in every seat of the full game (held-out split where the game
  has one), per-capita return;
* on each test scenario: its focal seats against the scenario's background, focal per-capita
  return with a 95% t interval, and the normalised score against random and the best population.

The table marks, per test scenario, whether the populations' order differs from their
self-play order (a rank reversal: self-play training and scenario training rank differently).
Writes benchmarks/results/scenarios_zoo.md (and .json) with the command, machine and load.
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
import numpy as np

from dilemmax.agents import zoo
from dilemmax.agents.trained import TrainedPolicy
from dilemmax.envs.policies import random_policy
from dilemmax.envs.registry import make
from dilemmax.envs.rollout import run_episodes
from dilemmax.scenarios import evaluate as E
from dilemmax.scenarios.registry import scenario_set

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
SCENARIO_TRAINING = {  # the zoo's IPPO settings, trained against the train set instead
    "agent_id": False, "hidden": 32, "keep_checkpoints": 1, "progress": False,
    "eval_every": 1000, "checkpoint_every": 1000,
}  # fmt: skip


def self_play_return(game: str, options: dict, policy, key, episodes: int, num_steps) -> float:
    env = make(game, **options)
    _, metrics = run_episodes(env, policy, key, episodes, num_steps=num_steps)
    return float(np.mean(np.asarray(metrics["return"])))


def train_on_scenarios(game: str, budget: int, folder: Path) -> Path:
    run = folder / f"{game}_scenario_ippo"
    if (run / "config.json").is_file():
        return run
    sets = {**SCENARIO_TRAINING, "total_timesteps": budget, "env_kwargs.game": game,
            "env_kwargs.scenario_set": "train"}  # fmt: skip
    if game.startswith("open_"):
        sets.update({"reward": "team", "conv_features": "[]"})
    args = [sys.executable, "-m", "dilemmax.cli", "train", "scenarios", "--out", str(run)]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    subprocess.run(args, check=True, cwd=ROOT)
    return run


def populations_of(game: str, scenario_run: Path | None) -> dict:
    env = make(game)
    manifest = zoo.manifest()
    pops = {name.split("/", 1)[1]: zoo.load(name, env=env, greedy=False)
            for name in sorted(manifest) if manifest[name]["game"] == game}  # fmt: skip
    if scenario_run is not None:
        pops["scenario_ippo_s0"] = TrainedPolicy.load(scenario_run, seed=0)
    pops["random"] = random_policy
    return pops


def game_rows(game: str, args, key, scenario_run) -> tuple[list[dict], dict]:
    test = scenario_set(game, "test")
    env = test.build()
    pops = populations_of(game, scenario_run)
    options = dict(test.scenarios[0].options)
    scored = {name: E.score_policy(test, policy, key, args.episodes, env, num_steps=args.num_steps)
              for name, policy in pops.items()}  # fmt: skip
    refs = E.references_from(scored)  # each population scored once, its rows the references' own
    rows = []
    for name, policy in pops.items():
        sp = self_play_return(game, options, policy, key, args.episodes, args.num_steps)
        scores = E.summary_rows(scored[name], refs)
        rows.append({"game": game, "population": name, "self_play": sp, "scenarios": scores})
    return rows, refs


def reversals(rows: list[dict]) -> dict[str, bool]:
    """scenario -> whether the populations' order there differs from their self-play order."""
    learned = [r for r in rows if r["population"] != "random"]
    by_self = [r["population"] for r in sorted(learned, key=lambda r: -r["self_play"])]
    out = {}
    for s, score in enumerate(learned[0]["scenarios"] if learned else []):
        order = sorted(learned, key=lambda r: -r["scenarios"][s]["mean"])
        out[score["scenario"]] = [r["population"] for r in order] != by_self
    return out


def _norm(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown(all_rows: dict[str, list[dict]], flips: dict, header: str) -> str:
    lines = [header, ""]
    for game, rows in all_rows.items():
        scenarios = [s["scenario"] for s in rows[0]["scenarios"]]
        lines += [f"## {game}", "", "| population | self-play | " + " | ".join(
            f"{s.split('/', 1)[1]} (norm.)" for s in scenarios) + " |",
            "|---|---|" + "---|" * len(scenarios)]  # fmt: skip
        for r in rows:
            cells = [f"{x['mean']:.3f} ({_norm(x['normalised'])})" for x in r["scenarios"]]
            lines.append(
                f"| {r['population']} | {r['self_play']:.3f} | " + " | ".join(cells) + " |"
            )
        flipped = [s.split("/", 1)[1] for s in scenarios if flips[game].get(s)]
        lines += ["", "Order differs from self-play on: " + (", ".join(flipped) or "none"), ""]
        lines += [
            "Digests: " + ", ".join(f"{s['scenario']}={s['digest']}" for s in rows[0]["scenarios"]),
            "",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", nargs="+", default=["consequence", "moral_hazard"])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--num-steps", type=int, default=None, help="cap episode length")
    parser.add_argument("--scenario-trained", type=Path, help="folder for scenario-trained runs")
    parser.add_argument("--budget", type=int, default=300_000, help="scenario training steps")
    parser.add_argument("--out", type=Path, default=RESULTS / "scenarios_zoo.md")
    args = parser.parse_args()
    key = jax.random.key(0)
    start = time.time()
    all_rows, flips, refs = {}, {}, {}
    for game in args.games:
        run = None
        if args.scenario_trained is not None:
            run = train_on_scenarios(game, args.budget, args.scenario_trained)
        all_rows[game], refs[game] = game_rows(game, args, key, run)
        flips[game] = reversals(all_rows[game])
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    header = (
        "# Zoo populations: self-play return against test-scenario return\n\n"
        f"Command: `python {' '.join(sys.argv)}`\n\n"
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU(s), jax {jax.__version__} on "
        f"{jax.default_backend()}, load average {load} at the end, {time.time() - start:.0f} s. "
        f"{args.episodes} episodes per population and scenario, key 0. Cells: focal per-capita "
        "return (normalised score: 0 = random focal agents, 1 = the best population listed)."
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(markdown(all_rows, flips, header))
    payload = {"rows": all_rows, "reversals": flips, "references": refs}
    args.out.with_suffix(".json").write_text(json.dumps(payload, indent=1, default=str))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
