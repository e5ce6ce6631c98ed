"""Throughput of the consequence game: env-steps per second at 1, 1,024 and 65,536 parallel envs.

Each batch of envs runs ``jax.vmap(env.step)`` (auto-reset included) inside ``lax.scan`` with
uniform random legal actions drawn from ``env.action_mask``; every observation is summed into the
scan carry so nothing is optimised away. Compilation is excluded (one warm-up call per size) and
results are blocked on. For comparison a second column times ``env.step_env`` (no auto-reset,
finished episodes stay frozen).

    python benchmarks/consequence_throughput.py            # prints and writes the markdown table
    python benchmarks/consequence_throughput.py --sizes 1 1024 --steps 50
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
from timing import load, machine, report, time_compiled, uniform_legal_actions

from dilemmax.envs.consequence.env import ConsequenceEnv

RESULTS = Path(__file__).parent / "results" / "consequence.md"


def random_actions(env: ConsequenceEnv, key: jax.Array, state) -> dict[str, jax.Array]:
    """Uniform legal actions of every agent of one env (one uint32 each)."""
    mask = env.legal_actions(state)
    return uniform_legal_actions(key, {a: mask[i] for i, a in enumerate(env.agents)})


def make_runner(env: ConsequenceEnv, num_envs: int, num_steps: int, auto_reset: bool):
    """A jitted function key -> (checksum, final states) running num_steps vmapped steps."""
    step = env.step if auto_reset else env.step_env

    def one_env_step(key, state):
        key_act, key_step = jax.random.split(key)
        obs, state, rewards, _, _ = step(key_step, state, random_actions(env, key_act, state))
        consumed = sum(jnp.sum(o) for o in obs.values()) + sum(rewards.values())
        return state, consumed

    def scan_body(carry, key):
        states, checksum = carry
        keys = jax.random.split(key, num_envs)
        states, consumed = jax.vmap(one_env_step)(keys, states)
        return (states, checksum + jnp.sum(consumed)), None

    @jax.jit
    def run(key):
        key_reset, key_run = jax.random.split(key)
        _, states = jax.vmap(env.reset)(jax.random.split(key_reset, num_envs))
        (states, checksum), _ = jax.lax.scan(
            scan_body, (states, jnp.float32(0.0)), jax.random.split(key_run, num_steps)
        )
        return checksum, states

    return run


def measure(env, num_envs: int, num_steps: int, repeats: int, auto_reset: bool) -> float:
    """Best-of-``repeats`` env-steps per second, compilation excluded."""
    _, best = time_compiled(make_runner(env, num_envs, num_steps, auto_reset), repeats)
    return num_envs * num_steps / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 1024, 65536])
    parser.add_argument("--steps", type=int, default=100, help="scanned steps per call")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    env = ConsequenceEnv()
    load_before = load()
    rows = []
    for num_envs in args.sizes:
        with_reset = measure(env, num_envs, args.steps, args.repeats, auto_reset=True)
        without = measure(env, num_envs, args.steps, args.repeats, auto_reset=False)
        rows.append(f"| {num_envs:,} | {with_reset:,.0f} | {without:,.0f} |")
        print(rows[-1], flush=True)

    table = "\n".join(
        [
            "# consequence: env-steps per second",
            "",
            f"Command: `python benchmarks/consequence_throughput.py --steps {args.steps} "
            f"--repeats {args.repeats}`  ",
            f"Machine: {machine()}  ",
            f"Load before: `{load_before}`  ",
            f"Load after: `{load()}`",
            "",
            "Default env (n = 3, R = 3, W = 12, contexts and rules sampled at every reset), "
            f"uniform random legal actions, {args.steps} scanned steps per call, best of "
            f"{args.repeats} calls, compilation excluded, observations and rewards summed into "
            "the carry.",
            "",
            "| parallel envs | env.step (auto-reset) steps/s | env.step_env steps/s |",
            "| ---: | ---: | ---: |",
            *rows,
            "",
        ]
    )
    report(table, args.out)


if __name__ == "__main__":
    main()
