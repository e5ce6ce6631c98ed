"""What a play run's summary costs: the bootstrap intervals of every metric of every group, for
the consequence grid the papers sweep (228 configurations x 5 rules, every seat scripted, so no
model is called), as ``dilemmax play consequence --grid --episodes E`` writes them: 1,140
episodes at E = 1, 4,560 at E = 4. Two checkouts of dilemmax take turns (A/B, alternating, one
fresh process per run, XLA's default flags); each run reports the command's wall time and the
seconds inside ``summarize`` (compiling its program included). Results:
benchmarks/results/summary_bootstrap.md.

    python benchmarks/summary_bootstrap.py --checkouts OLD_TREE NEW_TREE [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# The child: the play command, with dilemmax.llm.api's summarize timed where the command calls it.
CHILD = """
import json, sys, time
import dilemmax.llm.api as api
from dilemmax.cli import main

inner, spent = api.summarize, []
def timed(*args, **kwargs):
    start = time.perf_counter()
    try:
        return inner(*args, **kwargs)
    finally:
        spent.append(time.perf_counter() - start)
api.summarize = timed
start = time.perf_counter()
code = main(["play", "consequence", "--seats", "scripted:fair_share", "--seat",
             "agent_0=scripted:all_zero", "--grid", "--envs", "1140", "--out", sys.argv[1],
             "--episodes", sys.argv[2], "--no-progress"])
print(json.dumps({"code": code, "wall_s": time.perf_counter() - start, "summary_s": sum(spent)}))
"""


def run(checkout: Path, out: Path, episodes: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(out), str(episodes)],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{checkout}: the play run failed: {done.stderr.strip()[-300:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["code"] != 0:
        raise SystemExit(f"{checkout}: dilemmax play exited with {result['code']}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkouts", nargs=2, type=Path, required=True, metavar="TREE")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    for tree in args.checkouts:
        if not (tree / "dilemmax" / "__init__.py").is_file():
            parser.error(f"{tree} holds no dilemmax package")
    print(f"load before: {os.getloadavg()[0]:.2f}")
    print("| episodes | round | checkout | play wall s | summary s |")
    print("| ---: | --- | --- | ---: | ---: |")
    with tempfile.TemporaryDirectory() as folder:
        for episodes in (1, 4):
            for round_index in range(args.rounds):
                for side, tree in enumerate(args.checkouts):
                    out = Path(folder) / f"run_{episodes}_{round_index}_{side}"
                    result = run(tree, out, episodes)
                    print(f"| {1140 * episodes:,} | {round_index + 1} | {tree} | "
                          f"{result['wall_s']:.1f} | {result['summary_s']:.2f} |")  # fmt: skip
    print(f"load after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
