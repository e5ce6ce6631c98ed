"""Protocol options of the grid games: ``reveal`` (the hidden rules told from the start) and
``role``, each an ordinary option of one protocol instance (a harness builds one per seat's
option set). The checks both games share, no tests of their own: each game's
``test_options.py`` runs them on its own session fixtures (so no state is built twice)."""

from __future__ import annotations

import pytest

from dilemmax.envs.osj.prompts import prompt_text
from dilemmax.envs.osj.view import agent_letter


def turn_of(env, state, agent="agent_1", **options):
    """The first turn of ``agent`` under a fresh protocol with ``options``."""
    protocol = env.text_protocol(**options)
    return protocol.turn(state, agent, protocol.new_memory(agent))


def hidden_block(env, state, agent="agent_1") -> str:
    """The HIDDEN RULES block of ``agent``'s first turn with the rules revealed. The "cached"
    layout puts it first, before the seat's own line and RULES YOU KNOW; the paper's layout
    puts the same block after RULES YOU KNOW."""
    cached = turn_of(env, state, agent, reveal=True).user
    letter = agent_letter(env.agent_index[agent])
    assert cached.startswith("HIDDEN RULES")
    assert cached.index(f"You are agent {letter}.") < cached.index("RULES YOU KNOW")
    block = cached.split("HIDDEN RULES", 1)[1].split("\n\n", 1)[0]
    paper = turn_of(env, state, agent, reveal=True, layout="paper").user
    assert paper.index("RULES YOU KNOW") < paper.index("HIDDEN RULES")
    assert paper.split("HIDDEN RULES", 1)[1].split("\n\n", 1)[0] == block
    return block


def check_reveal_is_off_by_default(env, state) -> None:
    plain, off = turn_of(env, state), turn_of(env, state, reveal=False)
    assert plain == off
    assert "HIDDEN RULES" not in plain.user and "\n1.6 " not in plain.system
    on = turn_of(env, state, reveal=True)
    assert prompt_text(env.text_protocol().package, "reveal.md") in on.system
    assert on.system == plain.system.replace(
        "\n\n2. THE WORLD", "\n" + prompt_text(env.text_protocol().package, "reveal.md")
        + "\n\n2. THE WORLD"
    )  # fmt: skip
    with pytest.raises(ValueError, match="reveal must be true or false"):
        env.text_protocol(reveal="yes")


def check_roles_are_options_of_one_instance(env, state) -> None:
    package = env.text_protocol().package
    plain = env.text_protocol().system_prompt("agent_2")
    paper = env.text_protocol(layout="paper").system_prompt("agent_2")
    plain_turn = turn_of(env, state, "agent_2").user
    assert plain_turn.count("You are agent C.") == 1
    for role in ("cooperator", "defector"):
        item = prompt_text(package, f"role_{role}.md")
        assert item.startswith("1.5 YOUR ROLE:")
        # "cached": the role is the seat's own, so it follows the seat's line in its turn and
        # leaves the shared system prompt as it is.
        assert env.text_protocol(role=role).system_prompt("agent_2") == plain
        turn = turn_of(env, state, "agent_2", role=role).user
        assert turn == plain_turn.replace("You are agent C.", f"You are agent C.\n{item}")
        both = turn_of(env, state, "agent_2", role=role, reveal=True).user
        assert both.index("HIDDEN RULES") < both.index("You are agent C.\n" + item)
        assert both.index(item) < both.index("RULES YOU KNOW")
        # "paper": item 1.5 is its own line right after 1.4; nothing else of the prompt changes.
        system = env.text_protocol(role=role, layout="paper").system_prompt("agent_2")
        assert system == paper.replace("\n\n2. THE WORLD", f"\n{item}\n\n2. THE WORLD")
        both = env.text_protocol(role=role, reveal=True, layout="paper").system_prompt("agent_2")
        assert both.index("1.4 ") < both.index(item) < both.index("1.6 ") < both.index("2. ")
    # Two instances of one env keep their own roles (a harness builds one per seat).
    assert "group's total" in turn_of(env, state, "agent_0", role="cooperator").user
    assert "group's total" not in turn_of(env, state, "agent_0", role="defector").user
    cooperator = env.text_protocol(role="cooperator", layout="paper")
    defector = env.text_protocol(role="defector", layout="paper")
    assert "group's total" in cooperator.system_prompt("agent_0")
    assert "group's total" not in defector.system_prompt("agent_0")
    paper_turn = turn_of(env, state, role="cooperator", layout="paper").user
    assert paper_turn == turn_of(env, state, layout="paper").user
