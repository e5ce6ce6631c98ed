"""Throughput of the moral-hazard game: env-steps per second at 1, 1,024 and 65,536 parallel envs.

For each batch size the envs are stepped inside one jitted ``lax.scan`` with actions drawn
uniformly from ``env.action_mask`` (so every stage's legal set is exercised); each step's
observations and rewards are summed into the scan carry so none of the work is dead code.
Compilation is excluded (a warm-up call per configuration), results are blocked on, and the best
of ``--repeats`` calls is kept. Three ways of stepping are timed:

- ``vmap(env.step)``: JaxMARL-style auto-reset; under vmap the reset runs on every step;
- ``VecEnv``: the project's batch wrapper, which resets from a buffer only when episodes end
  (every third step here, since every episode is exactly work, note, final);
- ``vmap(env.step_env)``: no reset at all (after three steps the episodes sit at their end).

    python benchmarks/moral_hazard_throughput.py                 # writes results/moral_hazard.md
    python benchmarks/moral_hazard_throughput.py --sizes 1 1024 --agents 2 --steps 30
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
from timing import load, machine, report, time_compiled, uniform_legal_actions

from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.wrappers.vec import VecEnv

RESULTS = Path(__file__).parent / "results" / "moral_hazard.md"
MODES = ("vmap_step", "vecenv", "vmap_step_env")


def uniform_legal(env: MoralHazardEnv, key: jax.Array, masks: dict) -> dict:
    """One uniformly drawn legal action per agent; ``masks`` may carry a batch axis."""
    return uniform_legal_actions(key, {a: masks[a] for a in env.agents})


def consumed(obs: dict, rewards: dict) -> jax.Array:
    return sum(jnp.sum(o) for o in obs.values()) + sum(jnp.sum(r) for r in rewards.values())


def make_runner(env: MoralHazardEnv, mode: str, num_envs: int, num_steps: int):
    """A jitted key -> checksum that plays ``num_steps`` steps of ``num_envs`` envs."""
    vec = VecEnv(env, num_envs)
    batch_mask = jax.vmap(env.action_mask)

    def run(key):
        key_reset, key_run = jax.random.split(key)
        if mode == "vecenv":
            _, state = vec.reset(key_reset)
        else:
            _, state = jax.vmap(env.reset)(jax.random.split(key_reset, num_envs))

        def body(carry, step_key):
            state, total = carry
            key_act, key_step = jax.random.split(step_key)
            if mode == "vecenv":
                actions = uniform_legal(env, key_act, vec.action_mask(state))
                obs, state, rewards, _, _ = vec.step(key_step, state, actions)
            else:
                actions = uniform_legal(env, key_act, batch_mask(state))
                step = env.step if mode == "vmap_step" else env.step_env
                keys = jax.random.split(key_step, num_envs)
                obs, state, rewards, _, _ = jax.vmap(step)(keys, state, actions)
            return (state, total + consumed(obs, rewards)), None

        (_, total), _ = jax.lax.scan(
            body, (state, jnp.float32(0.0)), jax.random.split(key_run, num_steps)
        )
        return total

    return jax.jit(run)


def measure(env, mode: str, num_envs: int, num_steps: int, repeats: int) -> tuple[float, float]:
    """(best env-steps per second, compile seconds)."""
    compile_s, best = time_compiled(make_runner(env, mode, num_envs, num_steps), repeats)
    return num_envs * num_steps / best, compile_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 1024, 65536])
    parser.add_argument("--agents", type=int, nargs="+", default=[2, 9])
    parser.add_argument("--steps", type=int, default=30, help="scanned steps per call")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--max-seats",
        type=int,
        default=2 * 65536,
        help="skip sizes where n x parallel envs exceeds this (n = 9 at 65,536 envs takes many "
        "minutes on 2 cores)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    load_before = load()
    rows = []
    for n in args.agents:
        env = MoralHazardEnv(n)
        for num_envs in args.sizes:
            if n * num_envs > args.max_seats:
                rows.append(f"| {n} | {num_envs:,} | skipped (--max-seats) | | | |")
                continue
            cells = [measure(env, m, num_envs, args.steps, args.repeats) for m in MODES]
            rates = " | ".join(f"{rate:,.0f}" for rate, _ in cells)
            compiles = "/".join(f"{s:.1f}" for _, s in cells)
            rows.append(f"| {n} | {num_envs:,} | {rates} | {compiles} |")
            print(rows[-1], flush=True)

    sizes = " ".join(str(s) for s in args.sizes)
    agents = " ".join(str(n) for n in args.agents)
    table = "\n".join(
        [
            "# moral_hazard: env-steps per second",
            "",
            f"Command: `python benchmarks/moral_hazard_throughput.py --sizes {sizes} "
            f"--agents {agents} --steps {args.steps} --repeats {args.repeats} "
            f"--max-seats {args.max_seats}`  ",
            f"Machine: {machine()}  ",
            f"Load before: `{load_before}`  ",
            f"Load after: `{load()}`",
            "",
            "Default condition (primary contract, highest-unsafe mapping, cases drawn at every "
            "reset), uniform legal actions from the mask, "
            f"{args.steps} scanned steps per call (one env-step = one joint action of all n "
            f"agents; an episode is 3 env-steps), best of {args.repeats} calls, compilation "
            "excluded (its seconds are the last column, per mode), observations and rewards "
            "summed into the carry. Drawing the uniform legal actions (one uint32 per "
            "agent, see `timing.uniform_legal_actions`) is part of each step's cost.",
            "",
            "| n | parallel envs | vmap(env.step) steps/s | VecEnv steps/s | "
            "vmap(env.step_env) steps/s | compile s |",
            "| ---: | ---: | ---: | ---: | ---: | ---: |",
            *rows,
            "",
        ]
    )
    report(table, args.out)


if __name__ == "__main__":
    main()
