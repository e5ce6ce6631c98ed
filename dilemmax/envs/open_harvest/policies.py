"""Scripted, jittable OpenHarvest policies: ``policy(key, observation) -> int32 action``.

They read ``observation.array`` (the agent's own 11 x 11 view; codes or one-hot) and
``observation.mask``; only ``oracle`` also reads the privileged ``observation.state`` (the hidden
pay rule). Navigation is a breadth-first distance field over the view (at most 20 relaxation
sweeps of an 11 x 11 array), so walls and other agents are walked around.

- ``greedy``: the paper's baseline: walks to the nearest visible apple and eats it at whatever
  stage; explores when it sees none.
- ``sustainable``: restraint without knowing the rule: eats an apple only if at least 3 other
  apples it can see hang within two cells of it, so the emptied cell keeps the top regrowth rate
  (base 0.025); never walks across an apple it does not mean to eat; waits near apples it may
  not take.
- ``oracle``: ``sustainable`` that also knows the pay rule and eats each colour only at its
  best-paying stage: a reference for what informed restraint can earn.
- ``random``: uniform over the legal actions.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.envs.open_harvest import constants as c

_BIG = 1000
_SWEEPS = c.VIEW_HEIGHT + c.VIEW_WIDTH - 2  # longest shortest path inside the view
# Neighbours of the observer's cell in the view: ahead, right, behind, left (view frame), each
# as (row, col) and the quarter turns from the observer's facing to that direction.
_STEPS = ((c.SELF_ROW - 1, c.SELF_COL), (c.SELF_ROW, c.SELF_COL + 1),
          (c.SELF_ROW + 1, c.SELF_COL), (c.SELF_ROW, c.SELF_COL - 1))  # fmt: skip
_NEIGHBOUR_OFFSETS = [
    (r, q) for r in range(-2, 3) for q in range(-2, 3) if 0 < abs(r) + abs(q) <= 2
]


def view_codes(array: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(cell, who, info), each int32[11, 11], from a codes or a one-hot observation."""
    if array.shape[-1] == c.OBS_CHANNELS:
        return tuple(array[..., k].astype(jnp.int32) for k in range(c.OBS_CHANNELS))
    bounds = np.cumsum([0, c.NUM_CELL_CODES, c.NUM_WHO_CODES, c.NUM_INFO_CODES])
    return tuple(
        jnp.argmax(array[..., lo:hi], axis=-1).astype(jnp.int32)
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
    )


def _shift(x: jax.Array, dr: int, dq: int, fill) -> jax.Array:
    """``out[r, q] = x[r + dr, q + dq]``, ``fill`` where that is outside the view."""
    h, w = x.shape
    padded = jnp.pad(x, 2, constant_values=fill)
    return padded[2 + dr : 2 + dr + h, 2 + dq : 2 + dq + w]


def distance_field(targets: jax.Array, passable: jax.Array) -> jax.Array:
    """int32[11, 11]: steps from each cell to the nearest target, moving through ``passable``
    cells (targets count as passable); ``_BIG`` where none is reachable."""
    passable = passable | targets

    def sweep(_, dist):
        best = jnp.minimum(
            jnp.minimum(_shift(dist, -1, 0, _BIG), _shift(dist, 1, 0, _BIG)),
            jnp.minimum(_shift(dist, 0, -1, _BIG), _shift(dist, 0, 1, _BIG)),
        )
        return jnp.where(passable, jnp.minimum(dist, best + 1), _BIG)

    start = jnp.where(targets, 0, _BIG).astype(jnp.int32)
    return jax.lax.fori_loop(0, _SWEEPS, sweep, start)


def apples_around(apples: jax.Array) -> jax.Array:
    """int32[11, 11]: apples visible within Manhattan distance 1-2 of each view cell."""
    a = apples.astype(jnp.int32)
    return sum(_shift(a, dr, dq, 0) for dr, dq in _NEIGHBOUR_OFFSETS)


def _facing(info: jax.Array) -> jax.Array:
    """int32[]: the observer's absolute orientation, from its own agent-info code."""
    return (info[c.SELF_ROW, c.SELF_COL] - 1) % 4


def _move_action(view_direction: jax.Array, facing: jax.Array) -> jax.Array:
    """The absolute move action for a view direction (0 ahead, 1 right, 2 behind, 3 left)."""
    return jnp.asarray(c.DIR_TO_ACTION)[(facing + view_direction) % 4]


