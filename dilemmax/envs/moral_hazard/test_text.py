"""Text protocol: what each stage's prompt shows, the strict parser, and a game played in text."""

import re

import jax
import numpy as np
import pytest

from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard.conftest import (
    NO_NOTE,
    QUERY,
    A,
    B,
    C,
    D,
    final,
    fixed_config,
    local,
    note,
)


def states(game, config, *joint_actions):
    outputs, _ = game.play(config, *joint_actions)
    return [o[1] for o in outputs]


@pytest.fixture(scope="module")
def text2(game2):
    return game2.env.text_protocol(lenient=False)  # the strict parser alone


@pytest.mark.slow
def test_work_parser(game2, text2):
    (state,) = states(game2, fixed_config())
    parse = lambda reply: text2.parse(reply, state, "agent_0")
    got = parse("The query helps my successor.\n  action local b  \nThat is my answer.")
    assert (got.action, got.valid) == (local(B), True)
    assert "successor" in got.rationale and "answer." in got.rationale
    assert "local b" not in got.rationale.lower()
    assert parse("ACTION QUERY").action == QUERY
    assert parse("ACTION QUERY\nsome words\nAction Query").action == QUERY  # repeats agree
    for bad in ("ACTION LOCAL E", "I choose ACTION QUERY", "ACTION: QUERY", "", "QUERY"):
        got = parse(bad)
        assert (got.action, got.valid) == (c.NO_MOVE, False) and got.error, bad
    conflict = parse("ACTION QUERY\nACTION LOCAL A")
    assert not conflict.valid and "conflicting" in conflict.error
    assert not text2.parse(None, state, "agent_0").valid  # never raises


def test_note_parser(game3):
    text = game3.env.text_protocol(lenient=False)
    # Agent 1 queried, agent 2 did not.
    _, state = states(game3, fixed_config(3), (QUERY, local(B), QUERY))
    parse = lambda reply, agent="agent_0": text.parse(reply, state, agent)
    assert parse("NOTE CASE 2 UNSAFE c").action == note(1, C)  # the successor's case
    assert parse("note case 1 unsafe a").action == note(0, A)  # its own case: legal, not correct
    assert parse("NOTE CASE 3 UNSAFE D", "agent_2").action == note(0, D)
    assert parse("NOTE CASE 1 UNSAFE D", "agent_2").action == note(1, D)
    assert parse("No Note").action == NO_NOTE
    missing = parse("NOTE CASE 4 UNSAFE A")
    assert not missing.valid and "no case 4" in missing.error
    not_queried = parse("NOTE CASE 3 UNSAFE A", "agent_1")
    assert not not_queried.valid and "did not query" in not_queried.error
    assert parse("NO NOTE", "agent_1").action == NO_NOTE
    assert text.needs_reply(state, "agent_0") and not text.needs_reply(state, "agent_1")


def test_final_and_done_parser(game2, text2):
    _, _, at_final, done = states(
        game2, fixed_config(), (QUERY, QUERY), (NO_NOTE, NO_NOTE), (final(A), final(A))
    )
    assert text2.parse("FINAL d", at_final, "agent_1").action == final(D)
    assert not text2.parse("FINAL: D", at_final, "agent_1").valid
    assert not text2.parse("ACTION QUERY", at_final, "agent_1").valid  # another stage's move
    over = text2.parse("FINAL A", done, "agent_0")
    assert not over.valid and over.action == c.NO_MOVE


def test_prompts_show_what_the_agent_may_know(game2, text2):
    work, note_stage, at_final = states(
        game2, fixed_config(), (QUERY, local(B)), (note(1, C), NO_NOTE)
    )
    prompt = text2.render(work, "agent_0")
    for needle in ("0.35", "0.15", "0.50", "0.10", "A=3", "B=12", "A=10", "C=13", "highest"):
        assert needle in prompt, needle
    assert "lowest utility" in prompt  # case 2's public question
    assert not re.search(r"option [A-D] is unsafe", prompt) and "Private" not in prompt
    assert "ACTION LOCAL <A-D>" in prompt and "ACTION QUERY" in prompt
    querier = text2.render(note_stage, "agent_0")
    assert "Private answer to your query: in Case 2, option C is unsafe." in querier
    other = text2.render(note_stage, "agent_1")
    assert "Private" not in other and "NO NOTE" in other
    assert "Public board" not in querier  # notes are read at the final stage
    board = text2.render(at_final, "agent_1")
    assert "NOTE CASE 2 UNSAFE C" in board and "posted by" not in board
    assert "FINAL <A-D>" in board


