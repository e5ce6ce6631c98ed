"""The OpenSocialJax agent protocol on OpenHarvest: pays learned, watched cells, zaps, trials."""

from __future__ import annotations

import json
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest.conftest import place
from dilemmax.envs.open_harvest.ledger import HarvestLedger, Pending
from dilemmax.envs.text import NoReply


def reply(action, mode="harvest"):
    return json.dumps(
        {
            "why_this_move": "test",
            "mode": mode,
            "goal": {"type": "eat", "cell": [4, 3], "why": "red apple"},
            "note": {"op": "none", "id": 0, "text": ""},
            "action": action,
        }
    )


def play(env, step, protocol, memories, state, chosen, key=0):
    """One step through the play interface; returns (next_state, prompts, extra prompts)."""
    actions, prompts = {}, {}
    for agent in env.agents:
        prompt = protocol.turn(state, agent, memories[agent])
        if isinstance(prompt, NoReply):
            actions[agent] = prompt.action
            continue
        text = reply(chosen.get(agent, c.STAY))
        parsed = protocol.parse_reply(text, prompt)
        assert parsed.valid, parsed
        protocol.after_reply(memories[agent], agent, prompt, text, parsed)
        actions[agent], prompts[agent] = parsed.action, prompt
    jax_actions = {a: jnp.int32(v) for a, v in actions.items()}
    _, nxt, _, _, infos = step(jax.random.key(key), state, jax_actions)
    extra = {a: protocol.after_step(memories[a], a, state, actions, infos, nxt) for a in env.agents}
    return nxt, prompts, extra


@pytest.fixture(scope="module")
def protocol(env):
    return env.text_protocol()


@pytest.mark.slow
def test_eating_watching_zapping_and_the_trial_end(env, step, protocol, hand_state):
    memories = {a: protocol.new_memory(a) for a in env.agents}
    # A at (5, 3) faces north at a red unripe apple; B right behind it, facing north.
    state = place(place(hand_state, 0, 5, 3, facing=0), 1, 6, 3, facing=0)
    state, _, _ = play(env, step, protocol, memories, state, {"agent_0": c.NORTH_ACTION})
    user = protocol.turn(state, "agent_0", memories["agent_0"]).user
    # "cached" layout: RULES YOU KNOW holds the pay, NOW the tally and the cell waited on
    assert "What you ate and what it paid you: red: unripe -> 1 points." in user
    assert "Apples you have eaten this episode: red unripe 1." in user
    assert "(4, 3) red eaten unripe at step 1 with 4 apples around, empty for 0 steps so" in user
    assert "you chose 0 (north) -> moved (5, 3) -> (4, 3); you ate a red unripe apple" in user
    assert "t0 N -> (4, 3) ate Rg +1" in user
    watcher = protocol.turn(state, "agent_1", memories["agent_1"]).user
    assert "t0 Agent A ate a red unripe apple at (4, 3)." in watcher
    assert "ate 1 in your view (red unripe 1)" in watcher
    assert "What you ate and what it paid you: nothing yet" in watcher  # B learned no pay
    assert "none yet." in watcher.split("Regrowth you watched")[1].split("\n")[0]
    assert "(4, 3) red eaten unripe at step 1 with 4 apples around, empty for 0" in watcher
    paper = env.text_protocol(layout="paper")  # the paper's wording, the tallies in the rules
    paper_memory = paper.new_memory("agent_1")
    paper_memory.ledger = memories["agent_1"].ledger
    watcher = paper.turn(state, "agent_1", paper_memory).user
    assert "red cells eaten at unripe: none seen regrow; 1 not regrown yet" in watcher

    # B zaps A (beam: (5, 3), (4, 3), ...): A is frozen and not called.
    state, _, _ = play(env, step, protocol, memories, state, {"agent_1": c.ZAP}, key=1)
    assert protocol.turn(state, "agent_0", memories["agent_0"]) == NoReply(c.STAY)
    assert "agent B's zap sent you back to a spawn point" in memories["agent_0"].last_step

    # The last step of the trial: everyone is asked for a rewrite, the summary is kept.
    state = state.replace(trial_step=jnp.int32(env.trial_steps - 1))
    state, _, extra = play(env, step, protocol, memories, state, {}, key=2)
    assert [p.kind for p in extra["agent_0"]] == ["reflect"]
    lessons = "- Never take the last apples of a patch\n- Red unripe pays 1"
    ask = extra["agent_0"][0]
    parsed = protocol.parse_reply(lessons, ask)
    protocol.after_reply(memories["agent_0"], "agent_0", ask, lessons, parsed)
    user = protocol.turn(state, "agent_0", memories["agent_0"]).user
    assert user.startswith("You are agent A.\n\nEARLIER TRIALS\nTrial 1: ")  # "cached" layout
    assert user.index("RULES YOU KNOW") < user.index("\n\nTrial 2 of 5, step 0 of 400.")
    assert "red: unripe -> 1 points." in user  # RULES YOU KNOW lasts the episode
    assert "[1] Never take the last apples of a patch\n[2] Red unripe pays 1" in user
    assert (
        "Trial 1: you ate 1 apples for 1 points (red unripe 1); you zapped 0 times and were "
        "sent back 1 times." in user
    )
    assert "Cells you are waiting on" not in user  # a new trial re-lays the orchard


