"""Every game's reply parser is total and linear on hostile replies (issue #11).

A language model's reply is untrusted input. For each game, the exact replies that used to
crash or stall a parser (5,000-digit numbers, superscript digits, deep JSON, long runs of spaces
after a keyword, ``\\r\\n`` line ends) and Hypothesis-generated replies must come back as a
``ParsedReply`` quickly: valid only with a legal action, never an exception.
"""

from __future__ import annotations

import time

import jax
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dilemmax.envs import text_parsing as tp
from dilemmax.envs.consequence.env import ConsequenceEnv
from dilemmax.envs.consequence.generator import make_config as consequence_config
from dilemmax.envs.moral_hazard import constants as mh
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.open_cleanup.env import OpenCleanupEnv
from dilemmax.envs.open_harvest.env import OpenHarvestEnv
from dilemmax.envs.text import ParsedReply, Prompt

TIME_BOUND_S = 0.2  # linear parsers take milliseconds; the old regexes took 18-134 s
BIG = 100_000

HOSTILE = {
    "5000 digits": "9" * 5000,
    "5000-digit action": "ACTION " + "9" * 5000,
    "5000-digit json": '{"action": ' + "9" * 5000 + "}",
    "5000-digit contribution": "CONTRIBUTION: " + "9" * 5000,
    "5000-digit note case": "NOTE CASE " + "9" * 5000 + " UNSAFE A",
    "superscript json": '{"action": "³"}',
    "superscript bare": "³",
    "superscript line": "ACTION ³\nCONTRIBUTION: ³\nVOTE: ³\nFINAL ³",
    "deep json": '{"a": ' * 50_000 + "1" + "}" * 50_000,
    "deep list": '{"action": ' + "[" * 50_000 + "]" * 50_000 + "}",
    "ACTION spaces": "ACTION" + " " * 5000 + "?",
    "vote spaces": "vote" + " " * 5000 + "!",
    "contribution spaces": "contribution" + " " * 5000 + "!",
    "FINAL spaces": "FINAL" + " " * 5000 + "?",
    "NOTE spaces": "NOTE CASE" + " " * 5000 + "UNSAFE",
    "100 kB of ACTION": "ACTION " * (BIG // 7),
    "100 kB of braces": "{" * BIG,
    "100 kB of quotes": '{"' + '"' * BIG,
    "100 kB of spaces then a move": " " * BIG + "ACTION 7",
    "many short objects": '{"x": 1} ' * (BIG // 9),
    "crlf": "reasoning\r\nACTION LOCAL A\r\nFINAL B\r\nCONTRIBUTION: 1\r\n",
    "nan json": '{"action": NaN}',
    "empty": "",
    "none": None,
    "int": 42,
    "bytes": b"ACTION 1",
}


def _timed(parse, reply):
    best, result = float("inf"), None
    for _ in range(2):  # the best of two: a loaded machine only ever adds time
        start = time.perf_counter()
        result = parse(reply)
        best = min(best, time.perf_counter() - start)
    return result, best


def _check(parsed, prompt: Prompt):
    assert isinstance(parsed, ParsedReply)
    assert isinstance(parsed.action, int) and isinstance(parsed.error, str)
    if parsed.valid:
        assert parsed.action in prompt.legal and not parsed.error and not parsed.recovered
    else:
        assert parsed.error
    if parsed.recovered:
        assert parsed.action in prompt.legal


# ----------------------------------------------------------------------------- one prompt per case
def _moral_hazard_cases():
    env = MoralHazardEnv(2)
    step = jax.jit(env.step_env)
    _, state = jax.jit(env.reset)(jax.random.key(0))
    text = env.text_protocol()
    cases = {}
    for stage_actions in ((mh.QUERY, mh.QUERY), (mh.NO_NOTE, mh.NO_NOTE), None):
        cases[f"moral_hazard/{mh.STAGE_NAMES[int(state.stage)]}"] = (
            text,
            text.turn(state, "agent_0", text.new_memory("agent_0")),
            state,
            "agent_0",
        )
        if stage_actions is not None:
            actions = {a: v for a, v in zip(env.agents, stage_actions, strict=True)}
            state = step(jax.random.key(1), state, actions)[1]
    return cases


def _consequence_cases():
    env = ConsequenceEnv(sorted_agents=True)
    _, state = jax.jit(env.reset_to)(jax.random.key(0), consequence_config((2, 4, 6), 12, "DV"))
    text = env.text_protocol()
    cases = {"consequence/contribute": (text, text.turn(state, "agent_1", None), state, "agent_1")}
    state = jax.jit(env.step_env)(jax.random.key(1), state, {a: 0 for a in env.agents})[1]
    cases["consequence/vote"] = (text, text.turn(state, "agent_1", None), state, "agent_1")
    return cases


def _grid_case(name, env):
    _, state = jax.jit(env.reset)(jax.random.key(0))
    text = env.text_protocol()
    return {name: (text, text.turn(state, "agent_0", text.new_memory("agent_0")), state, "agent_0")}


@pytest.fixture(scope="module")
def cases():
    found = {}
    found.update(_moral_hazard_cases())
    found.update(_consequence_cases())
    found.update(_grid_case("open_cleanup", OpenCleanupEnv(num_layouts=8, num_rules=64)))
    found.update(_grid_case("open_harvest", OpenHarvestEnv(num_layouts=8, num_rules=64)))
    for _, prompt, _, _ in found.values():
        assert isinstance(prompt, Prompt)
    return found


CASE_NAMES = (
    "moral_hazard/work", "moral_hazard/note", "moral_hazard/final",
    "consequence/contribute", "consequence/vote", "open_cleanup", "open_harvest",
)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("case", CASE_NAMES)
def test_hostile_replies_parse_fast_and_never_raise(cases, case):
    text, prompt, state, agent = cases[case]
    slow = {}
    for name, reply in HOSTILE.items():
        parsed, seconds = _timed(lambda r: text.parse_reply(r, prompt), reply)
        _check(parsed, prompt)
        stateless, more = _timed(lambda r: text.parse(r, state, agent), reply)
        assert isinstance(stateless, ParsedReply)
        if max(seconds, more) > TIME_BOUND_S:
            slow[name] = round(max(seconds, more), 3)
        if "superscript" in name or "digit" in name or "deep" in name:
            assert not parsed.valid, name
    assert not slow, f"slower than {TIME_BOUND_S} s: {slow}"


def test_crlf_endings_are_read_as_line_ends(cases):
    crlf = {
        "moral_hazard/work": "I keep my point.\r\nACTION LOCAL A\r\n",
        "moral_hazard/final": "FINAL B\r\n",
        "consequence/contribute": "Some reasoning.\r\nCONTRIBUTION: 1\r\n",
        "consequence/vote": "VOTE: A\r\n",
        "open_cleanup": '{\r\n  "action": 7\r\n}\r\n',
        "open_harvest": "I wait.\r\nACTION stay\r\n",
    }
    for case, reply in crlf.items():
        text, prompt, _, _ = cases[case]
        parsed = text.parse_reply(reply, prompt)
        assert parsed.valid and not parsed.recovered, (case, parsed)


FRAGMENTS = (
    "ACTION", "LOCAL", "QUERY", "FINAL", "NOTE", "NO NOTE", "CASE", "UNSAFE", "VOTE", "vote",
    "CONTRIBUTION", "contribution:", "stay", "fire", "pick up", "turn left", "A", "B", "C", "D",
    " ", "  ", "\n", "\r\n", ":", "=", "*", "**", "#", "-", ".", "{", "}", "[", "]", '"',
    '"action":', '"mode": "explore"', '"note": {"op": "add", "id": 1, "text": "x"}',
    "```json", "```", "0", "1", "2", "7", "12", "9" * 30, "³", "١", "\x00", "é", "agent_1",
)  # fmt: skip
REPLIES = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=6)), max_size=40).map(
    "".join
)


