"""Protocol options of the grid games: ``reveal`` (the hidden rules told from the start) and
``role``, each an ordinary option of one protocol instance (a harness builds one per seat's
option set). The checks both games share, no tests of their own: each game's
``test_options.py`` runs them on its own session fixtures (so no state is built twice)."""

from __future__ import annotations

import pytest

from dilemmax.envs.osj.prompts import prompt_text


def turn_of(env, state, agent="agent_1", **options):
    """The first turn of ``agent`` under a fresh protocol with ``options``."""
    protocol = env.text_protocol(**options)
    return protocol.turn(state, agent, protocol.new_memory(agent))


def hidden_block(user: str) -> str:
    """The HIDDEN RULES block of a turn (after RULES YOU KNOW)."""
    assert user.index("RULES YOU KNOW") < user.index("HIDDEN RULES")
    return user.split("HIDDEN RULES", 1)[1].split("\n\n", 1)[0]


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
    for role in ("cooperator", "defector"):
        system = env.text_protocol(role=role).system_prompt("agent_2")
        item = prompt_text(package, f"role_{role}.md")
        assert item.startswith("1.5 YOUR ROLE:")
        # Item 1.5 is its own line right after 1.4; nothing else of the prompt changes.
        assert system == plain.replace("\n\n2. THE WORLD", f"\n{item}\n\n2. THE WORLD")
        both = env.text_protocol(role=role, reveal=True).system_prompt("agent_2")
        assert both.index("1.4 ") < both.index(item) < both.index("1.6 ") < both.index("2. ")
    # Two instances of one env keep their own roles (a harness builds one per seat).
    cooperator = env.text_protocol(role="cooperator")
    defector = env.text_protocol(role="defector")
    assert "group's total" in cooperator.system_prompt("agent_0")
    assert "group's total" not in defector.system_prompt("agent_0")
    assert turn_of(env, state, role="cooperator").user == turn_of(env, state).user
