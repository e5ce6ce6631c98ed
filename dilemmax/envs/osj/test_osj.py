"""The OpenSocialJax skeleton's own pieces: prompt files, filled system prompts, typed memory."""

from __future__ import annotations

import importlib.resources
import pickle

import jax
import pytest

from dilemmax.envs.open_cleanup import rendering as cleanup_rendering
from dilemmax.envs.open_cleanup.env import OpenCleanupEnv
from dilemmax.envs.open_cleanup.ledger import OpenCleanupMemory, OpenCleanupSighting
from dilemmax.envs.open_harvest import rendering as harvest_rendering
from dilemmax.envs.open_harvest.env import OpenHarvestEnv
from dilemmax.envs.open_harvest.ledger import OpenHarvestMemory, OpenHarvestSighting, Pending
from dilemmax.envs.osj import agent_letter
from dilemmax.envs.osj.blocks import events_line
from dilemmax.envs.osj.memory import EVENTS_KEPT, AgentMemory
from dilemmax.envs.osj.prompts import fill

PACKAGES = {
    "dilemmax.envs.open_cleanup": {
        "system.md", "role_cooperator.md", "role_defector.md", "zap.md", "reveal.md",
    },
    "dilemmax.envs.open_harvest": {
        "system.md", "role_cooperator.md", "role_defector.md", "costly_pay.md",
        "shared_pay_order.md", "reveal.md",
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def cleanup():
    return OpenCleanupEnv(num_layouts=8, num_rules=64, num_agents=3)


@pytest.fixture(scope="module")
def harvest():
    return OpenHarvestEnv(num_layouts=8, num_rules=64, num_agents=3)


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_prompt_files_are_package_data(package):
    folder = importlib.resources.files(package).joinpath("prompts")
    assert {f.name for f in folder.iterdir() if f.name.endswith(".md")} == PACKAGES[package]
    with pytest.raises(KeyError):
        fill(package, "system.md", me="A")  # a field left out is an error, never "${n}"


@pytest.mark.parametrize("layout", ["cached", "paper"])
def test_every_cleanup_variant_fills_every_field(cleanup, layout):
    """ "paper": the system prompt names the agent and holds its role (item 1.5); "cached": it is
    the same for every seat and role, and the seat's turn opens with its letter and role."""
    zap = OpenCleanupEnv(num_layouts=8, num_rules=64, num_agents=3, zap=True)
    for env in (cleanup, zap):
        for role in (None, "cooperator", "defector"):
            protocol = env.text_protocol(role=role, layout=layout)
            system = protocol.system_prompt("agent_2")
            assert "$" not in system and "{{" not in system
            assert ("2.10 ZAP (action 9)" in system) == env.zap
            if layout == "paper":
                assert system.startswith("You are agent C, one of 3 agents (A, B, C)")
                assert ("1.5 YOUR ROLE" in system) == (role is not None)
                continue
            assert system.startswith("You are one of 3 agents (A, B, C) in a grid world")
            assert system == env.text_protocol(layout=layout).system_prompt("agent_0")
            own = protocol.identity("agent_2")
            assert own.startswith("You are agent C.")
            assert ("\n1.5 YOUR ROLE" in own) == (role is not None)


@pytest.mark.parametrize("layout", ["cached", "paper"])
def test_every_harvest_variant_fills_every_field(harvest, layout):
    costly = OpenHarvestEnv(num_layouts=8, num_rules=64, num_agents=3, pay_levels=(2, 0, -1))
    for env in (harvest, costly):
        for role in (None, "cooperator", "defector"):
            protocol = env.text_protocol(role=role, layout=layout)
            system = protocol.system_prompt("agent_1")
            assert "$" not in system and "{{" not in system
            assert ("Some apples COST points" in system) == (env is costly)
            paper = layout == "paper"
            assert ("You are agent B, one of 3 agents (A, B, C)" in system) == paper
            assert ("1.5 YOUR ROLE" in system) == (paper and role is not None)
            if not paper:
                assert system.startswith("You are one of 3 agents (A, B, C) in a grid world.")
                assert ("1.5 YOUR ROLE" in protocol.identity("agent_1")) == (role is not None)
    with pytest.raises(ValueError, match="role"):
        harvest.text_protocol(role="saint")


def test_each_game_keeps_its_own_typed_records(cleanup, harvest):
    memory = cleanup.text_protocol().new_memory("agent_1")
    assert isinstance(memory, OpenCleanupMemory) and memory.index == 1
    assert (
        isinstance(memory.sighting(0), OpenCleanupSighting)
        and memory.sighting(0) is memory.others[0]
    )
    memory.ledger.record(8, 9, 2)
    memory.stats.fired = 3
    memory.clear_trial()
    assert memory.stats.fired == 0 and memory.ledger.effects == {8: {9: {2: 1}}}  # episode-long
    assert pickle.loads(pickle.dumps(memory)) == memory  # plain dataclasses: no lambdas inside

    memory = harvest.text_protocol().new_memory("agent_0")
    assert isinstance(memory, OpenHarvestMemory) and isinstance(
        memory.sighting(2), OpenHarvestSighting
    )
    memory.ledger.paid(0, 1, 2.0)
    memory.ledger.pending[4] = Pending(0, 1, 5, 3, look=5, around_look=3)
    memory.seen.last_seen[4] = (5, False, 0)
    memory.seen.trees.add(4)
    memory.clear_trial()
    assert memory.ledger.pays[(0, 1)].times == 1 and memory.seen.trees == {4}
    assert not memory.ledger.pending and not memory.seen.last_seen
    assert pickle.loads(pickle.dumps(memory)) == memory


def test_one_agent_letter():
    assert cleanup_rendering.agent_letter is agent_letter is harvest_rendering.agent_letter
    assert [agent_letter(i) for i in range(3)] == ["A", "B", "C"]


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["cached", "paper"])
def test_a_turn_is_in_its_layouts_order(cleanup, harvest, layout):
    """ "paper": listing 3's order, the progress line first; "cached": the seat's line, what it
    keeps for the trial, then the progress line and what changes each step."""
    for env in (cleanup, harvest):
        protocol = env.text_protocol(layout=layout, reveal=True)
        _, state = env.reset(jax.random.key(0))
        user = protocol.turn(jax.device_get(state), "agent_1", protocol.new_memory("agent_1")).user
        steps = "\n\nLAST STEP", "\n\nRECENT STEPS", "\n\nNOW\n", "\n\nACTIONS NOW"
        order = ["HIDDEN RULES", "YOUR NOTES", "RULES YOU KNOW", "Trial 1 of ", "OTHER AGENTS",
                 "YOUR PLAN", *steps]  # fmt: skip
        if layout == "paper":
            assert user.startswith("Trial 1 of ") and "You are agent B.\n" not in user
            order = ["Trial 1 of ", "RULES YOU KNOW", "HIDDEN RULES", "YOUR NOTES",
                     "OTHER AGENTS", "YOUR PLAN", *steps]  # fmt: skip
        else:
            assert user.startswith("HIDDEN RULES") and "\n\nYou are agent B.\n\n" in user
        places = [user.index(block) for block in order]
        assert places == sorted(places), order


def test_the_cached_layouts_events_grow_at_the_end_of_their_line():
    """ "cached": the trial's events, shown before the progress line, start from an event that
    moves on 14 at a time, so a new event only adds to the line's end (a prefix cache keeps the
    rest) and the last 14 are always there; "paper": the last 14 (listing 4)."""
    memory = AgentMemory("agent_0", 0)
    lines = []
    for k in range(70):  # more than the memory keeps
        memory.events.append(f"t{k} e{k}.")
        lines.append(events_line(memory, steady=True))
        shown = lines[-1].split(": ", 1)[1].split("; ")
        assert shown[-14:] == [f"t{j} e{j}." for j in range(max(0, k - 13), k + 1)]
    moved = [k for k in range(1, 70) if not lines[k].startswith(lines[k - 1] + "; ")]
    assert moved == [27, 41, 55, 69]
    assert lines[26] == "Earlier events this trial (from event 1 on): " + "; ".join(
        f"t{j} e{j}." for j in range(27)
    )
    assert lines[69] == "Earlier events this trial (from event 57 on): " + "; ".join(
        f"t{j} e{j}." for j in range(56, 70)
    )
    assert len(memory.events) == EVENTS_KEPT and memory.events.total == 70
    assert events_line(memory) == "Earlier events this trial (last 14): " + "; ".join(
        f"t{j} e{j}." for j in range(56, 70)
    )
    assert pickle.loads(pickle.dumps(memory)).events.total == 70
    memory.events.clear()
    assert memory.events.total == 0 and events_line(memory, steady=True) == ""
