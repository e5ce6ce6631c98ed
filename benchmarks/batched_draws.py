"""What making a step's draws together (dilemmax.envs.draws) saves in compile time: programs of
scripted grid-game episodes, and the bare open_cleanup step, traced with their draws resolved
together against one ``jax.random`` call per draw (``draws.one_call_per_draw``, how the code
drew before), A/B alternated in one process. Results: benchmarks/results/batched_draws.md.

    python benchmarks/batched_draws.py [--rounds 2]
    XLA_FLAGS="<the test suite's flags, conftest.py>" python benchmarks/batched_draws.py

Compile is the CPU time of ``lower(...).compile()`` with the persistent cache off (tracing and
lowering are timed apart); hashes counts the hash calls in the program (jax.random's key-level
calls and draws.py's direct ones); run is the best of 3 blocked calls after the first (the last
case, 1,024 envs stepped 25 times under vmap, is the one whose run time means something). Both
sides' outputs are checked equal, leaf by leaf.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import dilemmax
from dilemmax.envs import draws, rollout

_HASHES = {"random_bits", "random_split", "random_fold_in", "threefry2x32"}


def hashes(jaxpr) -> int:
    """Hash calls in a jaxpr, nested programs (scan bodies, cond branches, ...) included."""
    params = [p for e in jaxpr.eqns for value in e.params.values() for p in _listed(value)]
    here = sum(e.primitive.name in _HASHES for e in jaxpr.eqns)
    return here + sum(hashes(getattr(p.jaxpr, "jaxpr", p.jaxpr)) for p in params if hasattr(p, "jaxpr"))  # noqa: E501  # fmt: skip


def _listed(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def cases():
    """(name, function of a key, its argument) for each program measured."""
    envs = {name: dilemmax.make(name) for name in ("open_cleanup", "open_harvest")}
    cleanup = envs["open_cleanup"]
    key = jax.random.PRNGKey(3)
    found = []
    for game, policy in (("open_cleanup", "informed_cleaner"), ("open_cleanup", "greedy"),
                         ("open_cleanup", "random"), ("open_harvest", "sustainable")):  # fmt: skip
        env = envs[game]
        seats = [env.scripted_policies()[policy]] * env.num_agents
        found.append(
            (
                f"{game} {policy} x{env.num_agents}, 2 episodes of 50 steps",
                lambda k, env=env, seats=seats: rollout.run_episodes(
                    env, seats, k, 2, num_steps=50, jit=False, mesh=None
                ),
                key,
            )
        )
    _, state = jax.jit(cleanup.reset)(key)
    actions = {a: jnp.int32(0) for a in cleanup.agents}
    found.append(("open_cleanup env.step (auto-reset included)", lambda k: cleanup.step(k, state, actions), key))  # noqa: E501  # fmt: skip
    found.append((f"open_cleanup env.step, {_BATCH} envs x {_STEPS} steps", batched_steps(cleanup), key))  # noqa: E501  # fmt: skip
    return found


_BATCH, _STEPS = 1024, 25


def batched_steps(env):
    """A run-time case: ``_STEPS`` steps of ``_BATCH`` envs under vmap, random actions."""

    def run(key):
        keys = jax.random.split(key, _BATCH)
        _, states = jax.vmap(env.reset)(keys)

        def one(states, k):
            k_act, k_step = jax.random.split(k)
            acts = jax.random.randint(k_act, (len(env.agents), _BATCH), 0, env.num_actions)
            actions = dict(zip(env.agents, acts, strict=True))
            _, states, rewards, _, _ = jax.vmap(env.step, in_axes=(0, 0, 0))(
                jax.random.split(k_step, _BATCH), states, actions
            )
            return states, sum(rewards.values())

        return jax.lax.scan(one, states, jax.random.split(key, _STEPS))[1]

    return run


def measure(fn, arg, separate: bool):
    """(trace + lower CPU s, compile CPU s, hashes, output, run s) for one fresh jit of ``fn``;
    run s is the best of 3 blocked calls after the first."""
    side = draws.one_call_per_draw() if separate else contextlib.nullcontext()
    with side:
        start = time.process_time()
        traced = jax.jit(lambda k: fn(k)).trace(arg)
        lowered = traced.lower()
        lowered_s = time.process_time() - start
        start = time.process_time()
        compiled = lowered.compile()
        compile_s = time.process_time() - start
        count = hashes(traced.jaxpr.jaxpr)
    out = jax.block_until_ready(compiled(arg))
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        jax.block_until_ready(compiled(arg))
        runs.append(time.perf_counter() - start)
    return lowered_s, compile_s, count, out, min(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    jax.config.update("jax_enable_compilation_cache", False)
    print(f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}; load {os.getloadavg()[0]:.2f}")
    print("| program | side | hashes | trace+lower CPU s | compile CPU s | run s (best of 3) |")
    print("| --- | --- | ---: | --- | --- | --- |")
    for name, fn, arg in cases():
        rows: dict[str, list] = {"one call per draw": [], "together": []}
        outputs = {}
        for _ in range(args.rounds):
            for side in rows:  # alternate the two sides within each round
                lowered_s, compile_s, count, out, run_s = measure(
                    fn, arg, side == "one call per draw"
                )
                rows[side].append((lowered_s, compile_s, count, run_s))
                outputs[side] = out
        a, b = (jax.tree.leaves(o) for o in outputs.values())
        assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True)), name
        for side, got in rows.items():
            lowered = ", ".join(f"{r[0]:.2f}" for r in got)
            compiled = ", ".join(f"{r[1]:.2f}" for r in got)
            ran = ", ".join(f"{r[3]:.4f}" for r in got)
            print(f"| {name} | {side} | {got[0][2]} | {lowered} | {compiled} | {ran} |", flush=True)


if __name__ == "__main__":
    main()
