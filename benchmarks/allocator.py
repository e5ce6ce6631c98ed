"""What the memory allocator costs XLA's compiles: glibc's ``malloc`` against jemalloc loaded
with ``LD_PRELOAD`` (Debian's ``libjemalloc2``), in fresh interpreters at XLA's default flags.

Two measurements, each A/B alternating, ``--rounds`` per side:

- ``compile``: the CPU seconds of compiling one program, two 50-step open_cleanup episodes of
  scripted seats (the program lowered first, untimed; the pools read from a store an untimed
  process filled, no compilation cache);
- ``train``: the wall seconds of the whole ``dilemmax train moral_hazard`` command at its
  defaults, each run with an empty compilation cache of its own.

The test suite preloads jemalloc into its workers for the same reason (conftest.py). Results:
benchmarks/results/allocator.md.

    python benchmarks/allocator.py [--rounds 2] [--library libjemalloc.so.2]
"""

from __future__ import annotations

import argparse
import ctypes.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from timing import load

COMPILE = """
import json, time
import jax
import dilemmax
from dilemmax.envs.rollout import run_episodes
env = dilemmax.make("open_cleanup")
policy = env.scripted_policies()["informed_cleaner"]
episodes = lambda key: run_episodes(env, policy, key, 2, num_steps=50, jit=False)
lowered = jax.jit(episodes).lower(jax.random.key(0))
start = time.process_time()
lowered.compile()
print(json.dumps({"seconds": time.process_time() - start}))
"""


def _environment(preload: str | None, pool_cache: str, jax_cache: str | None) -> dict:
    """This process's environment with XLA's defaults, the given preload and caches."""
    drop = ("XLA_FLAGS", "JAX_COMPILATION_CACHE_DIR", "LD_PRELOAD")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["DILEMMAX_POOL_CACHE"] = pool_cache
    if preload:
        env["LD_PRELOAD"] = preload
    if jax_cache:
        env["JAX_COMPILATION_CACHE_DIR"] = jax_cache
    return env


def compile_seconds(preload: str | None, pool_cache: str) -> float:
    """CPU seconds of the grid program's compile in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", COMPILE],
        env=_environment(preload, pool_cache, None),
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]


def train_seconds(preload: str | None, pool_cache: str, root: Path) -> float:
    """Wall seconds of ``dilemmax train moral_hazard`` with an empty compilation cache."""
    run, cache = root / "run", root / "jax"
    for folder in (run, cache):
        shutil.rmtree(folder, ignore_errors=True)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "dilemmax", "train", "moral_hazard", "--out", str(run),
         "--no-progress"],
        env=_environment(preload, pool_cache, str(cache)), capture_output=True, check=True,
    )  # fmt: skip
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--library", default=ctypes.util.find_library("jemalloc"))
    args = parser.parse_args()
    if not args.library:
        sys.exit("allocator.py: jemalloc not found (apt-get install libjemalloc2, or --library)")
    print(f"before: {load()}; jemalloc: {args.library}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        pools = str(root / "pools")
        compile_seconds(None, pools)  # fills the pool store, untimed
        for name, measure in (
            ("compile", lambda preload: compile_seconds(preload, pools)),
            ("train", lambda preload: train_seconds(preload, pools, root)),
        ):
            times = {"glibc": [], "jemalloc": []}
            for _ in range(args.rounds):
                times["glibc"].append(measure(None))
                times["jemalloc"].append(measure(args.library))
            row = {"measure": name, **{k: [round(t, 2) for t in v] for k, v in times.items()}}
            median = {k: statistics.median(v) for k, v in times.items()}
            print(
                f"{name:8} glibc {median['glibc']:6.2f} s, jemalloc {median['jemalloc']:6.2f} s "
                f"(medians of {args.rounds})",
                json.dumps(row),
                flush=True,
            )
    print(f"after: {load()}")


if __name__ == "__main__":
    main()