def test_system_prompt_lists_the_papers_regrowth_ripening_and_rot_facts(protocol):
    system = protocol.system_prompt("agent_2")
    assert system.startswith("You are one of") and "12 steps" in system
    assert "You are agent C," in protocol.env.text_protocol(layout="paper").system_prompt("agent_2")
    for needle in (
        "unripe -> ripe -> over-ripe",
        "rots after a while and vanishes",
        "ONLY while apples still hang close to it",
        "with two it takes many times longer",
        "ROTTED grows a new one by itself",
        "stage its apple had when it was eaten",
        '"mode": "harvest" | "wait" | "explore" | "travel" | "zap"',
    ):
        assert needle in system, needle


def test_parse_reply_reads_the_prompt_not_the_state(env, protocol, hand_state):
    resting = hand_state.replace(cooldown=hand_state.cooldown.at[0].set(2))
    prompt = protocol.turn(resting, "agent_0", protocol.new_memory("agent_0"))
    assert c.ZAP not in prompt.legal and "_state" not in prompt.context
    parsed = protocol.parse_reply(reply(c.ZAP, "zap"), prompt)
    assert not parsed.valid and parsed.action == c.STAY and "resting" in parsed.error
    assert parsed.fields["mode"] == "zap"
    ok = protocol.parse_reply(reply(c.EAST_ACTION), prompt)
    assert (ok.action, ok.valid, ok.fields["goal"]["cell"]) == (c.EAST_ACTION, True, (4, 3))


def test_cached_rules_you_know_moves_only_when_a_rule_is_learned():
    """The "cached" layout's RULES YOU KNOW is the same text while only tallies move (one more
    apple of a kind eaten, one more seen rot, a waited cell looked at again), so a seat's
    consecutive prompts share it; NOW carries the tallies. The paper's wording keeps them."""
    red, green = c.COLOUR_NAMES.index("red"), c.COLOUR_NAMES.index("green")
    ledger = HarvestLedger()
    ledger.paid(red, 1, 3.0)
    ledger.rot[green] += 1
    ledger.pending[5] = Pending(green, 0, emptied=10, around=3, look=10, around_look=3)
    steady, paper = ledger.block(steady=True), ledger.block()
    assert "red: ripe -> 3 points.\n" in steady and "(x1)" in paper
    assert "Apples you saw rot: green." in steady and "Apples you saw rot: green 1." in paper
    assert "Regrowth you watched" in steady and "not regrown yet" not in steady

    ledger.paid(red, 1, 3.0)
    ledger.rot[green] += 1
    ledger.pending[5].look = 14
    assert ledger.block(steady=True) == steady
    assert "(x2)" in ledger.block() and "still empty up to 4 steps" in ledger.block()
    assert ledger.tallies() == [
        "Apples you have eaten this episode: red ripe 2.",
        "Apples you have seen rot this episode: green 2.",
    ]
    trees = SimpleNamespace(pos=np.zeros((6, 2), int))
    assert ledger.waiting_lines(14, trees, around=True) == (
        "(0, 0) green eaten unripe at step 10 with 3 apples around, empty for 4 steps so far"
    )

    ledger.regrowth[(green, 0)] = [(12, True)]  # learned: how long a cell took to regrow
    learned = ledger.block(steady=True)
    assert learned != steady and "green cells eaten at unripe: regrew after 12 steps" in learned
