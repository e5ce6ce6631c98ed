"""Scripted policies on hand-made views, a short jitted rollout, the text protocol, rendering."""

import collections
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest import observation, policies
from dilemmax.envs.open_harvest.conftest import act, hand_config, place, tree_at
from dilemmax.envs.open_harvest.env import OpenHarvestEnv
from dilemmax.envs.open_harvest.rendering import code_palette, render_ansi, render_rgb
from dilemmax.envs.rollout import Observation, run_episodes

RED_UNRIPE = c.CODE_APPLE + 0 * c.NUM_STAGES + c.UNRIPE
RED_RIPE = c.CODE_APPLE + 0 * c.NUM_STAGES + c.RIPE
ALL_LEGAL = jnp.ones(c.NUM_ACTIONS, bool)


def view(facing=0, apples=(), agents=(), code=RED_UNRIPE):
    """uint8[11, 11, 3]: open ground, the observer at [9, 5] facing ``facing``."""
    cells = np.full((11, 11), c.CODE_GROUND, np.uint8)
    who = np.zeros((11, 11), np.uint8)
    info = np.zeros((11, 11), np.uint8)
    for r, q in apples:
        cells[r, q] = code
    for r, q in agents:
        who[r, q], info[r, q] = c.WHO_OTHER, 1
    who[c.SELF_ROW, c.SELF_COL], info[c.SELF_ROW, c.SELF_COL] = c.WHO_SELF, 1 + facing
    return jnp.asarray(np.stack([cells, who, info], -1))


def actions_of(policy, obs_array, mask=ALL_LEGAL, state=None, n=64):
    """The actions ``policy`` picks on one observation over ``n`` keys."""
    keys = jax.random.split(jax.random.key(0), n)
    return set(np.asarray(_picks(policy, keys, obs_array, mask, state)).tolist())


@functools.partial(jax.jit, static_argnums=0)
def _picks(policy, keys, obs_array, mask, state):
    """One compiled program per policy and observation shape (run op by op, every policy's
    first call compiled dozens of one-primitive programs)."""
    observation_ = Observation(obs_array, mask, jnp.int32(0), state)
    return jax.vmap(lambda k: policy(k, observation_))(keys)


@pytest.mark.slow
def test_greedy_walks_to_the_nearest_apple_in_absolute_moves():
    right = [(c.SELF_ROW, c.SELF_COL + 2)]
    assert actions_of(policies.greedy_policy, view(0, right)) == {c.EAST_ACTION}
    assert actions_of(policies.greedy_policy, view(1, right)) == {c.SOUTH_ACTION}
    assert actions_of(policies.greedy_policy, view(2, right)) == {c.WEST_ACTION}
    behind = [(c.SELF_ROW + 1, c.SELF_COL)]
    assert actions_of(policies.greedy_policy, view(3, behind)) == {c.EAST_ACTION}
    # An agent in the way: go round it, never into it.
    blocked = view(0, [(c.SELF_ROW - 2, c.SELF_COL)], agents=[(c.SELF_ROW - 1, c.SELF_COL)])
    assert actions_of(policies.greedy_policy, blocked) == {c.EAST_ACTION, c.WEST_ACTION}
    # Nothing in sight: walk ahead or turn to look around.
    assert actions_of(policies.greedy_policy, view(0)) <= {
        c.NORTH_ACTION,
        c.TURN_LEFT,
        c.TURN_RIGHT,
    }
    # The same decisions from a one-hot observation.
    one_hot = observation.one_hot(view(1, right))
    assert actions_of(policies.greedy_policy, one_hot) == {c.SOUTH_ACTION}


@pytest.mark.slow
def test_policies_respect_the_mask():
    frozen = jnp.zeros(c.NUM_ACTIONS, bool).at[c.STAY].set(True)
    obs = view(0, [(c.SELF_ROW - 1, c.SELF_COL)])
    for policy in policies.SCRIPTED_POLICIES.values():
        assert actions_of(policy, obs, frozen, state=None if policy is not policies.oracle_policy
                          else _oracle_state()) == {c.STAY}  # fmt: skip


# A stand-in state (a pytree, so the compiled picks take it): the oracle reads only .config.
_State = collections.namedtuple("_State", "config")


def _oracle_state():
    return _State(hand_config())  # red pays most when unripe: (1, .5, .25)