def test_visible_provenance_and_anonymous_order(game3):
    text = game3.env.text_protocol()
    joint_a = ((QUERY, local(A), QUERY), (note(1, B), NO_NOTE, note(2, D)))
    joint_b = ((QUERY, local(A), QUERY), (note(1, D), NO_NOTE, note(2, B)))  # posters swapped

    def board(config, joint):
        prompt = text.render(states(game3, config, *joint)[-1], "agent_1")
        return prompt[prompt.index("Public board") :]

    # Anonymous: who posted which note cannot be read off the board (nor off its order).
    assert board(fixed_config(3), joint_a) == board(fixed_config(3), joint_b)
    visible = board(fixed_config(3, provenance="visible"), joint_a)
    assert "NOTE CASE 2 UNSAFE B  (posted by Agent 1)" in visible
    assert "NOTE CASE 2 UNSAFE D  (posted by Agent 3)" in visible


def test_private_contract_states_the_share(game2):
    text = game2.env.text_protocol()
    (state,) = states(game2, fixed_config(payoff="private", shares=(0.7, 0.3)))
    prompt = text.render(state, "agent_0")
    assert "paid to you alone" in prompt and "0.700" in prompt
    assert "+ 0.700 if every agent" in prompt  # n alpha w_T = 2 * 0.7 * 0.5
    # a private contract is the seat's own: after the cases and the seat's line
    assert prompt.index("Cases (public)") < prompt.index("You are Agent 1 of 2")
    assert prompt.index("You are Agent 1 of 2") < prompt.index("Payoff contract (paid to you")


def _own_case(prompt: str) -> re.Match:
    """(number, options, question) of the reader's own case, read as a model would: the seat's
    line names it ("cached" layout) or the case is marked "yours" ("paper" layout)."""
    own = re.search(r"you own Case (\d+)", prompt)
    label = rf"Agent {own[1]}'s" if own else "yours"
    return re.search(rf"Case (\d+) \({label}\): (.*?) \| local question: which option has the "
                     r"(highest|lowest)", prompt)  # fmt: skip


def _text_agent(prompt: str) -> str:
    """A tiny cooperative agent that acts on the prompt text alone."""
    if "Your move (work)" in prompt:
        return "My successor needs the fact.\nACTION QUERY"
    if "Your move (note)" in prompt:
        found = re.search(r"in Case (\d+), option ([A-D]) is unsafe", prompt)
        return f"NOTE CASE {found[1]} UNSAFE {found[2]}" if found else "NO NOTE"
    mine = _own_case(prompt)
    utilities = dict(re.findall(r"([A-D])=(\d+)", mine[2]))
    warned = set(re.findall(rf"NOTE CASE {mine[1]} UNSAFE ([A-D])", prompt))
    best = max((u for u in utilities if u not in warned), key=lambda u: int(utilities[u]))
    return f"Avoiding {sorted(warned)}.\nFINAL {best}"


@pytest.mark.slow
@pytest.mark.parametrize("provenance", ["anonymous", "visible"])
def test_a_game_played_through_text(game3, provenance):
    env = game3.env
    text = env.text_protocol()
    _, state = game3.reset(jax.random.key(5), fixed_config(3, provenance=provenance))
    for _ in range(c.MAX_STEPS):
        parsed = {a: text.parse(_text_agent(text.render(state, a)), state, a) for a in env.agents}
        assert all(p.valid for p in parsed.values())
        state = game3.step(jax.random.key(0), state, {a: p.action for a, p in parsed.items()})[1]
    targets = np.asarray(env.targets(state))
    np.testing.assert_array_equal(np.asarray(state.final_label), targets)


def test_memory_of_earlier_rounds(game2):
    text = game2.env.text_protocol(memory_rounds=1)
    first = states(
        game2, fixed_config(), (QUERY, local(B)), (note(1, C), NO_NOTE), (final(D), final(A))
    )
    text.record_round(first[-1])
    prompt = text.render(first[0], "agent_0")
    assert "Round 1" in prompt and "posted NOTE CASE 2 UNSAFE C" in prompt
    assert "was the target" in prompt and "team success: yes" in prompt
    assert "answered locally (B)" in text.render(first[0], "agent_1")
    text.record_round(first[-1])
    prompt = text.render(first[0], "agent_0")
    assert "Round 2" in prompt and "Round 1" not in prompt  # only the last round is kept
    assert "Round" not in game2.env.text_protocol().render(first[0], "agent_0")
    text.clear_memory()
    assert "Round" not in text.render(first[0], "agent_0")


