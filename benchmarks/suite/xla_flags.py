"""Compile time of representative test programs under candidate XLA flag sets (the tests' flags
live in the root conftest.py). Each flag set runs in its own process (XLA reads XLA_FLAGS once),
the sets alternate round by round, and each process checks its results against the first set's.

    python benchmarks/suite/xla_flags.py --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

# The suite's flags before the fusion-emitter choice (conftest.py holds the current ones).
BASE = [
    "--xla_backend_optimization_level=0",
    "--xla_llvm_disable_expensive_passes=true",
    "--xla_disable_hlo_passes=constant_folding",
]
CANDIDATES = {
    "tests today": [],
    "no fusion emitters": ["--xla_cpu_use_fusion_emitters=false"],
    "no simplification": ["--xla_disable_hlo_passes=constant_folding,simplification,algsimp"],
    "no loop passes": [
        "--xla_disable_hlo_passes=constant_folding,simplify-while-loops,"
        "while-loop-invariant-code-motion,post_scatter_expansion_simplification"
    ],
}


def child() -> None:
    import jax
    import jax.numpy as jnp

    import dilemmax
    from dilemmax.envs.rollout import run_episode

    out = {}
    for env_id in ("open_cleanup", "moral_hazard"):
        env = dilemmax.make(env_id)
        policies = list(env.scripted_policies().values())

        def episode(index, key, env=env, policies=policies):
            policy = lambda k, o: jax.lax.switch(index, policies, k, o).astype(jnp.int32)
            rollout = run_episode(env, policy, key, num_steps=min(env.max_steps, 100))
            return rollout.valid.sum(), env.episode_metrics(rollout)

        indices = jnp.arange(len(policies))
        keys = jax.random.split(jax.random.key(8), len(policies))
        lowered = jax.jit(jax.vmap(episode)).lower(indices, keys)
        start = time.perf_counter()
        compiled = lowered.compile()
        compile_s = time.perf_counter() - start
        start = time.perf_counter()
        result = jax.block_until_ready(compiled(indices, keys))
        run_s = time.perf_counter() - start
        leaves = [float(jnp.asarray(x, jnp.float32).sum()) for x in jax.tree.leaves(result)]
        out[env_id] = {"compile_s": compile_s, "run_s": run_s, "checksum": leaves}
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", nargs="*", help="candidate names to try (default all)")
    args = parser.parse_args()
    names = args.only or list(CANDIDATES)
    rows = {name: [] for name in names}
    reference = None
    for _ in range(args.rounds):
        for name in names:
            env = dict(os.environ, XLA_FLAGS=" ".join(BASE + CANDIDATES[name]))
            env.pop("JAX_COMPILATION_CACHE_DIR", None)
            done = subprocess.run(
                [sys.executable, __file__, "--child"], env=env, capture_output=True, text=True
            )
            if done.returncode:
                print(name, "failed:", done.stderr.strip().splitlines()[-1:])
                continue
            result = json.loads(done.stdout.strip().splitlines()[-1])
            checks = {k: v["checksum"] for k, v in result.items()}
            reference = reference or checks
            same = checks == reference
            rows[name].append(result)
            print(
                f"{name:20s} "
                + " ".join(
                    f"{k}: compile {v['compile_s']:5.2f} s run {v['run_s']:5.3f} s"
                    for k, v in result.items()
                )
                + ("" if same else "  RESULTS DIFFER"),
                flush=True,
            )
    with os.popen("uptime") as up:
        print(up.read().strip())


if __name__ == "__main__":
    if "--child" in sys.argv:
        child()
    else:
        main()