CLUSTER = [(4, 5), (5, 4), (5, 5), (5, 6)]  # each has >= 3 of the others within two cells


@pytest.mark.slow
def test_sustainable_leaves_lone_apples_and_takes_apples_with_neighbours():
    lone = view(0, [(c.SELF_ROW, c.SELF_COL + 1)])
    picked = actions_of(policies.sustainable_policy, lone, n=200)
    assert c.EAST_ACTION not in picked and c.STAY in picked  # waits beside it, never eats it
    assert actions_of(policies.greedy_policy, lone) == {c.EAST_ACTION}
    assert actions_of(policies.sustainable_policy, view(0, CLUSTER)) == {c.NORTH_ACTION}
    # A lone apple between the observer and the cluster is walked around, not eaten.
    guarded = view(0, CLUSTER + [(c.SELF_ROW - 1, c.SELF_COL)])
    assert actions_of(policies.sustainable_policy, guarded) == {c.EAST_ACTION, c.WEST_ACTION}


def test_oracle_eats_only_at_the_best_paying_stage():
    state = _oracle_state()
    unripe = view(0, CLUSTER, code=RED_UNRIPE)
    ripe = view(0, CLUSTER, code=RED_RIPE)
    assert actions_of(policies.oracle_policy, unripe, state=state) == {c.NORTH_ACTION}
    waited = actions_of(policies.oracle_policy, ripe, state=state, n=200)
    assert waited != {c.NORTH_ACTION} and c.STAY in waited  # mostly waits for them
    assert actions_of(policies.sustainable_policy, ripe) == {c.NORTH_ACTION}


@pytest.mark.slow
def test_greedy_episodes_run_in_jax_and_the_metrics_match_the_rollout():
    env = OpenHarvestEnv(num_layouts=16, num_rules=64, num_trials=2, trial_steps=120)
    scripted = env.scripted_policies()
    assert set(scripted) == {"greedy", "sustainable", "oracle", "random"}
    rollouts, m = run_episodes(env, scripted["greedy"], jax.random.key(5), num_episodes=3)
    # Greedy eats right away and strips the orchard well before a trial's end, every trial.
    assert float(np.mean(m["apples_per_trial"])) >= 5
    assert (np.asarray(m["orchard_died"]).all()) and (np.asarray(m["orchard_lifetime"]) < 120).all()
    assert (np.asarray(m["trials_played"]) == 2).all()
    # The metrics agree with the raw rollout.
    rewards = np.stack([np.asarray(rollouts.rewards[a]) for a in env.agents], -1)
    valid = np.asarray(rollouts.valid)[..., None]
    np.testing.assert_allclose(m["return"], (rewards * valid).sum(1), rtol=1e-5)
    np.testing.assert_allclose(m["return"], np.asarray(m["return_per_trial"]).sum(1), rtol=1e-5)
    ate = np.asarray(rollouts.infos["ate"]) & valid
    assert (np.asarray(m["apples"]) == ate.sum(1)).all()
    assert (np.asarray(m["length"]) == np.asarray(rollouts.valid).sum(1)).all()
    # Each episode drew its own configuration inside the vmapped program.
    colours = np.asarray(rollouts.final_state.config.patch_colours)
    assert len({row.tobytes() for row in colours}) == 3


# ---------------------------------------------------------------- text protocol


@pytest.fixture(scope="module")
def protocol(env):
    return env.text_protocol()


def test_prompt_shows_view_status_and_action_effects(env, protocol, hand_state):
    state = place(place(hand_state, 0, 5, 3, facing=0), 1, 6, 3, facing=1)
    state = state.replace(cooldown=state.cooldown.at[1].set(1))
    text = protocol.render(state, "agent_0")
    assert text.startswith("Trial 1 of 5, step 0 of 400.")
    assert "you are agent A, at (5, 3), facing north. Your beam is ready." in text
    assert "0 north -> (4, 3): red unripe apple, you eat it" in text
    assert "1 south -> (6, 3): agent B is there" in text
    assert "(4, 3) red unripe apple" in text and "B at (6, 3) facing east" in text
    assert "ACTIONS NOW" in text and "ACTION north" in text
    assert "r  5" in text and "ME" in text and "@B" in text and "Rg" in text
    other = protocol.render(state, "agent_1")
    assert "Your beam is resting for 1 more step(s)." in other
    assert "6 zap" not in other  # not available while the beam rests
    ready = place(state, 1, 6, 3, facing=0).replace(cooldown=state.cooldown.at[1].set(0))
    assert "6 zap (hits A)" in protocol.render(ready, "agent_1")
    system = protocol.system_prompt("agent_2")
    assert system.startswith("You are one of 5 agents") and "12 steps" in system


