"""Exact mechanics of OpenCleanup on hand-built states (eager mode: no compilation)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.envs.open_cleanup import constants as C
from dilemmax.envs.open_cleanup import dynamics as D
from dilemmax.envs.open_cleanup.conftest import (
    SMALL,
    actions_of,
    hand_state,
    jit_step,
    make_rule,
)
from dilemmax.envs.open_cleanup.env import OpenCleanupEnv

H, W = C.GRID_HEIGHT, C.GRID_WIDTH
GREEN = 2


def waste(hue, shade):
    return C.WASTE_BASE + hue * C.NUM_SHADES + shade


def ground():
    return np.full((H, W), C.GROUND, np.uint8)


def parked(env, first=None):
    """Agent 0 at ``first``; the others in a row at the bottom, out of the way."""
    rest = [[H - 1, 2 + 2 * i] for i in range(env.num_agents - 1)]
    return [list(first or [5, 5])] + rest


def step(env, state, *acts, key=0):
    return jit_step(env)(jax.random.PRNGKey(key), state, actions_of(env, *acts))


# ----------------------------------------------------------------------------- recipes
@pytest.mark.slow
def test_recipe_turns_dark_into_mid(env):
    grid = ground()
    grid[5, 6] = waste(GREEN, C.DARK)  # faced cell (agent at (5, 5) facing east)
    grid[5, 7] = waste(GREEN, C.MID)  # beyond: the dark->mid tool leaves mid alone
    rule = make_rule(dark=(2, 0))
    state = hand_state(
        env, rule, grid, parked(env), [1] * env.num_agents, [[2, 0]] + [[-1, -1]] * 4
    )
    _, new, _, _, infos = step(env, state, C.FIRE_ACTION)
    assert int(new.grid[5, 6]) == waste(GREEN, C.MID)
    assert int(new.grid[5, 7]) == waste(GREEN, C.MID)
    assert int(infos["lightened"][0]) == 1 and int(infos["cleared"][0]) == 0
    assert int(infos["shot_pair"][0]) == C.pair_index(2, 0)
    assert np.array_equal(np.asarray(new.shot_after[0, :2]), [waste(GREEN, C.MID)] * 2)


@pytest.mark.slow
def test_clean_reward_shaping_pays_each_shade_removed_but_apples_stay_the_payoff():
    shaped = OpenCleanupEnv(clean_reward=0.25, **SMALL)
    grid = ground()
    grid[5, 6] = waste(GREEN, C.DARK)
    grid[5, 7] = waste(GREEN, C.DARK)  # the beam reaches both: two shades removed
    grid[4, 3] = C.APPLE  # agent 1, at (5, 3), steps north onto it
    positions = parked(shaped)
    positions[1] = [5, 3]
    rule = make_rule(dark=(2, 0))
    state = hand_state(
        shaped, rule, grid, positions, [1] * shaped.num_agents, [[2, 0]] + [[-1, -1]] * 4
    )
    acts = [C.FIRE_ACTION, C.NORTH_ACTION] + [C.STAY_ACTION] * (shaped.num_agents - 2)
    _, new, rewards, _, infos = step(shaped, state, *acts)
    assert int(infos["lightened"][0]) == 2 and bool(infos["ate"][1])
    assert float(rewards["agent_0"]) == 0.5 and float(rewards["agent_1"]) == 1.0
    assert new.trial_return.tolist()[:2] == [0.0, 1.0]  # the bonus is not a payoff


@pytest.mark.slow
def test_mid_to_light_and_hue_cleaner(env):
    grid = ground()
    grid[4, 5] = waste(GREEN, C.MID)  # agent (5, 5) faces north: (4, 5) faced
    grid[3, 5] = waste(GREEN, C.LIGHT)  # beyond
    grid[4, 4] = waste(0, C.LIGHT)  # forward-left: red light
    rule = make_rule(mid=(1, 1), hue2=(3, 1))
    base = hand_state(env, rule, grid, parked(env), [0] * env.num_agents)
    mid_tool = base.replace(window=base.window.at[0].set(jnp.asarray([1, 1])))
    _, new, _, _, infos = step(env, mid_tool, C.FIRE_ACTION)
    assert int(new.grid[4, 5]) == waste(GREEN, C.LIGHT)
    assert int(new.grid[3, 5]) == waste(GREEN, C.LIGHT)  # light is not lightened further
    assert int(new.grid[4, 4]) == waste(0, C.LIGHT)
    green_cleaner = base.replace(window=base.window.at[0].set(jnp.asarray([3, 1])))
    _, new, _, _, infos = step(env, green_cleaner, C.FIRE_ACTION)
    assert int(new.grid[3, 5]) == C.WATER  # green light cleared
    assert int(new.grid[4, 4]) == waste(0, C.LIGHT)  # red light untouched by the green cleaner
    assert int(new.grid[4, 5]) == waste(GREEN, C.MID)
    assert int(infos["cleared"][0]) == 1


def test_non_recipe_pair_does_nothing(env):
    grid = ground()
    for cell in [(4, 5), (3, 5), (4, 4), (4, 6)]:
        grid[cell] = waste(GREEN, C.DARK)
    grid[3, 5] = waste(GREEN, C.LIGHT)
    grid[4, 6] = waste(GREEN, C.MID)
    rule = make_rule(dark=(2, 0), mid=(2, 3), hue2=(3, 1))
    idle = next(
        (a, b)
        for a in range(4)
        for b in range(4)
        if C.pair_index(a, b) not in np.asarray(rule.effect_pairs)
    )
    state = hand_state(
        env, rule, grid, parked(env), [0] * env.num_agents, [list(idle)] + [[-1, -1]] * 4
    )
    _, new, _, _, infos = step(env, state, C.FIRE_ACTION)
    assert np.array_equal(np.asarray(new.grid), grid)
    assert int(infos["cleared"][0]) == 0 and int(infos["lightened"][0]) == 0
    assert bool(infos["fired"][0]) and bool(infos["shot_at_waste"][0])
    # A single pick-up (window not full) is a plain base tool: no effect either.
    single = state.replace(window=state.window.at[0].set(jnp.asarray([-1, 2])))
    _, new, _, _, infos = step(env, single, C.FIRE_ACTION)
    assert np.array_equal(np.asarray(new.grid), grid) and int(infos["shot_pair"][0]) == -1


@pytest.mark.slow
@pytest.mark.parametrize(
    "facing, expected",
    [
        (0, {(4, 5), (3, 5), (4, 4), (4, 6)}),  # north
        (1, {(5, 6), (5, 7), (4, 6), (6, 6)}),  # east
        (2, {(6, 5), (7, 5), (6, 6), (6, 4)}),  # south
        (3, {(5, 4), (5, 3), (6, 4), (4, 4)}),  # west
    ],
)
def test_beam_footprint_for_each_facing(facing, expected):
    grid = jnp.full((H, W), waste(GREEN, C.LIGHT), jnp.uint8)
    new, _, _, _, cleared, _ = D.fire(
        grid,
        jnp.asarray([[5, 5]]),
        jnp.asarray([facing]),
        jnp.asarray([True]),
        jnp.asarray([GREEN]),
    )
    hit = {tuple(int(v) for v in cell) for cell in np.argwhere(np.asarray(new) == C.WATER)}
    assert hit == expected and int(cleared[0]) == 4


def test_beam_off_the_grid_is_dropped():
    grid = jnp.full((H, W), waste(GREEN, C.LIGHT), jnp.uint8)
    new, cells, before, _, cleared, _ = D.fire(
        grid, jnp.asarray([[0, 0]]), jnp.asarray([0]), jnp.asarray([True]), jnp.asarray([GREEN])
    )
    assert int(cleared[0]) == 0 and np.all(np.asarray(before) == C.WALL)
    assert np.array_equal(np.asarray(new), np.asarray(grid))


@pytest.mark.slow
def test_simultaneous_shots_take_the_most_advanced_outcome():
    grid = jnp.full((H, W), C.GROUND, jnp.uint8).at[5, 5].set(waste(GREEN, C.LIGHT))
    # Agent 0 at (6, 5) facing north with the green cleaner; agent 1 at (5, 4) facing east
    # holding a tool that does nothing to light waste.
    new, _, _, _, cleared, lightened = D.fire(
        grid,
        jnp.asarray([[6, 5], [5, 4]]),
        jnp.asarray([0, 1]),
        jnp.asarray([True, True]),
        jnp.asarray([GREEN, C.EFFECT_DARK_TO_MID]),
    )
    assert int(new[5, 5]) == C.WATER
    assert cleared.tolist() == [1, 0] and lightened.tolist() == [0, 0]


# ----------------------------------------------------------------------------- movement
def test_moves_are_absolute_and_blocked_by_walls_edges_and_agents(env):
    grid = ground()
    grid[4, 5] = C.WALL
    positions = parked(env, [5, 5])
    positions[1] = [5, 7]  # agent 1 two cells east of agent 0
    positions[2] = [0, 0]  # agent 2 in the corner
    state = hand_state(env, None, grid, positions, [1] * env.num_agents)
    # Agent 0 north into a wall, agent 2 north off the grid: both stay; facing never changes.
    _, new, _, _, _ = step(env, state, C.NORTH_ACTION, C.STAY_ACTION, C.NORTH_ACTION)
    assert new.positions[0].tolist() == [5, 5] and new.positions[2].tolist() == [0, 0]
    assert new.orientations.tolist() == [1] * env.num_agents
    # Agent 0 east and agent 1 west aim at (5, 6): exactly one gets it.
    _, new, _, _, _ = step(env, state, C.EAST_ACTION, C.WEST_ACTION)
    moved = [new.positions[0].tolist() == [5, 6], new.positions[1].tolist() == [5, 6]]
    assert sum(moved) == 1
    assert new.positions[0].tolist() in ([5, 5], [5, 6]) and new.positions[1].tolist() in (
        [5, 7],
        [5, 6],
    )
    # A swap is blocked.
    adjacent = state.replace(positions=state.positions.at[1].set(jnp.asarray([5, 6])))
    _, new, _, _, _ = step(env, adjacent, C.EAST_ACTION, C.WEST_ACTION)
    assert new.positions[0].tolist() == [5, 5] and new.positions[1].tolist() == [5, 6]


def test_turns_change_facing_only(env):
    state = hand_state(env, None, ground(), parked(env), [0] * env.num_agents)
    _, new, _, _, _ = step(env, state, C.TURN_LEFT_ACTION, C.TURN_RIGHT_ACTION)
    assert new.orientations[:2].tolist() == [3, 1]
    assert np.array_equal(np.asarray(new.positions), np.asarray(state.positions))


# ----------------------------------------------------------------------------- pick-ups
def test_window_slides_and_pick_up_needs_a_station(env):
    grid = ground()
    grid[5, 5] = C.STATION_BASE + 2
    grid[5, 6] = C.STATION_BASE + 0
    rule = make_rule(dark=(2, 0))
    state = hand_state(env, rule, grid, parked(env), [1] * env.num_agents)
    _, state, _, _, infos = step(env, state, C.PICK_UP_ACTION)
    assert state.window[0].tolist() == [-1, 2] and int(infos["picked_up"][0]) == 2
    assert not bool(infos["made_tool"][0])
    _, state, _, _, _ = step(env, state, C.EAST_ACTION)  # walking onto a station picks nothing
    assert state.window[0].tolist() == [-1, 2]
    _, state, _, _, infos = step(env, state, C.PICK_UP_ACTION)
    assert state.window[0].tolist() == [2, 0] and bool(infos["made_tool"][0])
    _, state, _, _, infos = step(env, state, C.PICK_UP_ACTION)
    is_recipe = C.pair_index(0, 0) in np.asarray(rule.effect_pairs).tolist()
    assert state.window[0].tolist() == [0, 0] and bool(infos["made_tool"][0]) == is_recipe
    # Off a station, pick up is illegal: the agent stays, the window is kept, it is flagged.
    _, moved, _, _, _ = step(env, state, C.SOUTH_ACTION)
    assert not bool(env.action_mask(moved)["agent_0"][C.PICK_UP_ACTION])
    _, after, _, _, infos = step(env, moved, C.PICK_UP_ACTION)
    assert after.window[0].tolist() == [0, 0] and bool(infos["invalid_action"][0])


def test_invalid_actions_are_a_stay(env):
    state = hand_state(env, None, ground(), parked(env), [0] * env.num_agents)
    _, new, _, _, infos = step(env, state, 42, -1)
    assert infos["invalid_action"][:2].tolist() == [True, True]
    assert np.array_equal(np.asarray(new.positions), np.asarray(state.positions))
    assert new.last_action[:2].tolist() == [C.STAY_ACTION, C.STAY_ACTION]


# ----------------------------------------------------------------------------- apples, waste
def test_eating_pays_the_eater_only(env):
    grid = ground()
    grid[4, 5] = C.APPLE
    state = hand_state(env, None, grid, parked(env), [0] * env.num_agents)
    _, new, rewards, _, infos = step(env, state, C.NORTH_ACTION)
    assert float(rewards["agent_0"]) == 1.0
    assert sum(float(rewards[a]) for a in env.agents) == 1.0
    assert int(new.grid[4, 5]) in (C.ORCHARD,) and bool(infos["ate"][0])


@pytest.mark.parametrize(
    "share, expected", [(0.0, 0.05), (0.1, 0.0375), (0.2, 0.025), (0.4, 0.0), (0.7, 0.0)]
)
def test_apple_probability_formula(share, expected):
    got = D.apple_probability(jnp.float32(share), jnp.float32(0.05), jnp.float32(0.4))
    assert float(got) == pytest.approx(expected, abs=1e-7)


@pytest.mark.slow
def test_apples_grow_only_under_the_pollution_threshold(env):
    state = hand_state(env, None)
    config = state.config
    polluted = np.asarray(D.is_waste(config.initial_grid) & config.river_mask).sum()
    # The initial river (26 of 37 cells polluted, 0.70) is above the 0.4 threshold: no growth.
    share = D.pollution(config.initial_grid, config.river_mask, env.num_water_cells)
    assert polluted == C.NUM_POLLUTED_START and float(share) == pytest.approx(26 / 37)
    occupied = jnp.zeros((H, W), bool)
    probability = D.apple_probability(share, config.apple_rate, config.pollution_threshold)
    grown = jax.vmap(lambda k: D.grow_apples(k, config.initial_grid, occupied, probability)[1])(
        jax.random.split(jax.random.PRNGKey(3), 64)
    )
    assert int(grown.sum()) == 0
    # A clean river: each of the 48 orchard cells grows with probability 0.05.
    clean = jnp.where(D.is_waste(config.initial_grid), jnp.uint8(C.WATER), config.initial_grid)
    p_clean = D.apple_probability(
        D.pollution(clean, config.river_mask, env.num_water_cells),
        config.apple_rate,
        config.pollution_threshold,
    )
    grown = jax.vmap(lambda k: D.grow_apples(k, clean, occupied, p_clean)[1])(
        jax.random.split(jax.random.PRNGKey(4), 2000)
    )
    rate = float(grown.mean()) / C.NUM_ORCHARD
    assert rate == pytest.approx(0.05, abs=0.004)  # 96,000 Bernoulli draws: s.d. 0.0007


@pytest.mark.slow
def test_waste_reappears_only_after_step_50_on_clean_river(env):
    state = hand_state(env, None)
    config = state.config.replace(p_spawn=jnp.float32(1.0))
    occupied = jnp.zeros((H, W), bool)
    clean_river = config.river_mask & (config.initial_grid == C.WATER)
    for allowed in (False, True):
        grid, spawned = D.spawn_waste(
            jax.random.PRNGKey(5),
            config.initial_grid,
            config.river_mask,
            occupied,
            jnp.bool_(allowed),
            config.p_spawn,
            config.dominant_hue,
            config.skew,
        )
        changed = np.argwhere(np.asarray(grid) != np.asarray(config.initial_grid))
        assert bool(spawned) == allowed and len(changed) == int(allowed)
        if allowed:
            r, c = changed[0]
            assert bool(clean_river[r, c])
            hue = (int(grid[r, c]) - C.WASTE_BASE) // C.NUM_SHADES
            assert hue == int(config.dominant_hue)  # skew 1.0
    # Through the env: trial step 49 never spawns, 50 does (with p_spawn = 1).
    s49 = state.replace(config=config, trial_step=jnp.int32(49))
    _, _, _, _, infos = step(env, s49)
    assert not bool(infos["waste_spawned"])
    _, _, _, _, infos = step(env, s49.replace(trial_step=jnp.int32(50)))
    assert bool(infos["waste_spawned"])


# ----------------------------------------------------------------------------- trials
def test_trial_starts_redraw_the_waste_shades_uniformly_and_keep_the_hues():
    kinds = [waste(h % C.NUM_HUES, h % C.NUM_SHADES) for h in range(16)]
    grid = (
        jnp.full((4, 8), C.WATER, jnp.uint8).at[:2].set(jnp.asarray(kinds, jnp.uint8).reshape(2, 8))
    )
    draws = np.stack(
        [np.asarray(D.redraw_shades(jax.random.key(k), grid)) for k in range(60)]
    )  # [60, 4, 8]
    before = np.asarray(grid)
    assert (draws[:, 2:] == C.WATER).all()  # non-waste cells untouched
    hue = (draws[:, :2].astype(int) - C.WASTE_BASE) // C.NUM_SHADES
    assert (hue == (before[:2].astype(int) - C.WASTE_BASE) // C.NUM_SHADES).all()
    shade = (draws[:, :2].astype(int) - C.WASTE_BASE) % C.NUM_SHADES
    counts = np.bincount(shade.reshape(-1), minlength=C.NUM_SHADES)
    # 960 draws over 3 shades: each shade 320 +- 5 standard deviations (about 73).
    assert (np.abs(counts - 320) < 73).all(), counts


def test_trial_reset_keeps_recipes_layout_and_hue(env):
    state = hand_state(env, make_rule(dark=(2, 0)))
    state = state.replace(
        trial_step=jnp.int32(C.TRIAL_STEPS - 1),
        time=jnp.int32(C.TRIAL_STEPS - 1),
        window=state.window.at[0].set(jnp.asarray([2, 0])),
        grid=state.grid.at[
            state.config.layout.orchard[0, 0], state.config.layout.orchard[0, 1]
        ].set(jnp.uint8(C.APPLE)),
    )
    _, new, _, dones, infos = step(env, state)
    assert bool(infos["trial_done"]) and not bool(dones["__all__"])
    assert int(new.trial) == 1 and int(new.trial_step) == 0 and int(new.time) == C.TRIAL_STEPS
    # The river is polluted again on the same cells with the same hues; shades are drawn again.
    initial, relaid = np.asarray(state.config.initial_grid), np.asarray(new.grid)
    waste_cells = np.asarray(D.is_waste(initial))
    assert np.array_equal(relaid[~waste_cells], initial[~waste_cells])
    assert np.asarray(D.is_waste(relaid))[waste_cells].all()
    hue = lambda g: (g[waste_cells].astype(int) - C.WASTE_BASE) // C.NUM_SHADES
    assert np.array_equal(hue(relaid), hue(initial))
    assert not np.array_equal(relaid, initial)  # 26 shades all redrawn alike: p = 3^-26
    assert np.all(np.asarray(new.window) == -1)
    for a, b in zip(jax.tree.leaves(new.config), jax.tree.leaves(state.config), strict=True):
        assert np.array_equal(np.asarray(a), np.asarray(b))
    spawns = {tuple(p) for p in np.asarray(state.config.layout.spawns).tolist()}
    assert all(tuple(p) in spawns for p in np.asarray(new.positions).tolist())
    # The last step of the last trial ends the episode.
    last = state.replace(trial=jnp.int32(C.NUM_TRIALS - 1))
    _, end, _, dones, infos = step(env, last)
    assert bool(dones["__all__"]) and all(bool(dones[a]) for a in env.agents)
    assert int(end.trial) == C.NUM_TRIALS - 1 and int(end.trial_step) == C.TRIAL_STEPS