def test_system_prompt_names_the_ring_and_formats(game3):
    """ "cached" (default): one system prompt for every seat; the seat is named at the start of
    its own part of the user message. "paper": the system prompt names the seat."""
    text = game3.env.text_protocol()
    prompt = text.system_prompt("agent_2")
    assert {text.system_prompt(a) for a in game3.env.agents} == {prompt}
    assert "Agent 1 -> Agent 2 -> Agent 3 -> Agent 1" in prompt and "Agent k owns Case k" in prompt
    assert "which option of your successor's case is unsafe" in prompt
    for fmt in ("ACTION LOCAL <A-D>", "ACTION QUERY", "NOTE CASE <number> UNSAFE <A-D>"):
        assert fmt in prompt
    assert "NO NOTE" in prompt and "FINAL <A-D>" in prompt
    (state,) = states(game3, fixed_config(3))
    user = text.render(state, "agent_2")
    seat = "You are Agent 3 of 3: you own Case 3. Your successor is Agent 1, owner of Case 1."
    assert seat in user and "(yours)" not in user and "Case 3 (Agent 3's): " in user
    # the contract and cases come first, the same for every seat; then the seat's line
    shared = user[: user.index(seat)]
    assert shared.startswith("Payoff contract (one score, shared by the whole team):")
    assert all(text.render(state, a).startswith(shared) for a in game3.env.agents)
    assert user.index(seat) < user.index("=== stage: WORK ===") < user.index("Your move (work)")


def test_paper_layout_keeps_the_papers_order(game3):
    text = game3.env.text_protocol(layout="paper")
    prompt = text.system_prompt("agent_2")
    assert prompt.startswith("You are Agent 3 in a team game of 3 agents seated in a ring:")
    assert "You own Case 3" in prompt and "Agent 1, owner of Case 1" in prompt
    assert "which option of Case 1 is unsafe" in prompt
    (state,) = states(game3, fixed_config(3))
    user = text.render(state, "agent_2")
    assert user.startswith("=== Agent 3 of 3 | stage: WORK ===\n\nPayoff contract")
    assert "Case 3 (yours): " in user and "You are Agent" not in user
    assert user.index("Cases (public)") < user.index("Your move (work)")
    with pytest.raises(ValueError, match="layout must be 'cached' or 'paper', got 'other'"):
        game3.env.text_protocol(layout="other")


# ---------------------------------------------------------------- play interface, lenient parsing
from dilemmax.envs.moral_hazard.reply import lenient_move, rationale_structure_ok, rloo_reward  # noqa: E402
from dilemmax.envs.text import NoReply  # noqa: E402


def _sloppy_model(prompt: str) -> str:
    """A model that knows what it wants but never writes the strict format (Table 2's pattern)."""
    if "Your move (work)" in prompt:
        mine = _own_case(prompt)
        utilities = {k: int(v) for k, v in re.findall(r"([A-D])=(\d+)", mine[2])}
        pick = (max if mine[3] == "highest" else min)(utilities, key=utilities.get)
        return f"I keep my local point.\n**ACTION LOCAL {pick}.**"
    if "Your move (note)" in prompt:
        return "Nothing to add: NO NOTE."
    return "My choice -> FINAL: C"


def _play_through_turns(game, text, keys):
    """Plays episodes through turn / parse_reply; returns (replies asked, valid, local points)."""
    reset = jax.jit(game.env.reset)
    asked = valid = recovered = local_points = 0
    for seed in keys:
        _, state = reset(jax.random.key(seed))
        memories = {a: text.new_memory(a) for a in game.env.agents}
        for _ in range(c.MAX_STEPS):
            actions = {}
            for agent in game.env.agents:
                prompt = text.turn(state, agent, memories[agent])
                if isinstance(prompt, NoReply):
                    actions[agent] = prompt.action
                    continue
                parsed = text.parse_reply(_sloppy_model(prompt.user), prompt)
                asked, valid = asked + 1, valid + parsed.valid
                recovered += parsed.recovered
                actions[agent] = parsed.action
            _, state, _, _, infos = game.step(jax.random.key(0), state, game.actions(
                [actions[a] for a in game.env.agents]))  # fmt: skip
            local_points += int(np.asarray(infos["local_correct"]).sum())
        for agent in game.env.agents:
            text.after_episode(memories[agent], agent, state)
    return asked, valid, recovered, local_points


