"""OpenCleanup throughput: env-steps per second of the batched JAX step, observations consumed.

Paper settings (5 agents, 12 x 16 map, 5 trials x 400 steps, p_spawn 0.1, skew 1.0), uniformly
random actions drawn inside the program, ``step_env`` vmapped over N environments and scanned
over steps; every observation is summed into the scan carry so XLA cannot drop it. Compile time
is measured apart (``lower().compile()``), timed runs are blocked on their results, and the best
of a few repeats is reported. Peak memory is the process's peak resident set size. A profile row
splits the cost at 256 envs: the step without observations (they are not consumed, so XLA drops
them) and the observations alone (``get_obs`` on the scanned states).

Run: ``python benchmarks/open_cleanup_throughput.py [--envs 1 64 256 1024] [--steps 400]``;
prints a markdown table, and writes it to ``benchmarks/results/open_cleanup.md`` with ``--write``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
from timing import load, machine, peak_rss_mib, report, time_compiled

import dilemmax

RESULTS = Path(__file__).parent / "results" / "open_cleanup.md"


def make_runner(env, num_envs: int, num_steps: int, mode: str = "full"):
    """A jitted ``key -> checksum`` running ``num_steps`` batched steps.

    ``mode``: ``"full"`` (step + observations summed), ``"step"`` (observations left unused) or
    ``"obs"`` (only the observations of a fixed batch of states, recomputed each step).
    """
    step = jax.vmap(env.step_env)
    observe = jax.vmap(env.observe_all)

    def run(key):
        key_reset, key_run = jax.random.split(key)
        _, state = jax.vmap(env.reset)(jax.random.split(key_reset, num_envs))

        def one_step(carry, step_key):
            state, checksum = carry
            if mode == "obs":
                moved = state.replace(orientations=(state.orientations + 1) % 4)
                obs = observe(moved)
                return (moved, checksum + jnp.sum(obs, dtype=jnp.int32)), None
            key_act, key_step = jax.random.split(step_key)
            acts = jax.random.randint(key_act, (env.num_agents, num_envs), 0, env.num_actions)
            actions = {a: acts[i] for i, a in enumerate(env.agents)}
            obs, state, rewards, dones, infos = step(
                jax.random.split(key_step, num_envs), state, actions
            )
            if mode == "full":
                checksum = checksum + sum(jnp.sum(o, dtype=jnp.int32) for o in obs.values())
            checksum = checksum + jnp.sum(infos["cleared"]) + jnp.sum(infos["ate"])
            return (state, checksum), None

        (_, checksum), _ = jax.lax.scan(
            one_step, (state, jnp.int32(0)), jax.random.split(key_run, num_steps)
        )
        return checksum

    return jax.jit(run)


def measure(env, num_envs: int, num_steps: int, repeats: int, mode: str = "full") -> dict:
    compile_s, best = time_compiled(make_runner(env, num_envs, num_steps, mode), repeats)
    return {
        "envs": num_envs,
        "steps": num_steps,
        "mode": mode,
        "compile_s": compile_s,
        "run_s": best,
        "env_steps_per_s": num_envs * num_steps / best,
        "peak_rss_mib": peak_rss_mib(),
    }


def pool_build_time() -> tuple[float, float]:
    """Seconds to build the default pools (256 layouts, 100,000 rules, both splits) in a fresh
    process, compilation of the layout generator included; and seconds to build another pair of
    pools of the same sizes (another seed) in that process, once compiled."""
    code = (
        "import time; t = time.perf_counter();"
        "from dilemmax.envs.open_cleanup.env import OpenCleanupEnv; OpenCleanupEnv();"
        "first = time.perf_counter() - t;"
        "from dilemmax.envs.open_cleanup import generator as g; t = time.perf_counter();"
        "g.select_split(g.build_layout_pool(seed=9), 'train');"
        "g.select_split(g.build_rule_pool(seed=10), 'train');"
        "print(first, time.perf_counter() - t)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ
    )
    first, again = out.stdout.strip().splitlines()[-1].split()
    return float(first), float(again)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 64, 256, 1024])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-profile", action="store_true", help="skip the step / obs split")
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/...")
    args = parser.parse_args()

    build_s, rebuild_s = pool_build_time()
    env = dilemmax.make("open_cleanup")
    rows = [measure(env, n, args.steps, args.repeats) for n in args.envs]
    profile = []
    if not args.no_profile:
        profile = [measure(env, 256, args.steps, args.repeats, m) for m in ("step", "obs")]
    lines = [
        "# OpenCleanup throughput",
        "",
        f"Command: `python benchmarks/open_cleanup_throughput.py --envs "
        f"{' '.join(map(str, args.envs))} --steps {args.steps}`",
        "",
        f"Machine: {machine()}; after the run: {load()} (1 / 5 / 15 min).",
        "",
        "5 agents, paper settings (12 x 16, p_spawn 0.1, skew 1.0), random actions, "
        f"`vmap(step_env)` scanned over {args.steps} steps, observations (uint8[11, 11, 4] per "
        f"agent) summed into the carry; best of {args.repeats} runs.",
        "",
        "| envs | env-steps/s | time per batched step (ms) | compile (s) | peak RSS (MiB) |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row['envs']} | {row['env_steps_per_s']:,.0f} | "
            f"{1000 * row['run_s'] / row['steps']:.3f} | {row['compile_s']:.1f} | "
            f"{row['peak_rss_mib']:.0f} |"
        )
    if profile:
        lines += [
            "",
            "Profile at 256 envs (same scan, one part at a time):",
            "",
            "| part | env-steps/s | time per batched step (ms) |",
            "| --- | ---: | ---: |",
        ]
        names = {"step": "step_env, observations unused", "obs": "observations only (get_obs)"}
        for row in profile:
            lines.append(
                f"| {names[row['mode']]} | {row['env_steps_per_s']:,.0f} | "
                f"{1000 * row['run_s'] / row['steps']:.3f} |"
            )
    lines += [
        "",
        f"Default pools (256 layouts, 100,000 rules, 80/20 split) built in {build_s:.1f} s in a "
        "fresh process, compilation of the layout generator included; once compiled, another "
        f"pair of pools of those sizes takes {rebuild_s:.2f} s.",
    ]
    report("\n".join(lines), RESULTS if args.write else None)


if __name__ == "__main__":
    main()
