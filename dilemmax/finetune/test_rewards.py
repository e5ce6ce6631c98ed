"""Each part of the RLOO reward on hand-written replies, with exact values, on hand-built states."""

from __future__ import annotations

import numpy as np
import pytest

from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.moral_hazard.generator import make_config
from dilemmax.envs.moral_hazard.types import MoralHazardState
from dilemmax.finetune.datasets import encode_context
from dilemmax.finetune.rationale import LabelledRationale
from dilemmax.finetune.rewards import (
    check_records,
    format_reward,
    rationale_reward,
    target_reward,
    total_reward,
    trl_reward_functions,
)

# Case 1: A=3 B=12 C=7 D=9, Case 2: A=10 B=2 C=13 D=5; unsafe (highest) B and C; targets D, A.
CONFIG = make_config(2, utilities=((3, 12, 7, 9), (10, 2, 13, 5)), questions=("highest", "lowest"))
STEPS = "FACTS: B is warned.\nACCOUNTING: D=9 is the best safe option.\nDECISION: I pick D.\n"


def state_at(stage: int) -> MoralHazardState:
    """Both agents queried; at the final stage both posted the correct warning."""
    posted = stage >= c.FINAL
    return MoralHazardState(
        config=CONFIG,
        stage=np.int32(stage),
        chose_local=np.zeros(2, bool),
        local_label=np.full(2, -1, np.int32),
        queried=np.full(2, stage > c.WORK),
        note_case=np.array([1, 0] if posted else [-1, -1], np.int32),
        note_option=np.array([2, 1] if posted else [-1, -1], np.int32),
        final_label=np.full(2, -1, np.int32),
    )


@pytest.fixture(scope="module")
def protocol():
    return MoralHazardEnv(2).text_protocol()


def prompt_for(protocol, stage, agent="agent_0"):
    return protocol.turn(state_at(stage), agent, protocol.new_memory(agent))


FINAL_D = c.FINAL_BASE + 3  # agent 1's target: D (9), since B (12) is unsafe


@pytest.mark.parametrize(
    ("reply", "parts"),
    [
        (STEPS + "FINAL D", (0.05, 0.10, 0.85)),  # everything right
        (STEPS + "final d", (0.05, 0.10, 0.85)),  # case-insensitive move line
        (STEPS + "FINAL B", (0.05, 0.10, 0.0)),  # wrong target (the unsafe option)
        ("FINAL D", (0.05, 0.0, 0.85)),  # missing rationale
        ("I think D is best.\nFINAL D", (0.05, 0.0, 0.85)),  # free text is not the structure
        (STEPS + "I choose D", (0.0, 0.10, 0.0)),  # malformed: no move line
        ("FACTS: a\nDECISION: b\nACCOUNTING: c\nFINAL D", (0.05, 0.0, 0.85)),  # out of order
        ("FACTS: a\nACCOUNTING:\nDECISION: c\nFINAL D", (0.05, 0.0, 0.85)),  # an empty line
        ("FACTS: a\nDECISION: c\nFINAL D", (0.05, 0.0, 0.85)),  # a label missing
        (STEPS + "FINAL D\nFINAL A", (0.0, 0.10, 0.0)),  # conflicting move lines: no move
        (STEPS + "ACTION QUERY", (0.0, 0.10, 0.0)),  # a move of another stage
        ("", (0.0, 0.0, 0.0)),
    ],
)
def test_parts_at_the_final_stage(protocol, reply, parts):
    prompt = prompt_for(protocol, c.FINAL)
    got = (
        format_reward(protocol, reply, prompt),
        rationale_reward(protocol, reply, prompt),
        target_reward(protocol, reply, prompt, FINAL_D),
    )
    assert got == parts
    assert total_reward(protocol, reply, prompt, FINAL_D) == pytest.approx(sum(parts))


@pytest.mark.parametrize(
    ("stage", "reply", "target", "parts"),
    [
        (c.WORK, STEPS + "ACTION QUERY", c.QUERY, (0.05, 0.10, 0.85)),
        (c.WORK, STEPS + "ACTION LOCAL B", c.QUERY, (0.05, 0.10, 0.0)),
        (c.WORK, "ACTION LOCAL Z", c.QUERY, (0.0, 0.0, 0.0)),
        (c.NOTE, STEPS + "NOTE CASE 2 UNSAFE C", c.note_action(1, 2), (0.05, 0.10, 0.85)),
        (c.NOTE, "NOTE CASE 1 UNSAFE C", c.note_action(1, 2), (0.05, 0.0, 0.0)),  # own case
        (c.NOTE, STEPS + "NOTE CASE 7 UNSAFE C", c.note_action(1, 2), (0.0, 0.10, 0.0)),
        (c.NOTE, "Note: case 2 unsafe C", c.note_action(1, 2), (0.0, 0.0, 0.0)),  # not strict
        (c.NOTE, "NO NOTE", c.note_action(1, 2), (0.05, 0.0, 0.0)),
    ],
)
def test_parts_at_work_and_note(protocol, stage, reply, target, parts):
    prompt = prompt_for(protocol, stage)
    got = (
        format_reward(protocol, reply, prompt),
        rationale_reward(protocol, reply, prompt),
        target_reward(protocol, reply, prompt, target),
    )
    assert got == parts


def test_trl_reward_functions_read_dataset_columns(protocol):
    prompt = prompt_for(protocol, c.FINAL)
    completions = [
        [{"role": "assistant", "content": STEPS + "FINAL D"}],
        [{"role": "assistant", "content": "FINAL A"}],
        None,  # not a completion at all
    ]
    columns = {
        "context": [encode_context(prompt.context)] * 3,
        "legal": [list(prompt.legal)] * 3,
        "num_agents": [2] * 3,
        "protocol": ["{}"] * 3,
        "target": [FINAL_D] * 3,
    }
    parts = [fn(completions, **columns) for fn in trl_reward_functions()]
    assert [fn.__name__ for fn in trl_reward_functions()] == [
        "format_reward",
        "rationale_reward",
        "target_reward",
    ]
    assert parts == [[0.05, 0.05, 0.0], [0.10, 0.0, 0.0], [0.85, 0.0, 0.0]]


def test_labelled_rationale_write_and_check():
    structure = LabelledRationale()
    reply = structure.write(["one", "two\nlines", "three"], "FINAL A")
    assert reply == "FACTS: one\nACCOUNTING: two lines\nDECISION: three\nFINAL A"
    assert structure.check(reply)
    assert structure.check("**FACTS:** a\n# ACCOUNTING: b\ndecision: c")  # markup, case
    assert not structure.check("FACTS: a\nACCOUNTING: b")
    assert not structure.check(None)
    assert not structure.check(b"FACTS: a")
    with pytest.raises(ValueError, match="expected 3 steps"):
        structure.write(["one"], "FINAL A")


def test_check_records_refuses_a_dataset_of_another_protocol(protocol):
    prompt = prompt_for(protocol, c.FINAL)
    record = {
        "completion": [{"role": "assistant", "content": STEPS + "FINAL D"}],
        "context": encode_context(prompt.context),
        "legal": list(prompt.legal),
        "num_agents": 2,
        "target": FINAL_D,
        "protocol": "{}",
    }
    check_records([record])  # the full reward: accepted
    stale = {**record, "context": "{}"}  # a context this protocol cannot parse with
    with pytest.raises(ValueError, match="another protocol version"):
        check_records([stale])
