"""The OpenSocialJax agent protocol on OpenCleanup: memory an agent sees, notes, trial ends."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.envs.open_cleanup import constants as C
from dilemmax.envs.open_cleanup.conftest import hand_state, jit_step, make_rule
from dilemmax.envs.osj.replies import explore_share
from dilemmax.envs.text import NoReply, ParsedReply, Prompt

H, W = C.GRID_HEIGHT, C.GRID_WIDTH
G2 = C.WASTE_BASE + 2 * 3 + C.DARK  # green-dark


def reply(action, mode="clean", note=None, goal=None):
    return json.dumps(
        {
            "why_this_move": "testing",
            "mode": mode,
            "goal": goal or {"type": "fire", "cell": [6, 8], "why": "shoot the G2"},
            "note": note or {"op": "none", "id": 0, "text": ""},
            "action": action,
        }
    )


@pytest.fixture(scope="module")
def shot_setup(env):
    """Agent A at (6, 8) facing north with window [2, 0] (= dark -> mid) under a G2 at (5, 8),
    agent B at (8, 8) facing north watching; the next step is the last of trial 1."""
    grid = np.full((H, W), C.GROUND, np.uint8)
    grid[5, 8] = G2
    positions = [[6, 8], [8, 8]] + [[H - 1, 2 + 2 * i] for i in range(env.num_agents - 2)]
    state = hand_state(env, make_rule(dark=(2, 0)), grid, positions, [0] * env.num_agents)
    window = state.window.at[0].set(jnp.asarray([2, 0]))
    return state.replace(window=window, trial_step=jnp.int32(env.trial_steps - 1))


def play_step(env, protocol, memories, state, replies, key=0):
    """One step through the play interface: turn, parse, after_reply, env step, after_step."""
    actions, prompts = {}, {}
    for agent in env.agents:
        prompt = protocol.turn(state, agent, memories[agent])
        if isinstance(prompt, NoReply):
            actions[agent] = prompt.action
            continue
        text = replies.get(agent, reply(C.STAY_ACTION, mode="harvest"))
        parsed = protocol.parse_reply(text, prompt)
        protocol.after_reply(memories[agent], agent, prompt, text, parsed)
        actions[agent], prompts[agent] = parsed.action, prompt
    step_actions = {a: jnp.int32(v) for a, v in actions.items()}
    _, next_state, _, _, infos = jit_step(env)(jax.random.PRNGKey(key), state, step_actions)
    extra = {a: protocol.after_step(memories[a], a, state, actions, infos, next_state)
             for a in env.agents}  # fmt: skip
    return next_state, prompts, extra


@pytest.mark.slow
def test_a_fired_pair_is_known_at_the_next_trial_start(env, shot_setup):
    protocol = env.text_protocol()
    memories = {a: protocol.new_memory(a) for a in env.agents}
    note = {"op": "add", "id": 0, "text": "dark waste sits at (5, 8)"}
    first, prompts, extra = play_step(
        env, protocol, memories, shot_setup, {"agent_0": reply(C.FIRE_ACTION, note=note)}
    )
    assert "RULES YOU KNOW\nYou have not fired" in prompts["agent_0"].user
    assert int(first.trial) == 1  # the step ended trial 1
    # Every agent is asked for its trial-end rewrite before trial 2.
    for agent in env.agents:
        (ask,) = extra[agent]
        assert ask.kind == "reflect" and ask.json_schema is not None
    assert "[1] t399: dark waste sits at (5, 8)" in extra["agent_0"][0].user
    lessons = '{"lessons": ["[2, 0] darkens nothing: it lightens G2"], "plans": ["clean early"]}'
    parsed = protocol.parse_reply(lessons, extra["agent_0"][0])
    assert parsed.valid and parsed.fields["plans"] == ["clean early"]
    protocol.after_reply(memories["agent_0"], "agent_0", extra["agent_0"][0], lessons, parsed)
    broken = protocol.parse_reply("no list here", extra["agent_1"][0])
    assert not broken.valid
    protocol.after_reply(memories["agent_1"], "agent_1", extra["agent_1"][0], "", broken)

    user = protocol.turn(first, "agent_0", memories["agent_0"]).user
    assert user.startswith("You are agent A.\n\nEARLIER TRIALS\nTrial 1: ")  # "cached" layout
    assert "\n\nTrial 2 of 5, step 0 of 400." in user
    assert user.index("YOUR NOTES") < user.index("RULES YOU KNOW") < user.index("Trial 2 of 5")
    assert "[2, 0] -> turned G2 (green-dark) into G1 (green-mid)" in user
    assert "What you worked out by the end of trial 1:\n[1] [2, 0] darkens nothing" in user
    assert "What you meant to try this trial:\n[2] clean early" in user
    assert "dark waste sits" not in user  # step-by-step notes are dropped at the trial end
    assert "Trial 1: you cleared 0 waste cells, ate 0 apples, fired 1 times" in user
    assert "first working tool" not in user  # the window was set by hand, never picked up
    # B watched A's shot: it is in B's summary of the others, not in B's own rules.
    watcher = protocol.turn(first, "agent_1", memories["agent_1"]).user
    assert "A seen 1 steps, you saw it fire 1 time(s): turned 1 G2 (green-dark) into G1" in watcher
    assert "[2, 0] ->" not in watcher and "You have not fired at waste" in watcher
    assert "YOUR NOTES (what you worked out about playing)\n(none yet)" in watcher  # failed rewrite


def test_notes_round_trip_plan_and_last_step(env, shot_setup):
    protocol = env.text_protocol()
    memory = protocol.new_memory("agent_0")
    state = shot_setup.replace(trial_step=jnp.int32(10))
    edits = [
        {"op": "add", "id": 0, "text": "first"},
        {"op": "add", "id": 0, "text": "second"},
        {"op": "replace", "id": 1, "text": "first, better"},
        {"op": "delete", "id": 2, "text": ""},
        {"op": "delete", "id": 7, "text": ""},
    ]
    for k, note in enumerate(edits):
        prompt = protocol.turn(state.replace(trial_step=jnp.int32(10 + k)), "agent_0", memory)
        goal = {"type": "move_to", "cell": [6, 9 + k], "why": f"goal {k}"}
        text = reply(C.STAY_ACTION, "explore" if k < 2 else "craft", note, goal)
        protocol.after_reply(memory, "agent_0", prompt, text, protocol.parse_reply(text, prompt))
    assert memory.notes == {1: "first, better (revised t12)"}
    assert memory.note_result == "note delete ignored: there is no entry [7]"
    user = protocol.turn(state.replace(trial_step=jnp.int32(16)), "agent_0", memory).user
    assert "Notes you have added:\n[1] first, better (revised t12)" in user
    assert 'Current goal #5 (set step 14, 2 steps ago): move_to (6, 13) -- "goal 4"' in user
    assert 'abandoned at step 14 ("goal 4")' in user and "Distance now 5 (was 5)" in user
    assert "Your note edit: note delete ignored: there is no entry [7]." in user
    assert explore_share(memory.modes) == pytest.approx(2 / 5)
    assert explore_share([ParsedReply(7, True, fields={"mode": "explore"}), None]) == 1.0


def test_frozen_agents_are_not_called_and_invalid_replies_stay(env, shot_setup):
    protocol = env.text_protocol()
    memory = protocol.new_memory("agent_0")
    frozen = shot_setup.replace(frozen=shot_setup.frozen.at[0].set(3))
    assert protocol.turn(frozen, "agent_0", memory) == NoReply(C.STAY_ACTION)
    prompt = protocol.turn(shot_setup, "agent_0", memory)
    assert isinstance(prompt, Prompt) and C.PICK_UP_ACTION not in prompt.legal  # not on a station
    assert prompt.json_schema["properties"]["action"]["maximum"] == env.num_actions - 1
    for text in ("", "I will fire.", '{"action": 8}', '{"mode": "clean"}', "ACTION dance"):
        parsed = protocol.parse_reply(text, prompt)
        assert (parsed.action, parsed.valid) == (C.STAY_ACTION, False) and parsed.error, text
    fenced = "Plan:\n```json\n" + reply(C.FIRE_ACTION) + "\n```"
    parsed = protocol.parse_reply(fenced, prompt)
    assert (parsed.action, parsed.valid, parsed.fields["mode"]) == (C.FIRE_ACTION, True, "clean")
    bad_fields = '{"action": 6, "mode": "dance", "note": {"op": "rename", "id": 1}}'
    parsed = protocol.parse_reply(bad_fields, prompt)
    assert (
        parsed.valid and parsed.fields["mode"] is None and len(parsed.fields["field_errors"]) == 2
    )
    free_text = protocol.parse_reply("I face the waste.\nACTION fire", prompt)
    assert (free_text.action, free_text.valid) == (C.FIRE_ACTION, True)


def test_system_prompt_has_the_papers_rules_and_not_the_recipe_count(env):
    system = env.text_protocol().system_prompt("agent_1")
    assert system.startswith("You are one of 5 agents (A, B, C, D, E) in a grid world")
    paper = env.text_protocol(layout="paper").system_prompt("agent_1")
    assert paper.startswith("You are agent B, one of 5 agents (A, B, C, D, E) in a grid world")
    assert "7 of the 16" not in system and "16 pairs" not in system
    for needle in ("WINDOW", "RECIPE", '"why_this_move"', "5.4 When a trial ends", "400 steps"):
        assert needle in system, needle
    role = env.text_protocol(role="cooperator", layout="paper").system_prompt("agent_1")
    assert "1.5 YOUR ROLE" in role and "1.5 YOUR ROLE" not in paper
    # "cached": the role is the seat's own, at the start of its turns, not in the shared text
    cooperator = env.text_protocol(role="cooperator")
    assert cooperator.system_prompt("agent_1") == system
    assert cooperator.identity("agent_1").startswith("You are agent B.\n1.5 YOUR ROLE")
