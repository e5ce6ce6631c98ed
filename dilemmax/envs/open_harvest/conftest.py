"""Shared fixtures of the OpenHarvest tests: one small env, its jitted functions, and a
hand-built map on which every position is known.

The hand-built map (16 x 22, spawn row 15, columns 1-20):

- four 13-cell diamonds centred at (2, 3), (2, 11), (2, 19) and (9, 3);
- two 6-cell triangles with their tip at (7, 10) and (7, 16): rows 7 / 8 / 9 hold 1 / 2 / 3
  cells going east;
- rows 12-15 are open ground, where the movement and zap tests play.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest import generator
from dilemmax.envs.open_harvest.env import OpenHarvestEnv
from dilemmax.envs.open_harvest.types import OpenHarvestLayout, OpenHarvestRule

DIAMOND_CENTRES = ((2, 3), (2, 11), (2, 19), (9, 3))
TRIANGLE_TIPS = ((7, 10), (7, 16))
SPAWN_ROW = 15


def hand_layout() -> OpenHarvestLayout:
    trees = []
    for r, q in DIAMOND_CENTRES:
        trees += [(r + dr, q + dq) for dr, dq in generator.SHAPES[13]]
    for r, q in TRIANGLE_TIPS:
        trees += [(r + dr, q + dq) for dr, dq in generator.SHAPES[6]]
    trees = jnp.asarray(np.array(trees, np.int32))
    spawn_cols = np.arange(c.NUM_SPAWNS, dtype=np.int32) + c.SPAWN_FIRST_COL
    return OpenHarvestLayout(
        tree_positions=trees,
        tree_patch=jnp.asarray(np.repeat(np.arange(c.NUM_PATCHES), c.PATCH_SIZES), jnp.int32),
        neighbours=generator.neighbour_table(trees),
        tree_index=generator.tree_index_grid(trees),
        walls=jnp.zeros((c.GRID_HEIGHT, c.GRID_WIDTH), bool),
        spawn_points=jnp.asarray(np.stack([np.full(20, SPAWN_ROW), spawn_cols], 1), jnp.int32),
        spawn_row=jnp.int32(SPAWN_ROW),
        patch_turns=jnp.zeros((c.NUM_PATCHES,), jnp.int32),
    )


@functools.cache
def hand_config(
    pay_perm=(0, 1, 2, 3, 4), regrowth_perm=(5, 4, 3, 2, 1), colours=(0, 1, 2, 3, 4, 0)
):
    """The hand-built config of these permutations and colours, made once per process (about 50
    programs): call it inside a test, not at import, where every pytest worker collecting the
    suite would pay for it."""
    rule = OpenHarvestRule(
        pay_perm=jnp.asarray(pay_perm, jnp.int32),
        regrowth_perm=jnp.asarray(regrowth_perm, jnp.int32),
    )
    return generator.make_config(hand_layout(), rule, jnp.asarray(colours, jnp.int32))


def tree_at(config, r: int, q: int) -> int:
    index = int(config.layout.tree_index[r, q])
    assert index >= 0, f"no tree at {(r, q)}"
    return index


@pytest.fixture(scope="session")
def env():
    return OpenHarvestEnv(num_layouts=16, num_rules=64, pool_seed=0)


@pytest.fixture(scope="session")
def step(env):
    return jax.jit(env.step_env)


@pytest.fixture(scope="session")
def reset_to(env):
    return jax.jit(env.reset_to)


@pytest.fixture(scope="session")
def hand_state(env, reset_to):
    """A fresh trial on the hand-built map with agents parked on spawn cells (15, 1..5)."""
    _, state = reset_to(jax.random.key(0), hand_config())
    positions = np.stack([np.full(env.num_agents, SPAWN_ROW), np.arange(1, env.num_agents + 1)], 1)
    return state.replace(
        agent_pos=jnp.asarray(positions, jnp.int32),
        agent_dir=jnp.zeros(env.num_agents, jnp.int32),
    )


def place(state, agent: int, row: int, col: int, facing: int = 0):
    """``state`` with one agent moved to (row, col) facing ``facing``."""
    return state.replace(
        agent_pos=state.agent_pos.at[agent].set(jnp.array([row, col], jnp.int32)),
        agent_dir=state.agent_dir.at[agent].set(facing),
    )


def act(env, **chosen) -> dict:
    """Actions for all agents: STAY unless given as ``agent_i=action``."""
    return {a: jnp.int32(chosen.get(a, c.STAY)) for a in env.agents}
