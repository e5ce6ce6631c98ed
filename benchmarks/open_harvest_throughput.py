"""OpenHarvest throughput: env-steps per second of the batched JAX step, observations consumed.

Paper settings (5 agents, 16 x 22 map, 5 trials x 400 steps), uniformly random actions drawn
inside the program, ``step_env`` vmapped over N environments and scanned over steps; every
observation is summed into the scan carry so XLA cannot drop it. Compile time is measured apart
(``lower().compile()``), the timed runs are blocked on their results, and the best of a few
repeats is reported. Peak memory is the process's peak resident set size.

It also plays the scripted baselines (greedy, sustainable, oracle, random) on the paper's
settings with ``run_episodes`` and reports the paper's measures, as the reference for what
restraint can earn (``--episodes 0`` skips them).

Run: ``python benchmarks/open_harvest_throughput.py [--envs 1 64 256 1024] [--steps 400]
[--episodes 16]``; prints markdown tables and writes them to
``benchmarks/results/open_harvest.md`` with ``--write``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from timing import load, machine, peak_rss_mib, report, time_compiled

import dilemmax
from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest import dynamics, observation
from dilemmax.envs.rollout import run_episodes

RESULTS = Path(__file__).parent / "results" / "open_harvest.md"


def make_runner(env, num_envs: int, num_steps: int, observation_sum: bool = True):
    """A jitted function key -> (checksum, final state) running num_steps batched steps."""
    step = jax.vmap(env.step_env)

    def run(key):
        key_reset, key_run = jax.random.split(key)
        obs, state = jax.vmap(env.reset)(jax.random.split(key_reset, num_envs))

        def one_step(carry, step_key):
            state, checksum = carry
            key_act, key_step = jax.random.split(step_key)
            acts = jax.random.randint(key_act, (env.num_agents, num_envs), 0, c.NUM_ACTIONS)
            actions = {a: acts[i] for i, a in enumerate(env.agents)}
            obs, state, rewards, dones, infos = step(
                jax.random.split(key_step, num_envs), state, actions
            )
            if observation_sum:
                checksum = checksum + sum(jnp.sum(o, dtype=jnp.int32) for o in obs.values())
            checksum = checksum + jnp.sum(infos["num_apples"])
            return (state, checksum), None

        (state, checksum), _ = jax.lax.scan(
            one_step, (state, jnp.int32(0)), jax.random.split(key_run, num_steps)
        )
        return checksum, state

    return jax.jit(run)


def measure(env, num_envs: int, num_steps: int, repeats: int) -> dict:
    compile_s, best = time_compiled(make_runner(env, num_envs, num_steps), repeats)
    # The reset inside the program is a small share of one run; it is counted in the time.
    return {
        "envs": num_envs,
        "steps": num_steps,
        "compile_s": compile_s,
        "run_s": best,
        "env_steps_per_s": num_envs * num_steps / best,
        "peak_rss_mib": peak_rss_mib(),
    }


def pool_build_time() -> float:
    """Seconds to build the default pools (256 layouts, 100,000 rules) in a fresh process."""
    code = (
        "import time; t = time.perf_counter();"
        "from dilemmax.envs.open_harvest.env import OpenHarvestEnv; OpenHarvestEnv();"
        "print(time.perf_counter() - t)"
    )
    out = subprocess.run(
        ["python", "-c", code], capture_output=True, text=True, check=True, env=os.environ
    )
    return float(out.stdout.strip().splitlines()[-1])


def profile(env, num_envs: int = 256, num_steps: int = 200) -> list[str]:
    """Markdown rows: milliseconds per batched step of the whole step and of its parts."""
    _, states = jax.vmap(env.reset)(jax.random.split(jax.random.key(0), num_envs))
    step = jax.vmap(env.step_env)

    def actions(key):
        acts = jax.random.randint(key, (env.num_agents, num_envs), 0, c.NUM_ACTIONS)
        return {a: acts[i] for i, a in enumerate(env.agents)}

    def full(key, s):
        obs, s, _, _, _ = step(jax.random.split(key, num_envs), s, actions(key))
        return s, sum(jnp.sum(o, dtype=jnp.int32) for o in obs.values())

    def without_obs(key, s):  # observations unused: XLA drops them
        _, s, _, _, infos = step(jax.random.split(key, num_envs), s, actions(key))
        return s, jnp.sum(infos["num_apples"])

    def observe(key, s):
        obs = jax.vmap(observation.observe)(s)
        return s.replace(agent_dir=(s.agent_dir + 1) % 4), jnp.sum(obs, dtype=jnp.int32)

    def orchard(key, s):
        free = jnp.zeros(c.NUM_TREES, bool)
        advance = lambda k, x: dynamics.advance_orchard(k, x.orchard, x.config, free)  # noqa: E731
        o, _ = jax.vmap(advance)(jax.random.split(key, num_envs), s)
        return s.replace(orchard=o), jnp.sum(o.apple, dtype=jnp.int32)

    rows = []
    for name, part in [
        ("whole step, observations consumed", full),
        ("whole step, observations unused", without_obs),
        ("observations only", observe),
        ("orchard dynamics only (ripen, rot, regrow)", orchard),
    ]:

        def run(s, key, part=part):
            def body(carry, k):
                s, acc = carry
                s, x = part(k, s)
                return (s, acc + x), None

            keys = jax.random.split(key, num_steps)
            return jax.lax.scan(body, (s, jnp.int32(0)), keys)[0][1]

        fn = jax.jit(run)
        _, best = time_compiled(lambda key, fn=fn: fn(states, key), repeats=3)
        rows.append(f"| {name} | {1000 * best / num_steps:.2f} |")
    return rows


def baselines(env, num_episodes: int) -> list[str]:
    """Markdown rows: the paper's measures for each scripted policy (mean over episodes)."""
    rows = []
    for name, policy in env.scripted_policies().items():
        start = time.perf_counter()
        _, m = run_episodes(env, policy, jax.random.key(2026), num_episodes)
        m = jax.device_get(m)
        seconds = time.perf_counter() - start
        per_trial = m["mean_return_per_trial"].mean(0)
        rows.append(
            f"| {name} | {m['return'].mean() / env.num_trials:.2f} | "
            + " / ".join(f"{v:.1f}" for v in per_trial)
            + f" | {m['orchard_lifetime'].mean():.0f} | {m['gini'].mean():.2f} | "
            f"{100 * m['best_stage_share_team'].mean():.0f} | "
            f"{100 * m['premature_share_team'].mean():.0f} | "
            f"{m['points_per_apple_team'].mean():.2f} | {100 * m['payoffs_known'].mean():.0f} | "
            f"{m['zaps_fired'].mean():.1f} | {seconds:.0f} |"
        )
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 64, 256, 1024])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=16, help="episodes per baseline")
    parser.add_argument("--no-profile", action="store_true", help="skip the step breakdown")
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/...")
    args = parser.parse_args()

    build_s = pool_build_time()
    env = dilemmax.make("open_harvest")
    rows = [measure(env, n, args.steps, args.repeats) for n in args.envs]
    lines = [
        "# OpenHarvest throughput",
        "",
        f"Command: `python benchmarks/open_harvest_throughput.py --envs "
        f"{' '.join(map(str, args.envs))} --steps {args.steps}`",
        "",
        f"Machine: {machine()}; after the run: {load()} (1 / 5 / 15 min).",
        "",
        "5 agents, paper settings, random actions, `vmap(step_env)` scanned over "
        f"{args.steps} steps, observations summed into the carry; best of {args.repeats} runs.",
        "",
        "| envs | env-steps/s | time per batched step (ms) | compile (s) | peak RSS (MiB) |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['envs']} | {r['env_steps_per_s']:,.0f} | "
            f"{1000 * r['run_s'] / r['steps']:.3f} | {r['compile_s']:.1f} | "
            f"{r['peak_rss_mib']:.0f} |"
        )
    lines += ["", f"Building the default pools (256 layouts, 100,000 rules) in a fresh process, "
              f"imports included: {build_s:.1f} s."]  # fmt: skip
    if not args.no_profile:
        lines += [
            "",
            "## Where a step's time goes (256 envs)",
            "",
            "Each part scanned alone over 200 steps, best of 3; the parts overlap inside the "
            "fused step, so they do not add up exactly.",
            "",
            "| part | ms per batched step |",
            "| --- | ---: |",
        ]
        lines += profile(env)
    if args.episodes > 0:
        lines += [
            "",
            "## Scripted baselines",
            "",
            f"{args.episodes} episodes per policy (5 agents, 5 trials of at most 400 steps, "
            "configurations from the train split), all agents playing the same script. Return: "
            "per agent per trial. Lifetime: step of the trial at which the orchard died (400 "
            "if it lived). Best / premature: % of apples eaten at the best-paying stage of "
            "their colour / before it. Known: % of the learnable pays tasted by the end. "
            "Zaps: fired per agent per episode. Time: compile + run.",
            "",
            "| policy | return | return by trial | lifetime | Gini | best % | premature % | "
            "points/apple | known % | zaps | time (s) |",
            "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        lines += baselines(env, args.episodes)
    report("\n".join(lines), RESULTS if args.write else None)


if __name__ == "__main__":
    main()
