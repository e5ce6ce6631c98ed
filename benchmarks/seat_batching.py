"""Would seats that share one policy object compile faster acting through one vmapped copy of
it than through one copy per seat (dilemmax.envs.rollout.act_carried's loop)? Compile time and
run time of scripted open_cleanup episodes, the loop against a vmapped variant written here,
A/B alternated in one process. Results and the decision: benchmarks/results/seat_batching.md.

    python benchmarks/seat_batching.py [--rounds 3] [--episodes 16]
    XLA_FLAGS="<the test suite's flags, conftest.py>" python benchmarks/seat_batching.py

Compile is the CPU time of ``lower(...).compile()`` with the persistent cache off; run is the
best of 3 blocked calls after the first. The two sides' episodes are checked equal, leaf by
leaf.
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import dilemmax
from dilemmax.envs import rollout

LOOP = rollout.act_carried  # the library's seat loop, kept before the benchmark swaps it


def vmapped_seats(env, policies, key_act, obs, state, carries):
    """The variant: the seats a stateless policy object fills act through one ``vmap`` of it
    (each with its own key, observation and index); the library's loop plays the other seats,
    with the shared ones left as placeholders whose actions are then filled in."""
    groups: dict[int, list[int]] = {}
    for i, policy in enumerate(policies):
        if policy is not None and not rollout.is_carried(policy):
            groups.setdefault(id(policy), []).append(i)
    shared = [seats for seats in groups.values() if len(seats) > 1]
    placeholders = {i for seats in shared for i in seats}
    rest = [None if i in placeholders else p for i, p in enumerate(policies)]
    actions, new = LOOP(env, rest, key_act, obs, state, carries)
    views = rollout.observations_for(env, obs, state)
    keys = rollout.seat_keys(key_act, env.num_agents)
    for seats in shared:
        policy, agents = policies[seats[0]], [env.agents[i] for i in seats]

        def one_seat(key, array, mask, index, policy=policy):
            return policy(key, rollout.Observation(array, mask, index, state))

        together = jax.vmap(one_seat)(
            keys[np.asarray(seats)],
            jnp.stack([views[a].array for a in agents]),
            jnp.stack([views[a].mask for a in agents]),
            jnp.asarray(seats, jnp.int32),
        )
        actions.update({a: rollout.policy_action(together[j], a) for j, a in enumerate(agents)})
    return actions, new


def measure(env, seats, act, episodes: int) -> tuple[float, float, list]:
    rollout.act_carried = act
    jax.clear_caches()
    lowered = jax.jit(
        lambda k: rollout.run_episodes(env, seats, k, episodes, jit=False, mesh=None)
    ).lower(jax.random.key(2))
    start = time.process_time()
    compiled = lowered.compile()
    compile_s = time.process_time() - start
    leaves = [np.asarray(x) for x in jax.tree.leaves(compiled(jax.random.key(2)))]
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        jax.block_until_ready(compiled(jax.random.key(3)))
        runs.append(time.perf_counter() - start)
    return compile_s, min(runs), leaves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=16)
    args = parser.parse_args()
    jax.config.update("jax_enable_compilation_cache", False)
    env = dilemmax.make("open_cleanup")
    pols = env.scripted_policies()
    populations = {
        "all greedy": pols["greedy"],
        "1 informed cleaner + 4 greedy": [pols["informed_cleaner"]] + [pols["greedy"]] * 4,
    }
    sides = {"per-seat loop": LOOP, "vmapped seats": vmapped_seats}
    figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for _ in range(args.rounds):
        for name, seats in populations.items():
            episodes = {}
            for side, act in sides.items():
                compile_s, run_s, leaves = measure(env, seats, act, args.episodes)
                figures.setdefault((name, side), []).append((compile_s, run_s))
                episodes[side] = leaves
            same = all(map(np.array_equal, *episodes.values()))
            assert same, f"{name}: the two sides played different episodes"
    rollout.act_carried = LOOP
    flags = os.environ.get("XLA_FLAGS") or "XLA's defaults"
    print(f"open_cleanup, {args.episodes} episodes of {env.max_steps} steps, jax {jax.__version__}")
    print(f"XLA_FLAGS: {flags}")
    print("| population | side | compile CPU s (each round) | run s (best per round) |")
    print("| --- | --- | --- | --- |")
    for (name, side), rows in figures.items():
        compiles = ", ".join(f"{c:.2f}" for c, _ in rows)
        runs = ", ".join(f"{r:.3f}" for _, r in rows)
        print(f"| {name} | {side} | {compiles} | {runs} |")
    print("episodes equal leaf by leaf on both sides: yes")


if __name__ == "__main__":
    main()
