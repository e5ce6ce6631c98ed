"""GEPA glue without a model: per-stage instructions reach the prompt, the parser is unchanged,
the reflection trace is recorded, and the episode splits are disjoint."""

from __future__ import annotations

from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.finetune.gepa import GEPASettings, InstructedProtocol, episode_splits
from dilemmax.finetune.test_rewards import STEPS, state_at


def test_instructions_are_appended_per_stage_and_parsing_is_unchanged():
    base = MoralHazardEnv(2).text_protocol()
    protocol = InstructedProtocol(base, {"work": "WORK HINT", "final": "FINAL HINT"})
    memory = protocol.new_memory("agent_0")
    plain = base.turn(state_at(c.WORK), "agent_0", base.new_memory("agent_0"))
    work = protocol.turn(state_at(c.WORK), "agent_0", memory)
    assert work.user == plain.user + "\n\nWORK HINT"
    assert work.system == plain.system
    final = protocol.turn(state_at(c.FINAL), "agent_0", memory)
    assert final.user.endswith("FINAL HINT")
    parsed = protocol.parse_reply(STEPS + "FINAL D", final)
    assert parsed == base.parse_reply(
        STEPS + "FINAL D", base.turn(state_at(c.FINAL), "agent_0", None)
    )
    protocol.after_reply(memory, "agent_0", final, "FINAL D", parsed)
    protocol.after_episode(memory, "agent_0", state_at(c.DONE))
    assert protocol.finished == [
        {
            "agent": "agent_0",
            "trace": [{"stage": "final", "reply": "FINAL D", "valid": True, "error": ""}],
        }
    ]


def test_episode_splits_are_disjoint_and_sized():
    splits = episode_splits(GEPASettings(model="m", out="o"))
    assert [len(splits[k]) for k in ("train", "validation", "test")] == [64, 32, 64]
    assert len(set().union(*map(set, splits.values()))) == 160
    assert splits == episode_splits(GEPASettings(model="m", out="o"))
