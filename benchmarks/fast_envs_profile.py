"""Where a batched step of moral_hazard / consequence goes at 65,536 envs: pieces side by side.

Every piece runs as one jitted ``lax.scan`` of ``--steps`` steps over N envs, its result summed
into the carry (nothing is dead code), compile excluded, best of ``--repeats`` calls. Both the
wall time and the process CPU time (all threads) per batched step are printed: on a shared,
loaded machine the CPU time is the steadier of the two.

    python benchmarks/fast_envs_profile.py                   # prints a markdown table
    python benchmarks/fast_envs_profile.py --out benchmarks/results/fast_envs_profile.md
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from timing import load, machine, report, uniform_legal_actions  # noqa: E402

import dilemmax  # noqa: E402
from dilemmax.envs.base import subkey  # noqa: E402


def timed(piece, carry, num_envs: int, steps: int, repeats: int) -> tuple[float, float]:
    """(wall ms, CPU ms) per batched step of ``piece(carry, key) -> (carry, float32[])``."""

    def run(key, carry):
        def body(c, k):
            c, total = c
            c, x = piece(c, k)
            return (c, total + x), None

        keys = jax.random.split(key, steps)
        return jax.lax.scan(body, (carry, jnp.float32(0)), keys)[0][1]

    compiled = jax.jit(run).lower(jax.random.key(0), carry).compile()
    jax.block_until_ready(compiled(jax.random.key(0), carry))
    wall = cpu = float("inf")
    for r in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(compiled(jax.random.key(r + 1), carry))
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
    return 1e3 * wall / steps, 1e3 * cpu / steps


def checksum(tree) -> jax.Array:
    return sum(jnp.sum(x.astype(jnp.float32)) for x in jax.tree.leaves(tree))


def old_harness(env, key, masks):
    """The harness before: one float32 uniform per (env, agent, action), argmax over legal."""
    first = masks[env.agents[0]]
    scores = jax.random.uniform(key, (env.num_agents,) + first.shape)
    return {
        a: jnp.argmax(jnp.where(masks[a], scores[i], -1.0), axis=-1).astype(jnp.int32)
        for i, a in enumerate(env.agents)
    }


def old_moral_hazard_cases(key, n):
    """The case draw before: three keys, 12 uniforms + top_k, a bernoulli and a randint."""
    key_util, key_question, key_unsafe = jax.random.split(key, 3)
    picked = jax.lax.top_k(jax.random.uniform(key_util, (n, 12)), 4)[1]
    question = jax.random.bernoulli(key_question, 0.5, (n,))
    unsafe = jax.random.randint(key_unsafe, (n,), 0, 4)
    return picked + 2, question, unsafe


def pieces(env_id: str, num_envs: int):
    """name -> (piece, initial carry)."""
    env = dilemmax.make(env_id)
    _, states = jax.vmap(env.reset)(jax.random.split(jax.random.key(0), num_envs))
    masks_of = jax.vmap(env.action_mask)
    step = jax.vmap(env.step)
    step_env = jax.vmap(env.step_env)

    def acting(harness):
        def piece(s, k):
            actions = harness(k, masks_of(s))
            # Advance the state a little so the masks are not loop-invariant.
            _, s, _, _, _ = step_env(jax.random.split(k, num_envs), s, actions)
            return s, checksum(actions)

        return piece

    def full(fn, harness=None):
        def piece(s, k):
            key_act, key_step = jax.random.split(k)
            if harness is None:
                actions = uniform_legal_actions(key_act, masks_of(s))
            else:
                actions = harness(key_act, masks_of(s))
            obs, s, rewards, _, _ = fn(jax.random.split(key_step, num_envs), s, actions)
            return s, checksum(obs) + checksum(rewards)

        return piece

    def reset_only(s, k):
        _, fresh = jax.vmap(lambda kk: env.reset(subkey(kk, 1)))(jax.random.split(k, num_envs))
        return fresh, checksum(jax.vmap(env.get_obs)(fresh))

    out = {
        "split N keys": (
            lambda s, k: (s, checksum(jax.random.key_data(jax.random.split(k, num_envs)))),
            states,
        ),
        "step_env + old harness (uniform per action + argmax)": (
            acting(lambda k, m: old_harness(env, k, m)),
            states,
        ),
        "step_env + new harness (one uint32 per agent)": (
            acting(uniform_legal_actions),
            states,
        ),
        "vmap(reset) + get_obs": (reset_only, states),
        "vmap(step_env) (no reset), new harness": (full(step_env), states),
        "vmap(step) (auto-reset), new harness": (full(step), states),
        "vmap(step) (auto-reset), old harness": (
            full(step, lambda k, m: old_harness(env, k, m)),
            states,
        ),
    }
    if env_id == "moral_hazard":
        n = env.num_agents
        out["cases: old draw (3 keys, 24 uniforms + top_k, bernoulli, randint)"] = (
            lambda s, k: (s, checksum(jax.vmap(lambda kk: old_moral_hazard_cases(kk, n))(
                jax.random.split(k, num_envs)))),
            states,
        )  # fmt: skip
        from dilemmax.envs.moral_hazard.generator import sample_cases

        out["cases: new draw (one uint32 per case)"] = (
            lambda s, k: (s, checksum(jax.vmap(lambda kk: sample_cases(kk, n, 0))(
                jax.random.split(k, num_envs)))),
            states,
        )  # fmt: skip
    return out


def floors(num_envs: int, obs_floats: int):
    """Pieces no env step can beat: writing and summing its observations."""
    base = jnp.zeros((num_envs, 8), jnp.float32)

    def obs(materialise):
        def piece(c, k):
            parts = [jnp.maximum(c - j, 0.5 * c) for j in range(obs_floats // 8)]
            o = jnp.concatenate(parts + [c[:, : obs_floats % 8]], axis=-1)
            if materialise:
                o = jax.lax.optimization_barrier(o)
            return c + 1, jnp.sum(o)

        return piece

    return {
        f"floor: {obs_floats} float32 per env written to memory and summed": (obs(True), base),
        f"floor: {obs_floats} float32 per env summed, fused (never written)": (obs(False), base),
        "floor: jax.random.bits, one uint32 per env": (
            lambda c, k: (c, jnp.sum(jax.random.bits(k, (num_envs,)) & 1).astype(jnp.float32)),
            base,
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["moral_hazard", "consequence"])
    parser.add_argument("--num-envs", type=int, default=65536)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    start_load = load()
    rows = []
    for env_id in args.envs:
        for name, (piece, carry) in pieces(env_id, args.num_envs).items():
            wall, cpu = timed(piece, carry, args.num_envs, args.steps, args.repeats)
            rows.append(f"| {env_id} | {name} | {wall:.2f} | {cpu:.2f} |")
            print(rows[-1], flush=True)
    obs_floats = 2 * 68  # moral_hazard, n = 2
    for name, (piece, carry) in floors(args.num_envs, obs_floats).items():
        wall, cpu = timed(piece, carry, args.num_envs, args.steps, args.repeats)
        rows.append(f"| - | {name} | {wall:.2f} | {cpu:.2f} |")
        print(rows[-1], flush=True)
    text = "\n".join(
        [
            f"# moral_hazard / consequence at N = {args.num_envs:,}: a batched step by piece",
            "",
            f"Command: `python benchmarks/fast_envs_profile.py --num-envs {args.num_envs} "
            f"--steps {args.steps} --repeats {args.repeats}`  ",
            f"Machine: {machine()}  ",
            f"Load before: `{start_load}`; after: `{load()}`",
            "",
            "ms per batched step, best of the calls; CPU = process CPU time (all threads), the",
            "steadier figure on a loaded machine. 10M env-steps/s at this N is "
            f"{1e3 * args.num_envs / 1e7:.2f} ms of wall time per batched step.",
            "",
            "| env | piece | wall ms | CPU ms |",
            "| --- | --- | ---: | ---: |",
            *rows,
        ]
    )
    report(text, args.out)


if __name__ == "__main__":
    main()
