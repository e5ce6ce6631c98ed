"""Text protocol: prompt variants and the reply parser."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from dilemmax.envs.consequence.env import ConsequenceEnv
from dilemmax.envs.consequence.generator import make_config
from dilemmax.envs.text import NoReply


def _prompt(player, rule, clause="named", goal="competitive", agent="agent_1", **kwargs):
    state = player.start((1, 5, 6), 10, rule)
    protocol = player.env.text_protocol(clause=clause, goal=goal, **kwargs)
    return protocol.render(state, agent)


def test_anonymous_rp_and_pp_prompts_are_byte_identical(player):
    assert _prompt(player, "RP", "anonymous") == _prompt(player, "PP", "anonymous")
    named_rp, named_pp = _prompt(player, "RP"), _prompt(player, "PP")
    assert named_rp != named_pp
    assert "poorest" in named_rp and "richest" in named_pp
    # Only the rule clause differs between two rules' prompts.
    diff = [(a, b) for a, b in zip(named_rp.splitlines(), named_pp.splitlines(), strict=True)
            if a != b]  # fmt: skip
    assert len(diff) == 1 and diff[0][0].startswith("4. ")
    anon = _prompt(player, "RP", "anonymous")
    assert "poorest" not in anon and "fewest" not in anon and "richest" not in anon


def test_neutral_wording_and_goal_frames(player):
    neutral = _prompt(player, "RP", "neutral")
    for word in ("eliminated", "poorest", "richest"):
        assert word not in neutral
    assert "fewest units" in neutral and "leaves the game" in neutral
    goals = {g: _prompt(player, "RP", goal=g) for g in ("competitive", "cooperative", "survival")}
    assert len(set(goals.values())) == 3
    lines = {g: p.splitlines() for g, p in goals.items()}
    pairs = zip(lines["competitive"], lines["survival"], strict=True)
    changed = [i for i, (a, b) in enumerate(pairs) if a != b]
    assert len(changed) == 1 and lines["competitive"][changed[0]].startswith("Your goal")
    with pytest.raises(ValueError):
        player.env.text_protocol(clause="loud")


def test_prompt_content_and_history(player):
    protocol = player.env.text_protocol(ask_rationale=True)
    state = player.start((2, 4, 6), 12, "DV")
    _, state, *_ = player.play(state, (1, 0, 3))
    vote_prompt = protocol.render(state, "agent_0")
    assert "time to vote" in vote_prompt and "VOTE: <letter>" in vote_prompt
    assert "Round 1: A paid 1, B paid 0, C paid 3; the fund reached 4." in vote_prompt
    assert "explain your reasoning" in vote_prompt
    _, state, *_ = player.play(state, (2, 2, 1), seed=1)
    text = protocol.render(state, "agent_1")
    assert "Votes: A for C, B for C, C for B. C was eliminated." in text
    assert (
        "- You (B) hold 4 units." in text
        and "- A holds 1 unit." in text
        and "- C was eliminated after round 1." in text
    )
    assert "It is round 2 of 3." in text and "Fund: 4 of 12 units (8 missing)." in text
    assert "CONTRIBUTION: <whole number from 0 to 4>" in text
    assert "You make no further choices." in protocol.render(state, "agent_2")


def test_contribution_parser(player):
    protocol = player.env.text_protocol()
    state = player.start((1, 5, 6), 10, "RP")
    parse = lambda reply: protocol.parse(reply, state, "agent_1")
    ok = parse("I will keep a little back.\nCONTRIBUTION: 4")
    assert (ok.action, ok.valid, ok.rationale) == (4, True, "I will keep a little back.")
    assert parse("contribution = 2").action == 2
    assert parse("  3 ").action == 3 and parse("  3 ").valid
    # The last action line counts.
    assert parse("Maybe CONTRIBUTION: 1 ... no.\nCONTRIBUTION: 5").action == 5
    for bad in ("CONTRIBUTION: 6", "CONTRIBUTION: -1", "I pass", "", None):
        reply = parse(bad)
        assert (reply.action, reply.valid) == (0, False) and reply.error


def test_vote_parser(player):
    protocol = player.env.text_protocol()
    state = player.start((2, 4, 6), 12, "DV")
    _, state, *_ = player.play(state, (0, 0, 0))
    parse = lambda reply: protocol.parse(reply, state, "agent_0")
    assert parse("They hoard.\nVOTE: C").action == 2
    assert parse("vote: b").action == 1 and parse("VOTE for agent_0").action == 0
    assert parse("A").action == 0
    for bad in ("VOTE: Z", "nobody", ""):
        reply = parse(bad)
        assert (reply.action, reply.valid) == (3, False) and reply.error
    _, state, *_ = player.play(state, (2, 2, 2), seed=1)  # C leaves
    _, state, *_ = player.play(state, (0, 0, 0), seed=2)  # another vote
    reply = protocol.parse("VOTE: C", state, "agent_0")
    assert not reply.valid and "no longer" in reply.error
    # An eliminated agent needs no reply.
    assert protocol.parse("whatever", state, "agent_2").valid


def test_render_ansi_and_one_shot_clause():
    env = ConsequenceEnv(num_rounds=1, sorted_agents=True)
    _, state = env.reset_to(jax.random.key(0), make_config((1, 5, 6), 10, "RP"))
    ansi = env.render(state)
    assert "rule RP" in ansi and "fund 0/10" in ansi and "agent_2" in ansi
    prompt = env.text_protocol().render(state, "agent_0")
    assert "at most 1 round." in prompt and "after round 1, every participant" in prompt
    np.testing.assert_array_equal(state.resources, [1, 5, 6])


def test_one_flag_per_variant_and_they_combine(player):
    env = player.env
    state = {rule: player.start((1, 5, 6), 10, rule) for rule in ("RP", "PP")}

    def prompt(rule, **flags):
        return env.text_protocol(**flags).render(state[rule], "agent_0")

    both = {"anonymous": True, "neutral": True}
    assert prompt("RP", **both) == prompt("PP", **both)  # anonymized: byte-identical
    assert "leaves the game" in prompt("RP", **both) and "eliminated" not in prompt("RP", **both)
    assert prompt("RP", anonymous=True) == prompt("RP", clause="anonymous")
    assert prompt("RP", neutral=True) == prompt("RP", clause="neutral")
    assert prompt("RP", anonymous=False) == prompt("RP", clause="named")
    assert "poorest" in prompt("RP", anonymous=False)
    framed = prompt("RP", anonymous=True, goal="survival")
    assert "Your goal: still be in the game" in framed and framed != prompt("RP", anonymous=True)
    with pytest.raises(ValueError):
        env.text_protocol(anonymous="no")


def test_turn_and_parse_reply_use_plain_context(player):
    protocol = player.env.text_protocol()
    state = player.start((2, 4, 6), 12, "DV")
    prompt = protocol.turn(state, "agent_0", None)
    assert prompt.legal == (0, 1, 2) and prompt.context == {
        "vote": False, "held": 2, "alive": (True, True, True)
    }  # fmt: skip
    assert protocol.parse_reply("CONTRIBUTION: 2", prompt).action == 2
    assert not protocol.parse_reply("CONTRIBUTION: 3", prompt).valid
    _, state, *_ = player.play(state, (0, 0, 0))  # a vote follows
    vote = protocol.turn(state, "agent_0", None)
    assert vote.context["vote"] and protocol.parse_reply("VOTE: c", vote).action == 2
    _, state, *_ = player.play(state, (2, 2, 2), seed=1)  # C leaves
    assert protocol.turn(state, "agent_2", None) == NoReply(0)


def test_cached_layout_puts_what_every_seat_reads_first(player):
    """ "cached" (default): the group, goal, rules and history, the same for every seat, then
    "You are participant X." and the round as the seat sees it; "paper": the paper's order, the
    seat named in the first sentence. Both say the same things."""
    protocol = player.env.text_protocol()
    paper = player.env.text_protocol(layout="paper")
    state = player.start((2, 4, 6), 12, "DV")
    _, state, *_ = player.play(state, (1, 0, 3))
    prompts = {a: protocol.render(state, a) for a in player.env.agents}
    b = prompts["agent_1"]
    shared = b[: b.index("You are participant B.")]
    assert shared.startswith("You are one of the 3 participants (A, B, C) of a group.")
    assert shared.endswith("Round 1: A paid 1, B paid 0, C paid 3; the fund reached 4.\n\n")
    assert all(p.startswith(shared) for p in prompts.values())
    assert b.index("You are participant B.") < b.index("- You (B) hold 4 units.")
    old = paper.render(state, "agent_1")
    assert old.startswith("You are participant B in a group of 3 participants (A, B, C).")
    assert old.index("- You (B) hold 4 units.") < old.index("History:\nRound 1")
    lines = {line for line in b.split("\n")[1:] if line} - {"You are participant B."}
    assert lines == {line for line in old.split("\n")[1:] if line}  # the same lines
