"""Every random draw OpenCleanup makes, declared on :class:`dilemmax.envs.draws.Key` objects.

A step, a trial start and a configuration each make all their draws in one
:func:`dilemmax.envs.draws.resolve` (a few hashes instead of one per draw; the numbers are the
``jax.random`` calls' each plan names). The functions that use the values take the resolved
dicts: ``dynamics.spawn_waste_drawn``, ``generator.waste_codes_drawn``, the env's step.
"""

from __future__ import annotations

from dilemmax.envs import draws
from dilemmax.envs.open_cleanup import constants as C


def waste_codes(key: draws.Key, shape=()) -> dict:
    """The colours of new waste: a shade, any of the 15 types, and the coin between them."""
    k_skew, k_shade, k_any = key.split(3)
    return {
        "shade": k_shade.randint(shape, 0, C.NUM_SHADES),
        "any_type": k_any.randint(shape, 0, C.NUM_WASTE_TYPES),
        "coin": k_skew.uniform(shape),
    }


def config(key: draws.Key, num_hues: int = C.NUM_HUES, draw_hue: bool = True) -> dict:
    """A configuration's: the dominant hue (where it is not given) and the colours of the
    initially polluted cells."""
    k_hue, k_waste = key.split()
    plan = {"waste": waste_codes(k_waste, (C.NUM_POLLUTED_START,))}
    if draw_hue:
        plan["hue"] = k_hue.randint((), 0, num_hues)
    return plan


def sampled_config(key: draws.Key, num_layouts: int, num_rules: int, num_hues: int) -> dict:
    """``sample_config``'s: a layout and a rule from the pools (``pools.sample_from_pool``'s
    draws), then :func:`config`'s."""
    k_layout, k_rule, k_rest = key.split(3)
    return {
        "layout": k_layout.randint((), 0, num_layouts),
        "rule": k_rule.randint((), 0, num_rules),
        "config": config(k_rest, num_hues),
    }


def trial_start(key: draws.Key, num_spawns: int, num_agents: int) -> dict:
    """A trial start's: scores that rank the spawn points, and each agent's facing."""
    k_spawn, k_face = key.split()
    return {"spawn": k_spawn.uniform((num_spawns,)), "face": k_face.randint((num_agents,), 0, 4)}


def next_trial(key: draws.Key, num_spawns: int, num_agents: int, grid_shape) -> dict:
    """The next trial's: its start, and a fresh shade for every waste cell."""
    k_start, k_shade = key.split()
    return {
        "start": trial_start(k_start, num_spawns, num_agents),
        "shade": k_shade.randint(grid_shape, 0, C.NUM_SHADES),
    }


def spawn_waste(key: draws.Key, grid_shape) -> dict:
    """New waste's: a score per cell (the highest clean river cell wins), the coin, its colour."""
    k_cell, k_coin, k_colour = key.split(3)
    return {
        "cell": k_cell.uniform(grid_shape),
        "coin": k_coin.uniform(),
        "colour": waste_codes(k_colour),
    }


def step(key: draws.Key, num_agents: int, grid_shape, num_spawns: int, zap: bool) -> dict:
    """A step's, but the next trial's: those sit in the rare branch that starts a trial, so only
    such a step pays for them; ``reset_key`` is the key that branch draws from."""
    k_move, k_zap, k_spawn, k_apple, k_reset = key.split(5)
    plan = {
        "priority": k_move.permutation(num_agents),
        "waste": spawn_waste(k_spawn, grid_shape),
        "apples": k_apple.uniform(grid_shape),
        "reset_key": k_reset.as_key(),
    }
    if zap:
        plan["respawn"] = k_zap.uniform((num_spawns,))
    return plan
