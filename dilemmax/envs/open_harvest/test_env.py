"""Env-level mechanics on the hand-built map: moves, eating, zaps, trials, observations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest import observation
from dilemmax.envs.open_harvest.conftest import SPAWN_ROW, act, place, tree_at
from dilemmax.envs.open_harvest.env import OpenHarvestEnv

KEY = jax.random.key(7)


def only_apple_at(state, tree: int, age: int = 0):
    """The orchard with a single apple (on ``tree``); every other cell was eaten (no rot)."""
    o = state.orchard
    mask = jnp.arange(o.apple.shape[0]) == tree
    return state.replace(
        orchard=o.replace(
            apple=mask,
            age=jnp.where(mask, age, 0),
            stage_length=jnp.full_like(o.stage_length, 15),
            eaten_stage=jnp.where(mask, -1, 0),
            regrow_timer=jnp.zeros_like(o.regrow_timer),
        )
    )


@pytest.mark.slow
def test_reset_gives_observations_in_the_space_and_a_full_orchard(env):
    obs, state = jax.jit(env.reset)(KEY)
    space = env.observation_space("agent_0")
    for agent in env.agents:
        assert obs[agent].dtype == jnp.uint8 and bool(space.contains(obs[agent]))
        assert env.action_mask(state)[agent].all()
    assert bool(state.orchard.apple.all()) and int(state.trial) == 0
    pos = np.asarray(state.agent_pos)
    assert len({tuple(p) for p in pos}) == env.num_agents
    assert (pos[:, 0] == int(state.config.layout.spawn_row)).all()
    assert env.max_steps == 5 * 400


@pytest.mark.slow
def test_walking_onto_an_apple_eats_it_and_pays_its_colour_stage(env, step, hand_state):
    tree = tree_at(hand_state.config, 4, 3)  # bottom of the first (red) diamond
    state = place(hand_state, 0, 5, 3)
    orchard = state.orchard.replace(
        age=state.orchard.age.at[tree].set(16),
        stage_length=state.orchard.stage_length.at[tree].set(15),
    )
    state = state.replace(orchard=orchard)
    _, after, rewards, dones, infos = step(KEY, state, act(env, agent_0=c.NORTH_ACTION))
    assert after.agent_pos[0].tolist() == [4, 3]
    pay = float(hand_state.config.pay[0, c.RIPE])
    assert float(rewards["agent_0"]) == pay == 0.5
    assert [float(rewards[a]) for a in env.agents[1:]] == [0.0] * 4
    assert infos["ate"].tolist() == [True, False, False, False, False]
    assert int(infos["ate_colour"][0]) == 0 and int(infos["ate_stage"][0]) == c.RIPE
    assert int(infos["ate_tree"][0]) == tree and bool(infos["emptied_eaten"][tree])
    assert not bool(after.orchard.apple[tree]) and int(after.orchard.eaten_stage[tree]) == c.RIPE
    assert bool(after.known_pay[0, 0, c.RIPE]) and int(after.known_pay.sum()) == 1
    assert float(after.trial_return[0]) == pay and int(after.trial_eaten[0]) == 1
    assert not bool(dones["__all__"]) and not bool(infos["trial_done"])


def test_moves_are_absolute_blocked_by_agents_and_edges_and_chains_resolve(env, step, hand_state):
    state = place(place(hand_state, 0, 13, 5, facing=0), 1, 13, 6, facing=2)
    # Agent 0 moves east into agent 1, who stays: blocked. Facing never changes on a move.
    _, after, *_ = step(KEY, state, act(env, agent_0=c.EAST_ACTION))
    assert after.agent_pos[0].tolist() == [13, 5] and int(after.agent_dir[0]) == 0
    # Agent 1 leaves south as agent 0 enters: both move.
    acts = act(env, agent_0=c.EAST_ACTION, agent_1=c.SOUTH_ACTION)
    _, after, *_ = step(KEY, state, acts)
    assert after.agent_pos[0].tolist() == [13, 6] and after.agent_pos[1].tolist() == [14, 6]
    assert int(after.agent_dir[0]) == 0 and int(after.agent_dir[1]) == 2
    # Off the south edge: stay. Turning changes only the facing.
    edge = place(state, 2, SPAWN_ROW, 10, facing=3)
    acts = act(env, agent_2=c.SOUTH_ACTION, agent_0=c.TURN_RIGHT, agent_1=c.TURN_LEFT)
    _, after, *_ = step(KEY, edge, acts)
    assert after.agent_pos[2].tolist() == [SPAWN_ROW, 10]
    assert after.agent_pos[0].tolist() == [13, 5] and int(after.agent_dir[0]) == 1
    assert int(after.agent_dir[1]) == 1


def _ring(state):
    """Agent 0 at (13, 5) facing east; agents 1-4 on the beam's four cells."""
    state = place(state, 0, 13, 5, facing=1)
    for agent, cell in zip((1, 2, 3, 4), ((13, 6), (13, 7), (12, 6), (14, 6)), strict=True):
        state = place(state, agent, *cell)
    return state


