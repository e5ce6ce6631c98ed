"""What the default XLA flag costs: the same work with and without
``--xla_cpu_enable_concurrency_optimized_scheduler=false`` (dilemmax/xla_defaults.py).

XLA reads its flags once per process, so each side runs in a fresh process, and the sides
alternate (A B B A A B ...) so that a drift in the machine's load falls on both. Each process
compiles its work first (not timed), then times ``--repeats`` calls, each blocked on, of:

- ``train``: one jitted chunk of IPPO updates on moral_hazard (64 envs x 16 steps, 4 updates);
- ``grid``: ``jax.jit(jax.vmap(env.step))`` on open_cleanup, 256 envs, 20 steps per call, with
  the observations consumed (summed) so none is left out.

Run on an otherwise idle machine (``uptime`` is recorded in the output):

    python benchmarks/xla_stall/flag_cost.py --rounds 4 --out benchmarks/results/xla_flag_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

FLAG = "xla_cpu_enable_concurrency_optimized_scheduler"
SIDES = {"flag (default)": "", "no flag": f"--{FLAG}=true"}


def child(work: str, repeats: int) -> dict:
    """Times ``work`` in this process (XLA_FLAGS as the parent set it)."""
    import jax
    import jax.numpy as jnp

    import dilemmax

    if work == "train":
        from dilemmax.train.configure import make_config
        from dilemmax.train.ppo import Trainer

        config = make_config("moral_hazard", "ippo", {"num_envs": 64, "num_steps": 16})
        trainer = Trainer(config)
        state = jax.jit(trainer.init)(jax.random.key(0))

        def chunk(state):
            return jax.lax.fori_loop(0, 4, lambda _, s: trainer.update(s)[0], state)

        run = jax.jit(chunk)
        state = jax.block_until_ready(run(state))  # compile (not timed)

        def once():
            nonlocal state
            state = jax.block_until_ready(run(state))

        per_call = 64 * 16 * 4
    else:
        env = dilemmax.make("open_cleanup")
        keys = jax.random.split(jax.random.key(0), 256)
        _, states = jax.jit(jax.vmap(env.reset))(keys)
        step = jax.vmap(env.step)

        def steps(carry):
            states, key = carry

            def body(c, _):
                states, key = c
                key, k_act, k_step = jax.random.split(key, 3)
                actions = {
                    a: jax.random.randint(jax.random.fold_in(k_act, i), (256,), 0, 4)
                    for i, a in enumerate(env.agents)
                }
                obs, states, rewards, _, _ = step(jax.random.split(k_step, 256), states, actions)
                used = sum(jnp.sum(o, dtype=jnp.float32) for o in obs.values())
                return (states, key), used + rewards[env.agents[0]].sum()

            (states, key), used = jax.lax.scan(body, (states, key), None, length=20)
            return (states, key), used.sum()

        run = jax.jit(steps)
        carry, used = run((states, jax.random.key(1)))
        jax.block_until_ready(used)  # compile (not timed)

        def once():
            nonlocal carry
            carry, used = run(carry)
            jax.block_until_ready(used)

        per_call = 256 * 20
    walls = []
    cpu_start = time.process_time()
    for _ in range(repeats):
        start = time.perf_counter()
        once()
        walls.append(time.perf_counter() - start)
    cpu = time.process_time() - cpu_start
    return {"wall_s": walls, "cpu_s": cpu, "steps_per_call": per_call}


def run_side(side: str, work: str, repeats: int) -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = SIDES[side]
    done = subprocess.run(
        [sys.executable, __file__, "--child", work, "--repeats", str(repeats)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="processes per side and work")
    parser.add_argument("--repeats", type=int, default=10, help="timed calls per process")
    parser.add_argument("--work", default="train,grid")
    parser.add_argument("--out", help="also write the rows here (JSON)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.repeats)))
        return
    rows = []
    order = list(SIDES)
    for work in args.work.split(","):
        for r in range(args.rounds):
            for side in order if r % 2 == 0 else order[::-1]:
                result = run_side(side, work, args.repeats)
                wall = sorted(result["wall_s"])[len(result["wall_s"]) // 2]
                rows.append({"work": work, "round": r, "side": side, **result})
                rate = result["steps_per_call"] / wall
                line = f"{work:5s} round {r} {side:15s} median {wall * 1e3:8.1f} ms/call"
                print(f"{line} {rate:12,.0f} steps/s  cpu {result['cpu_s']:.2f} s", flush=True)
    summary = {}
    for work in args.work.split(","):
        for side in SIDES:
            walls = [min(r["wall_s"]) for r in rows if r["work"] == work and r["side"] == side]
            summary[f"{work} / {side}"] = sorted(walls)[len(walls) // 2]
    load = os.getloadavg()
    print(json.dumps(summary, indent=1), "load", load)
    if args.out:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        record = {
            "rows": rows,
            "summary_best_wall_s": summary,
            "load": load,
            "children_cpu_s": usage.ru_utime + usage.ru_stime,
            "argv": sys.argv[1:],
        }
        Path(args.out).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
