"""Shared fixtures of the OpenCleanup tests: one small env (small pools), hand-built states."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest

from dilemmax.envs import pools
from dilemmax.envs.open_cleanup import constants as C
from dilemmax.envs.open_cleanup.env import OpenCleanupEnv
from dilemmax.envs.open_cleanup.types import OpenCleanupRule

SMALL = {"num_layouts": 16, "num_rules": 500}


@pytest.fixture(scope="session")
def env():
    return OpenCleanupEnv(**SMALL)


_JITTED = {}


def jit_step(env):
    """``jax.jit(env.step_env)``, compiled once per env for the whole test session."""
    if id(env) not in _JITTED:
        _JITTED[id(env)] = jax.jit(env.step_env)
    return _JITTED[id(env)]


@functools.partial(jax.jit, static_argnums=0)
def _first_layout_start(env, rule):
    """The first trial's start on the pool's first layout under ``rule``: one program per env
    (run op by op, it was a couple of hundred one-primitive programs)."""
    layout = pools.pool_item(env.layout_pool, 0)
    config = env.make_config(jax.random.PRNGKey(0), layout, rule, dominant_hue=2)
    return env._trial_start(jax.random.PRNGKey(1), config, 0, 0)


def make_rule(**pairs) -> OpenCleanupRule:
    """A rule with some effects pinned, e.g. ``make_rule(dark=(2, 0), mid=(2, 3), hue2=(3, 1))``;
    the other effects take the lowest unused pairs."""
    chosen = {}
    for name, (a, b) in pairs.items():
        effect = {"dark": C.EFFECT_DARK_TO_MID, "mid": C.EFFECT_MID_TO_LIGHT}.get(name)
        effect = int(name[3:]) if effect is None else effect
        chosen[effect] = C.pair_index(a, b)
    free = iter(p for p in range(C.NUM_PAIRS) if p not in chosen.values())
    effect_pairs = [chosen.get(e) for e in range(C.NUM_EFFECTS)]
    effect_pairs = [p if p is not None else next(free) for p in effect_pairs]
    return OpenCleanupRule(effect_pairs=jnp.asarray(effect_pairs, jnp.int32))


def hand_state(env, rule=None, grid=None, positions=None, orientations=None, window=None, **kw):
    """A state on the pool's first layout, with any of its parts replaced."""
    rule = make_rule() if rule is None else rule
    state = _first_layout_start(env, rule)
    a = env.num_agents
    changes = {}
    if grid is not None:
        changes["grid"] = jnp.asarray(grid, jnp.uint8)
    if positions is not None:
        changes["positions"] = jnp.asarray(positions, jnp.int32)
    if orientations is not None:
        changes["orientations"] = jnp.asarray(orientations, jnp.int32)
    if window is not None:
        changes["window"] = jnp.asarray(window, jnp.int32).reshape(a, 2)
    changes.update(kw)
    return state.replace(**changes)


def actions_of(env, *values):
    """{agent: int32 action}; missing agents stay."""
    values = list(values) + [C.STAY_ACTION] * (env.num_agents - len(values))
    return {agent: jnp.int32(v) for agent, v in zip(env.agents, values, strict=True)}


def spread_positions(env):
    """Agents parked on the bottom-right corner row, far from each other's business."""
    return [[C.GRID_HEIGHT - 1, C.GRID_WIDTH - 1 - 2 * i] for i in range(env.num_agents)]