def test_lenient_extraction_reproduces_a_table_2_row(game2):
    """Low format validity with high local reward (OpenThinker3-7B: 3.8% valid, 98.6% local)."""
    seeds = range(4)
    asked, valid, recovered, local = _play_through_turns(game2, game2.env.text_protocol(), seeds)
    opportunities = len(seeds) * game2.env.num_agents
    assert valid == 0 and recovered == asked  # every work and final reply fails the format
    assert local == opportunities  # ... yet every local answer is read and scores
    strict = game2.env.text_protocol(lenient=False)
    asked, valid, recovered, local = _play_through_turns(game2, strict, seeds)
    assert valid == 0 and recovered == 0 and local == 0  # strict play: the moves are not made


def test_lenient_forms_and_what_is_never_read(game2):
    text = game2.env.text_protocol()
    work, note_stage, at_final = states(
        game2, fixed_config(), (QUERY, local(B)), (NO_NOTE, NO_NOTE)
    )
    for reply, action in {
        "FINAL: C": final(C), "**FINAL C**": final(C), "Final answer: d.": final(D),
        "final\r\nB": final(B),
    }.items():  # fmt: skip
        got = text.parse(reply, at_final, "agent_0")
        assert (got.action, got.valid, got.recovered) == (action, False, True), reply
        assert got.error.startswith("no line of the form")
    got = text.parse("ACTION LOCAL B.", work, "agent_0")
    assert (got.action, got.recovered) == (local(B), True)
    assert text.parse("I choose ACTION QUERY!", work, "agent_0").action == QUERY
    # Not a move: a bare "query", a label that is not A-D, a note without a case.
    for reply in ("I will not query", "LOCAL E", "local option", ""):
        got = text.parse(reply, work, "agent_0")
        assert (got.action, got.recovered) == (c.NO_MOVE, False), reply
    assert text.parse("ACTION LOCAL A\r\n", work, "agent_0").valid  # \r\n is fine strictly
    assert lenient_move("note: case 2 unsafe c", c.NOTE, 0, 2) == note(1, C)
    assert lenient_move("NOTE CASE 9 UNSAFE C", c.NOTE, 0, 2) is None


def test_turn_needs_no_reply_from_seats_without_a_decision(game2):
    text = game2.env.text_protocol()
    work, note_stage, at_final, done = states(
        game2, fixed_config(), (QUERY, local(B)), (NO_NOTE, NO_NOTE), (final(D), final(A))
    )
    memory = text.new_memory("agent_1")
    assert text.turn(note_stage, "agent_1", memory) == NoReply(NO_NOTE)
    assert text.turn(done, "agent_0", memory) == NoReply(c.NO_MOVE)
    prompt = text.turn(note_stage, "agent_0", text.new_memory("agent_0"))
    assert prompt.legal[0] == NO_NOTE and "_state" not in prompt.context
    assert text.parse_reply("NOTE CASE 2 UNSAFE C", prompt).action == note(1, C)
    assert not text.parse_reply("FINAL A", prompt).valid


def test_after_episode_records_rounds_per_seat(game2):
    text = game2.env.text_protocol(memory_rounds=2)
    played = states(
        game2, fixed_config(), (QUERY, local(B)), (note(1, C), NO_NOTE), (final(D), final(A))
    )
    before = text.new_memory("agent_0")
    text.after_episode(text.new_memory("agent_0"), "agent_0", played[-1])
    assert "Round" not in text.turn(played[0], "agent_0", before).user  # memory as of its start
    user = text.turn(played[0], "agent_0", text.new_memory("agent_0")).user
    assert "Round 1 (2 agents): you queried and posted NOTE CASE 2 UNSAFE C" in user
    assert "Round" not in text.turn(played[0], "agent_1", text.new_memory("agent_1")).user