def test_zap_beam_covers_four_cells_and_sends_hit_agents_to_spawn(env, step, hand_state):
    _, after, rewards, _, infos = step(KEY, _ring(hand_state), act(env, agent_0=c.ZAP))
    assert infos["zap_fired"].tolist() == [True, False, False, False, False]
    assert infos["zap_hits"][0].tolist() == [False, True, True, True, True]
    assert infos["zapped"].tolist() == [False, True, True, True, True]
    pos = np.asarray(after.agent_pos)
    assert (pos[1:, 0] == SPAWN_ROW).all() and len({tuple(p) for p in pos}) == 5
    assert np.asarray(after.frozen).tolist() == [0, 12, 12, 12, 12]
    assert int(after.cooldown[0]) == c.ZAP_COOLDOWN == 2
    assert all(float(r) == 0.0 for r in rewards.values())  # a zap pays and costs nothing
    assert np.asarray(after.last_hit_by).tolist() == [-1, 0, 0, 0, 0]

    # Cells outside the footprint: beside the zapper, three ahead, off the diagonal, behind.
    state = place(hand_state, 0, 13, 5, facing=1)
    for agent, cell in zip((1, 2, 3, 4), ((12, 5), (13, 8), (11, 6), (13, 4)), strict=True):
        state = place(state, agent, *cell)
    _, after, _, _, infos = step(KEY, state, act(env, agent_0=c.ZAP))
    assert bool(infos["zap_fired"][0]) and not bool(infos["zapped"].any())
    assert not bool(after.frozen.any())


def test_zapped_agent_is_frozen_for_12_steps_and_a_second_hit_restarts_the_count(
    env, step, hand_state
):
    _, state, *_ = step(KEY, _ring(hand_state), act(env, agent_0=c.ZAP))
    spawn = state.agent_pos[1].tolist()
    for t in range(1, 4):
        assert env.action_mask(state)["agent_1"].tolist() == [False] * 7 + [True]
        _, state, _, _, infos = step(jax.random.fold_in(KEY, t), state, act(env, agent_1=0))
        assert bool(infos["frozen"][1]) and bool(infos["invalid_action"][1])
        assert state.agent_pos[1].tolist() == spawn  # could not move
        assert int(state.frozen[1]) == 12 - t
    # Cooldown over: agent 0, placed beside the frozen agent, zaps it again (the reference's
    # rule): it is sent to a spawn point again and its 12 steps restart.
    state = place(state, 0, spawn[0] - 1, spawn[1], facing=2)
    _, state, _, _, infos = step(KEY, state, act(env, agent_0=c.ZAP))
    assert bool(infos["zap_hits"][0, 1]) and bool(infos["zapped"][1])
    assert int(state.frozen[1]) == 12 and int(state.last_hit_by[1]) == 0
    assert int(state.agent_pos[1, 0]) == SPAWN_ROW
    spawn = state.agent_pos[1].tolist()
    state = place(state, 0, 12, 10)  # out of agent 1's way
    for t in range(1, 13):
        assert not env.action_mask(state)["agent_1"][0]
        _, state, _, _, infos = step(jax.random.fold_in(KEY, t), state, act(env, agent_1=0))
        assert bool(infos["frozen"][1]) and int(state.frozen[1]) == 12 - t
    # The 13th step after the second hit: free again.
    assert env.action_mask(state)["agent_1"].all()
    _, state, _, _, infos = step(KEY, state, act(env, agent_1=c.NORTH_ACTION))
    assert not bool(infos["frozen"][1]) and state.agent_pos[1].tolist() == [spawn[0] - 1, spawn[1]]


def test_zap_cooldown_blocks_the_next_two_steps(env, step, hand_state):
    state = place(hand_state, 0, 12, 10, facing=0)
    fired = []
    for t in range(5):
        mask = env.action_mask(state)["agent_0"]
        _, state, _, _, infos = step(jax.random.fold_in(KEY, t), state, act(env, agent_0=c.ZAP))
        fired.append(bool(infos["zap_fired"][0]))
        assert bool(mask[c.ZAP]) == fired[-1]
        assert bool(infos["invalid_action"][0]) == (not fired[-1])
    assert fired == [True, False, False, True, False]


