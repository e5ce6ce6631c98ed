"""The orchard's dynamics on per-tree arrays: laying, eating, ripening, rotting and regrowth.

All functions are pure, jittable and act on one environment (``T`` trees, ``A`` agents); the env
vmaps them. Order inside one step (see :func:`advance_orchard`):

1. ``n`` = apples hanging within Manhattan distance 2 of each cell, counted after this step's
   eating (the apples that are "still hanging close to that cell").
2. Apples age by one step; an apple whose age reaches 3 x its stage length rots: its cell
   empties and waits a fresh 2-5 step delay.
3. A cell waiting after a rot counts down and grows a new apple when the count reaches 0,
   whatever is around it.
4. A cell whose apple was eaten grows a new apple with probability
   ``base(min(n, 3)) * multiplier[colour, stage it was eaten at]``.
5. No apple grows under an agent (a rotted cell whose delay is over waits until the cell is
   free), so an agent only ever eats by walking onto an apple.

A new apple is unripe with age 0 and draws its own stage length (15-20 steps).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest.types import OpenHarvestConfig, Orchard


@struct.dataclass
class OrchardEvents:
    """What happened to the trees in one step (all bool[T])."""

    rotted: jax.Array
    regrown: jax.Array  # a cell emptied by eating grew a new apple
    regrown_after_rot: jax.Array  # a rotted cell grew a new apple


def _uniform_int(bits: jax.Array, low: jax.Array, high: jax.Array) -> jax.Array:
    """int32[...]: integers in [low, high] from random bits: ``low + bits % span``.

    Exact when the span divides the bits' range (a rot delay of 2-5 from 8 bits); otherwise the
    bias is below span / range (< 1e-8 for a stage length from 32 bits).
    """
    span = (high - low + 1).astype(jnp.uint32)
    return low + (bits % span).astype(jnp.int32)


def _unit_float(bits: jax.Array) -> jax.Array:
    """float32[...] uniform in [0, 1) from uint32 random bits (24-bit resolution)."""
    return (bits >> 8).astype(jnp.float32) * jnp.float32(2.0**-24)


def stage_of(age: jax.Array, stage_length: jax.Array) -> jax.Array:
    """int32[...]: min(age // length, 2)."""
    return jnp.minimum(age // stage_length, c.NUM_STAGES - 1).astype(jnp.int32)


def draw_stage_lengths(bits: jax.Array, config: OpenHarvestConfig) -> jax.Array:
    """int32[...]: stage lengths uniform in [min, max] (15-20) from uint32 random bits."""
    return _uniform_int(bits, config.stage_length_min, config.stage_length_max)


def lay_orchard(stage_length: jax.Array) -> Orchard:
    """A fresh orchard at a trial start: an unripe apple (age 0) on every tree.

    Args:
        stage_length: int32[T], the new apples' stage lengths.
    """
    num_trees = stage_length.shape[0]
    return Orchard(
        apple=jnp.ones((num_trees,), bool),
        age=jnp.zeros((num_trees,), jnp.int32),
        stage_length=stage_length.astype(jnp.int32),
        eaten_stage=jnp.full((num_trees,), -1, jnp.int32),
        regrow_timer=jnp.zeros((num_trees,), jnp.int32),
    )


def apples_nearby(apple: jax.Array, neighbours: jax.Array) -> jax.Array:
    """int32[T]: apples hanging on each tree's 12-cell neighbourhood (padding reads False)."""
    padded = jnp.concatenate([apple, jnp.zeros((1,), bool)])
    return jnp.sum(padded[neighbours], axis=-1, dtype=jnp.int32)


def regrowth_probability(
    n: jax.Array, colour: jax.Array, eaten_stage: jax.Array, config: OpenHarvestConfig
) -> jax.Array:
    """float32[...]: P(an eaten cell grows an apple this step) = base(min(n, 3)) x multiplier."""
    base = config.base_regrowth[jnp.minimum(n, 3)]
    mult = config.regrowth_multiplier[colour, jnp.clip(eaten_stage, 0, c.NUM_STAGES - 1)]
    return jnp.where(eaten_stage >= 0, base * mult, 0.0)


def eat(
    orchard: Orchard, config: OpenHarvestConfig, positions: jax.Array
) -> tuple[Orchard, dict[str, jax.Array]]:
    """Agents standing on an apple eat it.

    Args:
        positions: int32[A, 2], the agents' cells after moving (distinct).

    Returns:
        (orchard, events) with events ``ate`` bool[A], ``ate_tree`` / ``ate_colour`` /
        ``ate_stage`` int32[A] (-1 when nothing was eaten), ``ate_pay`` float32[A] and
        ``emptied_eaten`` bool[T].
    """
    num_trees = orchard.apple.shape[0]
    tree = config.layout.tree_index[positions[:, 0], positions[:, 1]]  # [A]
    safe = jnp.maximum(tree, 0)
    ate = (tree >= 0) & orchard.apple[safe]
    stage = stage_of(orchard.age[safe], orchard.stage_length[safe])
    colour = config.tree_colour[safe]
    pay = jnp.where(ate, config.pay[colour, stage], 0.0).astype(jnp.float32)
    # Agents occupy distinct cells, so each tree has at most one eater; others index past the end.
    target = jnp.where(ate, tree, num_trees)
    emptied = jnp.zeros((num_trees,), bool).at[target].set(True, mode="drop")
    orchard = orchard.replace(
        apple=orchard.apple & ~emptied,
        eaten_stage=orchard.eaten_stage.at[target].set(stage, mode="drop"),
        regrow_timer=jnp.where(emptied, 0, orchard.regrow_timer),
    )
    events = {
        "ate": ate,
        "ate_tree": jnp.where(ate, tree, -1),
        "ate_colour": jnp.where(ate, colour, -1),
        "ate_stage": jnp.where(ate, stage, -1),
        "ate_pay": pay,
        "emptied_eaten": emptied,
    }
    return orchard, events


def advance_orchard(
    key: jax.Array, orchard: Orchard, config: OpenHarvestConfig, occupied: jax.Array
) -> tuple[Orchard, OrchardEvents]:
    """One step of ripening, rotting and regrowth (after eating; see the module docstring).

    Args:
        occupied: bool[T], trees with an agent standing on them (no apple grows there).
    """
    num_trees = orchard.apple.shape[0]
    bits = jax.random.bits(key, (2, num_trees), jnp.uint32)

    n = apples_nearby(orchard.apple, config.layout.neighbours)

    # Ripening and rotting.
    age = jnp.where(orchard.apple, orchard.age + 1, orchard.age)
    rotted = orchard.apple & (age >= c.ROT_AFTER_STAGES * orchard.stage_length)
    apple = orchard.apple & ~rotted

    # Rotted cells count down, then grow whatever is around them (delayed while occupied).
    waiting = orchard.regrow_timer > 0
    timer = jnp.where(waiting, orchard.regrow_timer - 1, 0)
    due = waiting & (timer == 0)
    regrown_after_rot = due & ~occupied
    timer = jnp.where(due & occupied, 1, timer)
    # bits[0]: its high 24 bits decide regrowth, its low 8 bits a rot delay; bits[1]: lengths.
    delay = _uniform_int(bits[0] & 0xFF, config.rot_regrow_min, config.rot_regrow_max)
    timer = jnp.where(rotted, delay, timer)

    # Eaten cells regrow with a probability set by the apples around them.
    eaten_empty = ~orchard.apple & ~waiting & (orchard.eaten_stage >= 0) & ~occupied
    p = regrowth_probability(n, config.tree_colour, orchard.eaten_stage, config)
    regrown = eaten_empty & (_unit_float(bits[0]) < p)

    new = regrown | regrown_after_rot
    new_length = draw_stage_lengths(bits[1], config)
    orchard = Orchard(
        apple=apple | new,
        age=jnp.where(new, 0, age),
        stage_length=jnp.where(new, new_length, orchard.stage_length),
        eaten_stage=jnp.where(new | rotted, -1, orchard.eaten_stage),
        regrow_timer=timer,
    )
    return orchard, OrchardEvents(rotted, regrown, regrown_after_rot)


def orchard_dead(orchard: Orchard) -> jax.Array:
    """bool[]: no apple hangs and no rotted cell is waiting, so no apple can ever appear again."""
    return ~jnp.any(orchard.apple) & ~jnp.any(orchard.regrow_timer > 0)