def _navigate(key, targets, passable, wait_instead, facing):
    """Step towards the nearest target; else stay (``wait_instead``) or explore."""
    dist = distance_field(targets, passable)
    rows = np.array([s[0] for s in _STEPS])
    cols = np.array([s[1] for s in _STEPS])
    around = dist[rows, cols]  # [4]: ahead, right, behind, left
    key_tie, key_explore, key_turn = jax.random.split(key, 3)
    noise = jax.random.uniform(key_tie, (4,)) * 0.5  # random tie-break among equal distances
    best = jnp.argmin(around + noise)
    go = _move_action(best, facing)

    # Exploring: keep walking ahead while possible, sometimes turn to look around.
    ahead_free = passable[rows[0], cols[0]] & ~targets[rows[0], cols[0]]
    turn = jnp.where(jax.random.bernoulli(key_turn), c.TURN_LEFT, c.TURN_RIGHT)
    wander = jnp.where(
        ahead_free & jax.random.bernoulli(key_explore, 0.85), _move_action(0, facing), turn
    )
    idle = jnp.where(wait_instead, c.STAY, wander)
    return jnp.where(around[best] < _BIG, go, idle).astype(jnp.int32)


def _respect_mask(action: jax.Array, mask: jax.Array) -> jax.Array:
    return jnp.where(mask[action], action, c.STAY).astype(jnp.int32)


def _terrain(cells, who):
    """(apples, open ground) bool[11, 11]: apple cells, and walkable cells with nobody on them."""
    apples = cells >= c.CODE_APPLE
    open_ground = (cells == c.CODE_GROUND) | ((cells >= c.CODE_EMPTY_TREE) & (cells < c.CODE_APPLE))
    return apples, open_ground & (who == c.WHO_NOBODY)


def greedy_policy(key: jax.Array, observation) -> jax.Array:
    """Walks to the nearest visible apple, whatever its stage, and eats it."""
    cells, who, info = view_codes(observation.array)
    apples, open_ground = _terrain(cells, who)
    action = _navigate(key, apples, open_ground | apples, jnp.bool_(False), _facing(info))
    return _respect_mask(action, observation.mask)


def eat_selectively(key: jax.Array, observation, allowed) -> jax.Array:
    """Walks to the nearest visible apple that ``allowed(cells, apples)`` admits (a bool[11, 11]
    of the view's codes and apple cells) and eats it.

    Other apples are obstacles: walking onto one would eat it. With apples in sight but none to
    take, it mostly waits for them to ripen or regrow; now and then it looks elsewhere.
    """
    cells, who, info = view_codes(observation.array)
    apples, open_ground = _terrain(cells, who)
    eligible = apples & allowed(cells, apples)
    key_nav, key_wait = jax.random.split(key)
    wait = jnp.any(apples) & jax.random.bernoulli(key_wait, 0.9)
    action = _navigate(key_nav, eligible, open_ground, wait, _facing(info))
    return _respect_mask(action, observation.mask)


def at_best_stage(best: jax.Array, any_stage: jax.Array | None = None):
    """``cells -> bool[11, 11]``: apples at their colour's ``best`` stage (int32[C]); colours
    flagged in ``any_stage`` (bool[C], default none) pass at every stage."""
    if any_stage is None:
        any_stage = jnp.zeros(best.shape, bool)

    def ok(cells):
        code = jnp.clip(cells - c.CODE_APPLE, 0, c.NUM_COLOURS * c.NUM_STAGES - 1)
        colour, stage = code // c.NUM_STAGES, code % c.NUM_STAGES
        return any_stage[colour] | (stage == best[colour])

    return ok


def _restrained(key, observation, stage_ok):
    """Eats only apples ``stage_ok`` admits that keep >= 3 visible apples within two cells."""
    return eat_selectively(
        key, observation, lambda cells, apples: (apples_around(apples) >= 3) & stage_ok(cells)
    )


def sustainable_policy(key: jax.Array, observation) -> jax.Array:
    """Eats only apples that keep >= 3 visible apples within two cells; waits near the rest."""
    return _restrained(key, observation, lambda cells: jnp.ones(cells.shape, bool))


def oracle_policy(key: jax.Array, observation) -> jax.Array:
    """``sustainable`` that eats each colour only at its best-paying stage (reads the rule from
    the privileged ``observation.state``)."""
    return _restrained(key, observation, at_best_stage(observation.state.config.best_stage))


def random_policy(key: jax.Array, observation) -> jax.Array:
    """Uniform over the legal actions."""
    logits = jnp.where(observation.mask, 0.0, -jnp.inf)
    return jax.random.categorical(key, logits).astype(jnp.int32)


SCRIPTED_POLICIES: dict[str, Callable] = {
    "greedy": greedy_policy,
    "sustainable": sustainable_policy,
    "oracle": oracle_policy,
    "random": random_policy,
}