@pytest.mark.parametrize("case", CASE_NAMES)
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(reply=REPLIES)
def test_fuzzed_replies_are_total(cases, case, reply):
    text, prompt, _, _ = cases[case]
    _check(text.parse_reply(reply, prompt), prompt)


# ----------------------------------------------------------------------------- the toolkit
def test_toolkit_primitives():
    assert tp.parse_int("42") == 42 and tp.parse_int("-3") == -3 and tp.parse_int(" 7 ") == 7
    for bad in ("³", "١", "１", "9" * 10, "", "-", "4.0", True, None, 3.0):
        assert tp.parse_int(bad) is None, bad
    assert tp.find_json_object('x {"a": {"b": 1}} y {"c": 2}') == ({"c": 2}, "")
    assert tp.find_json_object('{"a": "}{"} tail')[0] == {"a": "}{"}
    assert tp.find_json_object('I think {maybe.\n{"action": 3}')[0] == {"action": 3}
    assert tp.find_json_object('{"why": "cut off... {"action": 2}')[0] == {"action": 2}
    deep, error = tp.find_json_object('{"a": ' * 20 + "1" + "}" * 20)
    assert deep is None and "deeper" in error
    huge, _ = tp.find_json_object('{"action": ' + "9" * 50 + "}")
    assert huge == {"action": None}
    assert tp.clean("a\r\nb\rc") == ("a\nb\nc", False)
    assert tp.clean("x" * 10, cap=4) == ("xxxx", True) and tp.clean(None) == ("", False)
    assert tp.keyword_line("**ACTION:** turn left\nmore", "ACTION") == (["TURN", "LEFT"], 0)
    assert tp.as_action("Turn-Left", {"TURNLEFT": 4}, 8) == (4, "")
    assert tp.as_action(2.0, {}, 8) == (2, "") and tp.as_action(True, {}, 8)[0] is None
    assert tp.guarded(lambda: 1 / 0, lambda why: why)().startswith("parser error: ZeroDivision")


NOTE_EDITS = st.fixed_dictionaries(
    {
        "op": st.sampled_from(["none", "add", "replace", "delete", "rename", 3]),
        "id": st.one_of(st.integers(-3, 60), st.text(max_size=4), st.none()),
        "text": st.one_of(st.text(max_size=400), st.integers()),
    }
)


@pytest.mark.parametrize("case", ["open_cleanup", "open_harvest"])
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(edits=st.lists(NOTE_EDITS, max_size=60), cells=st.lists(st.lists(st.integers(), max_size=3)))
def test_fuzzed_note_edits_and_goals_keep_memory_bounded(cases, case, edits, cells):
    import json

    text, prompt, _, agent = cases[case]
    memory = text.new_memory(agent)
    for k, note in enumerate(edits):
        goal = {"type": "move_to", "cell": cells[k % len(cells)] if cells else [1, 2], "why": "x"}
        reply = json.dumps({"mode": "explore", "goal": goal, "note": note, "action": 7})
        parsed = text.parse_reply(reply, prompt)
        _check(parsed, prompt)
        text.after_reply(memory, agent, prompt, reply, parsed)
    assert len(memory.notes) <= 40 and all(len(v) <= 320 for v in memory.notes.values())
    assert len(memory.goals) <= 6