@pytest.mark.slow
def test_trial_ends_early_when_the_orchard_is_dead_and_resets_on_the_same_config(
    env, step, hand_state
):
    tree = tree_at(hand_state.config, 4, 3)
    state = only_apple_at(place(hand_state, 0, 5, 3), tree, age=35)  # the last apple, over-ripe
    state = state.replace(trial_step=jnp.int32(57), known_pay=state.known_pay.at[3, 2, 0].set(True))
    _, after, rewards, dones, infos = step(KEY, state, act(env, agent_0=c.NORTH_ACTION))
    assert float(rewards["agent_0"]) == float(hand_state.config.pay[0, c.OVERRIPE])
    assert bool(infos["orchard_dead"]) and bool(infos["trial_done"])
    assert int(infos["num_apples"]) == 0 and int(infos["trial_step"]) == 57
    assert int(infos["trial"]) == 0 and not bool(dones["__all__"])
    # The next trial: same configuration, fresh orchard, agents back on spawn cells.
    assert int(after.trial) == 1 and int(after.trial_step) == 0
    assert bool(after.orchard.apple.all()) and not bool(after.orchard.age.any())
    assert (np.asarray(after.agent_pos)[:, 0] == SPAWN_ROW).all()
    assert not bool(after.frozen.any()) and not bool(after.cooldown.any())
    assert not bool(after.trial_return.any()) and not bool(after.trial_eaten.any())
    for new, old in zip(
        jax.tree.leaves(after.config), jax.tree.leaves(hand_state.config), strict=True
    ):
        np.testing.assert_array_equal(new, old)
    assert bool(after.known_pay[0, 0, c.OVERRIPE]) and bool(after.known_pay[3, 2, 0])


def test_a_cell_waiting_after_rot_keeps_the_orchard_alive(env, step, hand_state):
    tree = tree_at(hand_state.config, 4, 3)
    state = only_apple_at(place(hand_state, 0, 5, 3), tree)
    other = tree_at(hand_state.config, 2, 11)
    state = state.replace(
        orchard=state.orchard.replace(regrow_timer=state.orchard.regrow_timer.at[other].set(4))
    )
    _, after, _, _, infos = step(KEY, state, act(env, agent_0=c.NORTH_ACTION))
    assert not bool(infos["orchard_dead"]) and not bool(infos["trial_done"])
    assert int(after.trial) == 0


def test_trials_last_400_steps_and_the_fifth_ends_the_episode(env, step, hand_state):
    state = hand_state.replace(trial_step=jnp.int32(399))
    _, after, _, dones, infos = step(KEY, state, act(env))
    assert bool(infos["trial_done"]) and not bool(infos["orchard_dead"])
    assert int(after.trial) == 1 and not bool(dones["__all__"]) and not bool(after.done)
    last = hand_state.replace(trial_step=jnp.int32(399), trial=jnp.int32(4))
    _, after, _, dones, infos = step(KEY, last, act(env))
    assert bool(infos["trial_done"]) and bool(dones["__all__"]) and bool(after.done)
    assert all(bool(dones[a]) for a in env.agents)
    assert int(after.trial) == 4 and int(after.trial_step) == 400  # the final state, kept


def test_illegal_actions_are_stays_and_are_flagged(env, step, hand_state):
    state = hand_state.replace(cooldown=hand_state.cooldown.at[2].set(1))
    chosen = {"agent_0": jnp.int32(99), "agent_1": jnp.int32(-3), "agent_2": jnp.int32(c.ZAP),
              "agent_3": jnp.int32(c.STAY), "agent_4": jnp.int32(c.STAY)}  # fmt: skip
    _, after, _, _, infos = step(KEY, state, chosen)
    _, expected, _, _, _ = step(KEY, state, act(env))
    assert infos["invalid_action"].tolist() == [True, True, True, False, False]
    assert infos["action"].tolist() == [c.STAY] * 5
    for got, want in zip(jax.tree.leaves(after), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_same_key_same_trajectory_and_jit_equals_no_jit(env, step, hand_state):
    # Two steps in which agent 0 eats, agent 1 zaps agent 2 and the others move and turn.
    state = place(place(_ring(hand_state), 0, 5, 3), 1, 13, 5, facing=1)
    actions = [
        act(env, agent_0=c.NORTH_ACTION, agent_1=c.ZAP, agent_3=c.TURN_LEFT, agent_4=c.WEST_ACTION),
        act(env, agent_0=c.EAST_ACTION, agent_1=c.NORTH_ACTION, agent_3=c.SOUTH_ACTION),
    ]
    keys = jax.random.split(jax.random.key(3), len(actions))

    def play(step_fn):
        s, out = state, []
        for k, a in zip(keys, actions, strict=True):
            out.append(step_fn(k, s, a))
            s = out[-1][1]
        return out

    jitted, again, eager = play(step), play(step), play(env.step_env)
    assert bool(jitted[0][4]["ate"][0]) and bool(jitted[0][4]["zapped"][2])
    leaves = zip(
        jax.tree.leaves(jitted), jax.tree.leaves(again), jax.tree.leaves(eager), strict=True
    )
    for x, y, z in leaves:
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)