def test_prompt_reports_what_was_eaten_and_a_zap(env, step, protocol, hand_state):
    tree = tree_at(hand_state.config, 4, 3)
    state = place(place(hand_state, 0, 5, 3), 1, 5, 2, facing=1)
    _, state, *_ = step(jax.random.key(0), state, act(env, agent_0=c.NORTH_ACTION))
    assert not bool(state.orchard.apple[tree])
    text = protocol.render(state, "agent_0")
    assert "You ate a red unripe apple: +1 points." in text
    assert "you ate 1 apples for 1 points" in text
    assert "RULES YOU KNOW: points per apple you have been paid: red unripe -> 1." in text
    assert "RULES YOU KNOW: you have not eaten anything" in protocol.render(state, "agent_1")
    state = place(state, 1, 4, 2, facing=1)  # agent 1 faces agent 0
    _, state, *_ = step(jax.random.key(1), state, act(env, agent_1=c.ZAP))
    text = protocol.render(state, "agent_0")
    assert "Agent B's zap hit you" in text and "You are frozen" in text


def test_parser_accepts_action_lines_json_and_bare_names(protocol, hand_state):
    parse = lambda reply: protocol.parse(reply, hand_state, "agent_0")  # noqa: E731
    assert parse("I go up.\nACTION north").action == c.NORTH_ACTION
    assert parse("I go up.\nACTION north").rationale == "I go up."
    assert parse("action: turn left.").action == c.TURN_LEFT
    assert parse('{"why": "test", "action": 6}').action == c.ZAP
    assert parse('{"action": "stay"}').action == c.STAY
    assert parse("east").action == c.EAST_ACTION
    for bad in ["", "I am not sure", "ACTION jump", "ACTION 8", '{"action": 12}']:
        reply = parse(bad)
        assert not reply.valid and reply.action == c.STAY and reply.error


def test_parser_rejects_actions_that_are_not_legal_now(protocol, hand_state):
    frozen = hand_state.replace(frozen=hand_state.frozen.at[0].set(3))
    reply = protocol.parse("ACTION north", frozen, "agent_0")
    assert not reply.valid and reply.action == c.STAY and "frozen" in reply.error
    assert protocol.parse("ACTION stay", frozen, "agent_0").valid
    resting = hand_state.replace(cooldown=hand_state.cooldown.at[0].set(2))
    reply = protocol.parse("ACTION zap", resting, "agent_0")
    assert not reply.valid and "resting" in reply.error


# ---------------------------------------------------------------- rendering


def test_ansi_render_shows_trees_agents_and_header(hand_state):
    frozen = hand_state.replace(frozen=hand_state.frozen.at[1].set(4))
    text = render_ansi(frozen)
    lines = text.splitlines()
    assert lines[0] == "trial 1, step 0, apples 64"
    row4 = next(line for line in lines if line.startswith("r 4 "))
    assert row4.split()[2 + 3] == "Rg"  # label "r", "4", then columns 0.. ; red unripe at col 3
    row15 = next(line for line in lines if line.startswith("r15 "))
    assert row15.split()[1:4] == ["..", "A^", "b*"]  # A faces north, B is frozen


def test_rgb_frame_colours_cells_and_agents(hand_state):
    frame = render_rgb(hand_state, scale=8)
    assert frame.shape == (16 * 8, 22 * 8, 3) and frame.dtype == np.uint8
    palette = code_palette()
    centre = lambda r, q: frame[r * 8 + 4, q * 8 + 4]  # noqa: E731
    assert centre(4, 3).tolist() == palette[RED_UNRIPE].tolist()
    assert centre(13, 13).tolist() == palette[c.CODE_GROUND].tolist()
    agent_tile = frame[15 * 8 : 16 * 8, 1 * 8 : 2 * 8].reshape(-1, 3)
    assert not (agent_tile == palette[c.CODE_GROUND]).all(-1).all()  # the arrow is drawn
