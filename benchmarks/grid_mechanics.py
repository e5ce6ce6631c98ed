"""Throughput of the shared grid mechanics (dilemmax/envs/grid/) on a batch of environments.

Each "env-step" of a 5-agent 12 x 16 grid does what a grid game's step does with these helpers:

- ``moves``: random compass moves and turns -> ``propose_moves`` -> ``resolve_moves``;
- ``views``: paint the agents into a uint8 cell-code layer, then 5 egocentric 11 x 11 views
  (``egocentric_views``) plus the agent-index / facing views (``egocentric_agent_views``);
- ``moves+views``: both, plus a beam footprint (``beam_mask``), i.e. the grid part of a step.

The state is carried through ``lax.scan`` so steps depend on each other; compile time is
excluded (one warm-up call), results are blocked on, and the views are consumed (summed into
the carry). Usage:

    python benchmarks/grid_mechanics.py [--num-envs 256] [--steps 500] [--repeats 3]

Prints a markdown table and writes it to benchmarks/results/grid_mechanics.md (``--no-write``
to only print).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
from timing import load, machine, report, time_compiled

from dilemmax.envs import grid

HEIGHT, WIDTH, NUM_AGENTS = 12, 16, 5
RESULTS = Path(__file__).parent / "results" / "grid_mechanics.md"


def _initial_state(key, num_envs):
    """Positions on distinct cells, random facings, a layer of random cell codes and walls."""
    k_pos, k_ori, k_layer = jax.random.split(key, 3)
    cells = jax.vmap(lambda k: jax.random.permutation(k, HEIGHT * WIDTH)[:NUM_AGENTS])(
        jax.random.split(k_pos, num_envs)
    )
    positions = jnp.stack([cells // WIDTH, cells % WIDTH], axis=-1).astype(jnp.int32)
    orientations = jax.random.randint(k_ori, (num_envs, NUM_AGENTS), 0, 4)
    layer = jax.random.randint(k_layer, (num_envs, HEIGHT, WIDTH), 0, 30).astype(jnp.uint8)
    passable = layer < 27  # about 10% walls
    passable = jax.vmap(lambda p, pos: p.at[pos[:, 0], pos[:, 1]].set(True))(passable, positions)
    return positions, orientations, layer, passable


def _one_env_step(mode, key, positions, orientations, layer, passable):
    k_act, k_move = jax.random.split(key)
    total = jnp.float32(0)
    if mode in ("moves", "moves+views"):
        action = jax.random.randint(k_act, (NUM_AGENTS,), 0, 7)  # 0-3 move, 4/5 turn, 6 fire
        move_dir = jnp.where(action < 4, action, grid.NO_MOVE)
        targets = grid.propose_moves(positions, move_dir)
        positions = grid.resolve_moves(k_move, positions, targets, passable)
        turn = jnp.where(action == 4, -1, jnp.where(action == 5, 1, 0))
        orientations = grid.turn(orientations, turn)
        if mode == "moves+views":
            hit = grid.beam_mask(positions, orientations, action == 6, (HEIGHT, WIDTH))
            total += jnp.sum(hit)
    if mode in ("views", "moves+views"):
        painted = grid.paint_agents(layer, positions, jnp.uint8(31))
        views = grid.egocentric_views(painted, positions, orientations, pad_value=255)
        index, facing = grid.egocentric_agent_views(positions, orientations, (HEIGHT, WIDTH))
        total += jnp.sum(views.astype(jnp.float32)) + jnp.sum(index + facing)
    if mode == "views":  # keep the state moving so views are not loop-invariant
        orientations = grid.turn(orientations, 1)
    positions_sum = jnp.sum(positions).astype(jnp.float32)
    return positions, orientations, total + positions_sum


def make_runner(mode: str, num_envs: int, num_steps: int):
    step = jax.vmap(lambda k, p, o, lay, pas: _one_env_step(mode, k, p, o, lay, pas))

    @jax.jit
    def run(key):
        positions, orientations, layer, passable = _initial_state(key, num_envs)

        def body(carry, step_key):
            positions, orientations, total = carry
            keys = jax.random.split(step_key, num_envs)
            positions, orientations, checksum = step(keys, positions, orientations, layer, passable)
            return (positions, orientations, total + jnp.sum(checksum)), None

        init = (positions, orientations, jnp.float32(0))
        (_, _, total), _ = jax.lax.scan(body, init, jax.random.split(key, num_steps))
        return total

    return run


def measure(mode: str, num_envs: int, num_steps: int, repeats: int) -> tuple[float, float]:
    """(compile seconds, best env-steps per second over ``repeats`` timed runs)."""
    compile_s, best = time_compiled(make_runner(mode, num_envs, num_steps), repeats)
    return compile_s, num_envs * num_steps / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=256)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    load_before = load()
    rows = []
    for mode in ("moves", "views", "moves+views"):
        compile_s, rate = measure(mode, args.num_envs, args.steps, args.repeats)
        rows.append(f"| {mode} | {args.num_envs} | {args.steps} | {rate:,.0f} | {compile_s:.1f} |")
    load_after = load()

    lines = [
        "# Grid mechanics throughput",
        "",
        f"`python benchmarks/grid_mechanics.py --num-envs {args.num_envs} --steps {args.steps}"
        f" --repeats {args.repeats}`",
        "",
        f"{NUM_AGENTS} agents on a {HEIGHT} x {WIDTH} grid, 11 x 11 views; best of "
        f"{args.repeats} timed runs after a warm-up (compile excluded), blocked on, views summed.",
        "",
        f"- machine: {machine()}",
        f"- before: {load_before}; after: {load_after} (1 / 5 / 15 min)",
        "",
        "| work per env-step | envs | steps | env-steps/s | compile (s) |",
        "| --- | ---: | ---: | ---: | ---: |",
        *rows,
        "",
    ]
    report("\n".join(lines), None if args.no_write else RESULTS)


if __name__ == "__main__":
    main()
