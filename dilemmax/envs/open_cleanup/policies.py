"""Scripted, jittable OpenCleanup policies: ``policy(key, observation) -> int32 action``.

- ``random``: uniform over the legal actions.
- ``greedy`` (the paper's scripted baseline): eats as soon as it can. It walks toward the nearest
  apple in its view; with none in view, toward the nearest orchard soil; with no orchard in view
  either, it moves or turns at random. It never picks up, fires or cleans. It reads only the
  observation array (any ``observation`` kind of the env).
- ``informed_cleaner`` (an upper reference, privileged): reads the full state through
  ``observation.state``, so it knows the hidden recipes. While at least 10 % of the river is
  polluted it cleans: it keeps the working tool it holds while that tool has work on the map,
  otherwise agent i takes the (i mod k)-th busiest of the k effects with work (a division of
  labour without communication), picks up that recipe's two tools in order at the nearest
  stations, walks next to the nearest cell the tool acts on, faces it and fires (it fires
  whenever its beam covers such a cell). Below 10 % pollution it plays ``greedy``.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from dilemmax.envs import grid as G
from dilemmax.envs.open_cleanup import constants as C
from dilemmax.envs.open_cleanup import dynamics as D
from dilemmax.envs.open_cleanup import observation as O

_RANDOM_MOVE_PROB = 0.05  # breaks ties and deadlocks between scripted agents
# The informed cleaner harvests while the polluted share of the river is below this (apples then
# grow at 75 % or more of their top rate) and cleans above it.
CLEAN_ABOVE = 0.1


def _decode(array: jax.Array):
    """(cells, info) uint8/int32[11, 11] from a codes or a one-hot observation."""
    if array.shape[-1] == O.NUM_CHANNELS:
        return array[..., 0].astype(jnp.int32), array[..., 2].astype(jnp.int32)
    cells = jnp.argmax(array[..., : C.NUM_CELL_CODES], axis=-1)
    start = C.NUM_CELL_CODES + C.NUM_AGENT_CODES
    info = jnp.argmax(array[..., start : start + O.NUM_INFO_CODES], axis=-1)
    return cells, info


def random_policy(key: jax.Array, observation) -> jax.Array:
    """Uniform over the legal actions."""
    logits = jnp.where(observation.mask, 0.0, -jnp.inf)
    return jax.random.categorical(key, logits).astype(jnp.int32)


def _move_along(key: jax.Array, forward: jax.Array, right: jax.Array, facing: jax.Array):
    """Compass move that reduces the larger of two egocentric offsets (``facing`` is absolute)."""
    along_forward = jnp.abs(forward) >= jnp.abs(right)
    relative = jnp.where(along_forward, jnp.where(forward > 0, 0, 2), jnp.where(right > 0, 1, 3))
    action = jnp.asarray(C.DIR_TO_ACTION)[(facing + relative) % 4]
    random_move = jax.random.randint(key, (), 0, 4)
    k_noise = jax.random.fold_in(key, 1)
    return jnp.where(jax.random.uniform(k_noise) < _RANDOM_MOVE_PROB, random_move, action)


def greedy_policy(key: jax.Array, observation) -> jax.Array:
    """Toward the nearest visible apple, else the nearest visible orchard soil, else explore."""
    cells, info = _decode(observation.array)
    facing = (info[O.SELF_ROW, O.SELF_COL] - 1) % 4
    rows, cols = jnp.meshgrid(jnp.arange(cells.shape[0]), jnp.arange(cells.shape[1]), indexing="ij")
    forward, right = O.SELF_ROW - rows, cols - O.SELF_COL
    distance = jnp.abs(forward) + jnp.abs(right)
    k_tie, k_move, k_explore = jax.random.split(key, 3)
    jitter = jax.random.uniform(k_tie, cells.shape) * 0.5  # random tie-break among equals

    def nearest(mask):
        score = jnp.where(mask & (distance > 0), distance + jitter, jnp.inf).reshape(-1)
        flat = jnp.argmin(score)
        return flat // cells.shape[1], flat % cells.shape[1], jnp.isfinite(score[flat])

    ar, ac, seen_apple = nearest(cells == C.APPLE)
    orow, ocol, seen_orchard = nearest(cells == C.ORCHARD)
    tr = jnp.where(seen_apple, ar, orow)
    tc = jnp.where(seen_apple, ac, ocol)
    toward = _move_along(k_move, forward[tr, tc], right[tr, tc], facing)
    explore = jax.random.randint(k_explore, (), 0, C.TURN_RIGHT_ACTION + 1)
    action = jnp.where(seen_apple | seen_orchard, toward, explore)
    return action.astype(jnp.int32)


def _absolute_move(key: jax.Array, position: jax.Array, target: jax.Array, blocked: jax.Array):
    """Compass move from ``position`` toward ``target`` (int32[2]); tries the other axis when the
    preferred cell is in ``blocked`` (bool[H, W])."""
    height, width = blocked.shape
    delta = target - position
    vertical_first = jnp.abs(delta[0]) >= jnp.abs(delta[1])
    vertical = jnp.where(delta[0] < 0, C.NORTH_ACTION, C.SOUTH_ACTION)
    horizontal = jnp.where(delta[1] > 0, C.EAST_ACTION, C.WEST_ACTION)
    first = jnp.where(vertical_first, vertical, horizontal)
    second = jnp.where(vertical_first, horizontal, vertical)
    has_second = jnp.where(vertical_first, delta[1] != 0, delta[0] != 0)
    step = G.DIRECTION_DELTAS[jnp.asarray(C.ACTION_MOVE_DIR)[first]]
    nxt = jnp.clip(position + step, 0, jnp.asarray([height - 1, width - 1]))
    action = jnp.where(blocked[nxt[0], nxt[1]] & has_second, second, first)
    k_noise, k_move = jax.random.split(key)
    random_move = jax.random.randint(k_move, (), 0, 4)
    return jnp.where(jax.random.uniform(k_noise) < _RANDOM_MOVE_PROB, random_move, action)


def _nearest_cell(mask: jax.Array, position: jax.Array, key: jax.Array):
    """(int32[2] the True cell of ``mask`` nearest to ``position``, bool[] any)."""
    height, width = mask.shape
    rows, cols = jnp.meshgrid(jnp.arange(height), jnp.arange(width), indexing="ij")
    distance = jnp.abs(rows - position[0]) + jnp.abs(cols - position[1])
    score = jnp.where(mask, distance + jax.random.uniform(key, mask.shape) * 0.5, jnp.inf)
    flat = jnp.argmin(score.reshape(-1))
    return jnp.stack([flat // width, flat % width]).astype(jnp.int32), jnp.any(mask)


def informed_cleaner_policy(key: jax.Array, observation) -> jax.Array:
    """Knows the recipes (privileged ``observation.state``); cleans while waste is left."""
    state = observation.state
    me = observation.agent_index
    grid, config = state.grid, state.config
    height, width = grid.shape
    position, facing = state.positions[me], state.orientations[me]
    k_greedy, k_target, k_station, k_move = jax.random.split(key, 4)

    # Which cells each effect acts on: [7, H, W].
    outcome = jnp.asarray(D.OUTCOME)[: C.NUM_EFFECTS][:, grid.astype(jnp.int32)]
    acts_on = outcome < D.UNCHANGED
    work = jnp.sum(acts_on, axis=(1, 2))
    pair = D.window_pair(state.window[me][None])[0]
    held = jnp.where(pair >= 0, config.pair_effect[jnp.clip(pair, 0, None)], C.NO_EFFECT)
    held_work = jnp.where(held < C.NUM_EFFECTS, work[jnp.clip(held, 0, C.NUM_EFFECTS - 1)], 0)
    # Division of labour without communication: agent i takes the (i mod k)-th busiest of the k
    # effects that have work, unless the tool in hand still has work.
    order = jnp.argsort(-work)
    busy = jnp.maximum(jnp.sum(work > 0), 1)
    goal = jnp.where(held_work > 0, held, order[me % busy])
    targets = acts_on[jnp.clip(goal, 0, C.NUM_EFFECTS - 1)]
    holding_goal = held == goal

    # Fire whenever the held tool acts on a cell under the beam.
    cells, inside = G.beam_cells(position, facing, (height, width))
    safe = jnp.clip(cells, 0, jnp.asarray([height - 1, width - 1]))
    beam_work = jnp.any(inside & targets[safe[:, 0], safe[:, 1]])

    others = G.occupancy(state.positions, (height, width)) & ~G.occupancy(
        position[None], (height, width)
    )
    blocked = others | (grid == C.WALL)

    # With the goal tool in hand: stand next to the nearest target cell and face it.
    target, _ = _nearest_cell(targets, position, k_target)
    sides = target[None, :] + G.DIRECTION_DELTAS  # the 4 neighbours of the target
    sides_ok = G.in_bounds(sides, (height, width))
    side_safe = jnp.clip(sides, 0, jnp.asarray([height - 1, width - 1]))
    sides_ok = sides_ok & ~blocked[side_safe[:, 0], side_safe[:, 1]] | jnp.all(
        sides == position, axis=-1
    )
    side_cost = jnp.where(sides_ok, jnp.sum(jnp.abs(sides - position), axis=-1), 10_000)
    side = jnp.argmin(side_cost)
    stand = sides[side]
    face = (side + 2) % 4  # from the neighbour in direction `side`, the target lies opposite
    at_stand = jnp.all(position == stand)
    turn = jnp.where((face - facing) % 4 == 1, C.TURN_RIGHT_ACTION, C.TURN_LEFT_ACTION)
    clean_action = jnp.where(
        beam_work,
        C.FIRE_ACTION,
        jnp.where(at_stand, turn, _absolute_move(k_move, position, stand, blocked)),
    )

    # Without it: pick up the recipe's tools in order.
    first, second = jnp.divmod(config.rule.effect_pairs[jnp.clip(goal, 0, C.NUM_EFFECTS - 1)], 4)
    needed = jnp.where(state.window[me, 1] == first, second, first)
    here = grid[position[0], position[1]].astype(jnp.int32)
    station_kind = grid.astype(jnp.int32) == C.STATION_BASE + needed
    station, _ = _nearest_cell(station_kind, position, k_station)
    craft_action = jnp.where(
        here == C.STATION_BASE + needed,
        C.PICK_UP_ACTION,
        _absolute_move(k_move, position, station, blocked),
    )

    action = jnp.where(holding_goal, clean_action, craft_action)
    share = D.pollution(grid, config.river_mask, C.NUM_RIVER + C.NUM_STREAM)
    clean_now = jnp.any(work > 0) & (share >= CLEAN_ABOVE)
    action = jnp.where(clean_now, action, greedy_policy(k_greedy, observation))
    return jnp.where(observation.mask[action], action, C.STAY_ACTION).astype(jnp.int32)


SCRIPTED_POLICIES: dict[str, Callable] = {
    "random": random_policy,
    "greedy": greedy_policy,
    "informed_cleaner": informed_cleaner_policy,
}