def test_observation_codes_rotate_with_the_observer(env, hand_state):
    tree = tree_at(hand_state.config, 4, 3)
    state = place(place(hand_state, 0, 5, 3, facing=0), 1, 6, 3, facing=1)  # agent 1 behind
    obs = np.asarray(observation.observe(state))
    assert obs.shape == (5, 11, 11, 3) and obs.dtype == np.uint8
    cell, who, info = obs[0, ..., 0], obs[0, ..., 1], obs[0, ..., 2]
    me = (c.SELF_ROW, c.SELF_COL)
    apple_code = c.CODE_APPLE + 0 * c.NUM_STAGES + c.UNRIPE  # red (colour 0), unripe
    assert cell[c.SELF_ROW - 1, c.SELF_COL] == apple_code  # straight ahead when facing north
    assert who[me] == c.WHO_SELF and info[me] == 1 + 0 and cell[me] == c.CODE_GROUND
    assert (who == c.WHO_SELF).sum() == 1
    # Agent 1, behind, faces east = the observer's right: relative orientation 1.
    assert who[c.SELF_ROW + 1, c.SELF_COL] == c.WHO_OTHER + 1
    assert info[c.SELF_ROW + 1, c.SELF_COL] == 1 + 1
    # Facing east, the cell to the north is on the observer's left.
    east = np.asarray(observation.observe(place(state, 0, 5, 3, facing=1)))
    assert east[0, c.SELF_ROW, c.SELF_COL - 1, 0] == apple_code
    assert east[0, c.SELF_ROW, c.SELF_COL, 2] == 1 + 1
    # Agent 1 faces east, so agent 0 (north of it) is on its left and faces its left (3).
    assert obs[1, c.SELF_ROW, c.SELF_COL - 1, 1] == c.WHO_OTHER + 3
    # An agent on a tree cell does not hide it; an eaten tree shows as an empty cell of its
    # colour; a frozen observer is flagged.
    on_tree = place(state, 1, 4, 3)
    emptied = on_tree.replace(
        orchard=state.orchard.replace(apple=state.orchard.apple.at[tree].set(False)),
        frozen=state.frozen.at[0].set(5),
    )
    obs = np.asarray(observation.observe(emptied))
    assert obs[0, c.SELF_ROW - 1, c.SELF_COL].tolist() == [c.CODE_EMPTY_TREE + 0, c.WHO_OTHER, 1]
    assert obs[0, c.SELF_ROW, c.SELF_COL, 2] == 1 + 0 + 4
    # Off the map reads as wall: agent 2 on the south edge facing north has row 16 behind it.
    assert (obs[2, c.SELF_ROW + 1, :, 0] == c.CODE_WALL).all()
    assert bool(env.observation_space("agent_0").contains(obs[0]))


def test_one_hot_observation_view(hand_state):
    env = OpenHarvestEnv(num_layouts=16, num_rules=64, observation="one_hot")
    space = env.observation_space("agent_0")
    assert space.shape == (11, 11, 37) and space.dtype == jnp.float32
    obs = env.get_obs(hand_state)
    codes = np.asarray(observation.observe(hand_state))
    bounds = [(0, 22), (22, 28), (28, 37)]
    for i, agent in enumerate(env.agents):
        assert bool(space.contains(obs[agent]))
        assert np.asarray(obs[agent]).sum(-1).tolist() == [[3.0] * 11] * 11
        for k, (lo, hi) in enumerate(bounds):
            np.testing.assert_array_equal(np.argmax(obs[agent][..., lo:hi], -1), codes[i, ..., k])
    with pytest.raises(ValueError, match="observation"):
        OpenHarvestEnv(observation="pixels")


def test_infos_have_a_fixed_structure(env, step, hand_state):
    _, _, _, _, infos = step(KEY, hand_state, act(env))
    a, t = env.num_agents, c.NUM_TREES
    shapes = {
        "trial_done": (), "trial": (), "trial_step": (), "orchard_dead": (),
        "num_apples": (), "ate": (a,), "ate_tree": (a,), "ate_colour": (a,), "ate_stage": (a,),
        "ate_pay": (a,), "emptied_eaten": (t,), "rotted": (t,), "regrown": (t,),
        "regrown_after_rot": (t,), "zap_fired": (a,), "zap_hits": (a, a), "zapped": (a,),
        "frozen": (a,), "invalid_action": (a,), "action": (a,),
    }  # fmt: skip
    assert {k: tuple(v.shape) for k, v in infos.items()} == shapes
    assert infos["ate_pay"].dtype == jnp.float32 and infos["ate"].dtype == jnp.bool_
