"""What ``dilemmax.make`` of a grid game costs a fresh process, its pools built against read from
the pool store (dilemmax/envs/pool_store.py). Each run is a new interpreter that imports
dilemmax, then times ``dilemmax.make(env_id)`` alone (the import apart), at XLA's default flags:

- ``built``: ``DILEMMAX_POOL_CACHE=off``, the layouts and rules generated as before the store;
- ``stored``: the store holds the pools (an untimed process filled it first).

The two sides take turns (A/B, alternating, ``--rounds`` each), under two compilation caches: a
warm one (the generator's programs compiled by an untimed process first: a user's second command)
and none at all (a user's first command, or one without ``enable_compilation_cache``). Results:
benchmarks/results/pool_store.md.

    python benchmarks/pool_store.py [--rounds 3] [--envs open_cleanup open_harvest]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, sys, time
import dilemmax
start = time.perf_counter()
dilemmax.make(sys.argv[1])
print(json.dumps({"make_s": time.perf_counter() - start}))
"""


def make_seconds(env_id: str, pool_cache: str, jax_cache: str | None) -> float:
    """Seconds of ``dilemmax.make(env_id)`` in a fresh interpreter."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_COMPILATION_CACHE_DIR")
    }
    env["DILEMMAX_POOL_CACHE"] = pool_cache
    if jax_cache is not None:
        env |= {
            "JAX_COMPILATION_CACHE_DIR": jax_cache,
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        }
    out = subprocess.run(
        [sys.executable, "-c", CHILD, env_id], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["make_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--envs", nargs="+", default=["open_cleanup", "open_harvest"])
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as root:
        store, jax_cache = str(Path(root, "pools")), str(Path(root, "jax"))
        for env_id in args.envs:
            make_seconds(env_id, store, jax_cache)  # fills the store and the warm cache, untimed
            for cache_name, cache in (("warm", jax_cache), ("none", None)):
                times = {"built": [], "stored": []}
                for _ in range(args.rounds):
                    times["built"].append(make_seconds(env_id, "off", cache))
                    times["stored"].append(make_seconds(env_id, store, cache))
                row = {"env": env_id, "compilation_cache": cache_name}
                row |= {k: [round(t, 2) for t in v] for k, v in times.items()}
                rows.append(row)
                median = {k: statistics.median(v) for k, v in times.items()}
                summary = (
                    f"{env_id:13} cache {cache_name:4}: built {median['built']:6.2f} s, "
                    f"stored {median['stored']:5.2f} s (medians of {args.rounds})"
                )
                print(summary, json.dumps(row), flush=True)
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