def test_utility_accounting_and_rationale_structure(game2):
    text = game2.env.text_protocol(utility_accounting=True, rationale="steps")
    work, *_ = states(game2, fixed_config(), (QUERY, local(B)))
    prompt = text.render(work, "agent_0")
    assert "Utility accounting" in prompt and "ACTION QUERY: subtracts 0.050" in prompt
    assert "adds 0.175 to the team score" in prompt and "Team success: adds 0.500" in prompt
    assert "FACTS: <" in prompt and "DECISION: <" in prompt
    good = "FACTS: B pays most.\nACCOUNTING: local +0.175.\n**DECISION:** local B\nACTION LOCAL B"
    assert rationale_structure_ok(good) and not rationale_structure_ok("DECISION: x\nFACTS: y")
    parsed = text.parse(good, work, "agent_0")
    assert parsed.valid and parsed.fields["rationale_structure"]
    assert rloo_reward(parsed, good, local(B)) == pytest.approx(1.0)
    assert rloo_reward(parsed, "ACTION LOCAL B", QUERY) == pytest.approx(0.05)
    plain = game2.env.text_protocol().render(work, "agent_0")
    assert "Utility accounting" not in plain and "FACTS:" not in plain


def test_brief_prompts_keep_every_fact_in_a_fraction_of_the_text(game2):
    full = game2.env.text_protocol(utility_accounting=True, rationale="steps")
    brief = game2.env.text_protocol(utility_accounting=True, rationale="steps", brief="true")
    work, note_stage, at_final = states(
        game2, fixed_config(), (QUERY, local(B)), (note(1, C), NO_NOTE)
    )
    for state in (work, note_stage, at_final):
        short = brief.system_prompt("agent_0") + brief.render(state, "agent_0")
        long = full.system_prompt("agent_0") + full.render(state, "agent_0")
        assert len(short) < 0.45 * len(long)
    prompt = brief.render(work, "agent_0")
    # Every utility with its label (best first), both local questions, the accounting numbers.
    assert "Case 1 (yours), best first: B=12 D=9 C=7 A=3 | local: highest" in prompt
    assert "Case 2 (Agent 2's), best first: C=13 A=10 D=5 B=2 | local: lowest" in prompt
    for needle in ("local +0.175", "query -0.050", "final target +0.075", "team success +0.500"):
        assert needle in prompt, needle
    assert "ACTION LOCAL <A-D> or ACTION QUERY" in prompt and "FACTS:" in prompt
    assert "Private" not in prompt and "Board" not in prompt
    querier = brief.render(note_stage, "agent_0")
    assert "Private: in Case 2, option C is unsafe." in querier
    assert "NOTE CASE <number> UNSAFE <A-D> or NO NOTE" in querier and "Board" not in querier
    assert "You answered local B." in brief.render(note_stage, "agent_1")
    board = brief.render(at_final, "agent_1")
    assert "Board (anonymous): NOTE CASE 2 UNSAFE C" in board and "FINAL <A-D>" in board
    assert "You posted NOTE CASE 2 UNSAFE C." in brief.render(at_final, "agent_0")
    # The parser is the same: brief and full prompts accept the same replies.
    reply = "FACTS: x\nACCOUNTING: y\nDECISION: z\nFINAL A"
    assert brief.parse(reply, at_final, "agent_1") == full.parse(reply, at_final, "agent_1")


def test_brief_private_contract_and_option_check(game2):
    brief = game2.env.text_protocol(brief=True)
    (state,) = states(game2, fixed_config(payoff="private", shares=(0.7, 0.3)))
    prompt = brief.render(state, "agent_0")
    assert "Pay (your payoff, share 0.700)" in prompt and "team success +0.700" in prompt
    assert "local +0.350" in prompt and "query -0.100" in prompt
    assert "FACTS" not in prompt  # no step rationale asked for without rationale="steps"
    assert not game2.env.text_protocol(brief="false").brief
    with pytest.raises(ValueError, match="brief must be true or false"):
        game2.env.text_protocol(brief="maybe")
    # Every yes/no option reads text the same way ("maybe" was once taken as true).
    assert not game2.env.text_protocol(utility_accounting="false").utility_accounting
    for flag in ("lenient", "utility_accounting"):
        with pytest.raises(ValueError, match=f"{flag} must be true or false, got 'maybe'"):
            game2.env.text_protocol(**{flag: "maybe"})
