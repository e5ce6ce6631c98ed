"""What auto-reset costs: three ways to step a batch of envs.

- ``vmap(step)``: JaxMARL's way; the reset sits behind ``dilemmax.envs.rare.rare_cond``, so a
  batch computes resets only on steps where some env's episode ended, and the grid games only
  for the envs that ended (it used to be a select that reset every env on every step);
- ``VecEnv``: resets from a buffer, refilled only on steps where some episode ended;
- ``vmap(step_env)``: no reset at all (the ceiling).

Compile time is excluded, results are blocked on, and observations are consumed (summed into the
carry). Usage:

    python benchmarks/autoreset.py --env consequence --num-envs 1024 --steps 256
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
from timing import load, machine, time_compiled

import dilemmax
from dilemmax.wrappers.vec import VecEnv


def _legal_actions(env, masks):
    """The highest legal action of each agent (cheap, always legal), batched."""
    last = lambda m: (m.shape[-1] - 1 - jnp.argmax(m[..., ::-1], axis=-1)).astype(jnp.int32)
    return {a: last(masks[a]) for a in env.agents}


def _obs_checksum(obs) -> jax.Array:
    return sum(jnp.sum(o.astype(jnp.float32)) for o in jax.tree.leaves(obs))


def make_runner(env, mode: str, num_envs: int, num_steps: int):
    vec = VecEnv(env, num_envs)

    def run(key):
        key_reset, key_run = jax.random.split(key)
        if mode == "vecenv":
            obs, state = vec.reset(key_reset)
            masks_of = vec.action_mask
        else:
            obs, state = jax.vmap(env.reset)(jax.random.split(key_reset, num_envs))
            masks_of = jax.vmap(env.action_mask)

        def body(carry, step_key):
            state, total = carry
            actions = _legal_actions(env, masks_of(state))
            if mode == "vecenv":
                obs, state, rewards, dones, _ = vec.step(step_key, state, actions)
            else:
                step = env.step if mode == "vmap_step" else env.step_env
                keys = jax.random.split(step_key, num_envs)
                obs, state, rewards, dones, _ = jax.vmap(step)(keys, state, actions)
            return (state, total + _obs_checksum(obs)), dones["__all__"].sum()

        (_, total), ended = jax.lax.scan(
            body, (state, _obs_checksum(obs)), jax.random.split(key_run, num_steps)
        )
        return total, ended.sum()

    return jax.jit(run)


def measure(env, mode: str, num_envs: int, num_steps: int, repeats: int = 3) -> dict:
    run = make_runner(env, mode, num_envs, num_steps)
    compile_s, best = time_compiled(run, repeats)
    _, ended = run(jax.random.key(repeats))  # the last timed call's episode count
    return {
        "mode": mode,
        "num_envs": num_envs,
        "steps_per_s": num_envs * num_steps / best,
        "compile_s": compile_s,
        "episodes_ended": int(ended),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="consequence")
    parser.add_argument("--num-envs", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=256)
    args = parser.parse_args()
    env = dilemmax.make(args.env)
    print(f"# auto-reset cost: {args.env}, {args.num_envs} envs x {args.steps} steps")
    print(f"# {machine()}, {load()}")
    print("| mode | env-steps/s | compile s | episodes ended |")
    print("| --- | ---: | ---: | ---: |")
    for mode in ("vmap_step", "vecenv", "vmap_step_env"):
        row = measure(env, mode, args.num_envs, args.steps)
        print(f"| {mode} | {row['steps_per_s']:,.0f} | {row['compile_s']:.1f} | "
              f"{row['episodes_ended']} |")  # fmt: skip


if __name__ == "__main__":
    main()
