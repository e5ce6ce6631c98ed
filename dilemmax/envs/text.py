"""The text interface every game provides: state -> prompt, reply -> action.

A game's ``TextProtocol`` turns what one agent can see into the text a language model reads,
and turns the model's reply back into an integer action of the same ``env.step``. Parsing never
raises on a malformed reply: it returns ``ParsedReply(valid=False, ...)`` and the game's
``invalid_action`` (what the paper does with an invalid reply, usually "the move is not made").

Two layers:

- ``render`` / ``parse`` (stateless, on one unbatched env state): what ``observation.text()``
  shows a policy in the arena, and the reference parser.
- the play interface (``new_memory``, ``turn``, ``parse_reply``, ``after_reply``,
  ``after_step``, ``after_episode``): what the language-model harness (:mod:`dilemmax.llm`)
  drives. It carries the per-agent memory each paper's protocol keeps (notes, rules ledger,
  earlier trials, earlier rounds) and hands the parser only what it needs, in a :class:`Prompt`,
  never the env state. A harness that uses only this interface plays every game.

Every parser is total and linear in the reply; the building blocks (length cap, ASCII-only
integers, bounded JSON extraction, keyword lines) are in :mod:`dilemmax.envs.text_parsing`. The
OpenSocialJax agent protocol both grid games share (notes, plan, recent steps, trial-end
reflection, the JSON reply, ``explore_share``) is the :mod:`dilemmax.envs.osj` package.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

LAYOUTS = ("cached", "paper")


def check_layout(layout: Any) -> str:
    """A protocol's ``layout`` option, checked: ``"cached"`` (the default: what every call of a
    run shares first, then what a seat keeps for an episode or a trial, last what changes each
    step, so a prefix-caching server reuses the most) or ``"paper"`` (the order of the paper's
    prompt, as before protocol version 1)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be 'cached' or 'paper', got {layout!r}")
    return layout


@dataclass(frozen=True)
class ParsedReply:
    """A reply turned into an action.

    Attributes:
        action: the integer action to pass to ``env.step`` (the game's invalid action when
            ``valid`` is False and nothing could be recovered).
        valid: whether the reply had the required format and named a legal action (strict
            format validity, as the papers count it).
        error: why it was invalid (empty when valid).
        rationale: any text around the action line, kept for transcripts.
        recovered: True when ``valid`` is False but the intended move was still read out of the
            reply by the game's documented lenient extraction; ``action`` is then that move.
        fields: anything else the protocol read from the reply (a JSON reply's mode, goal, note
            edits, a written lesson); plain Python values, kept in transcripts.
    """

    action: int
    valid: bool
    error: str = ""
    rationale: str = ""
    recovered: bool = False
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Prompt:
    """One request to a language-model seat.

    Attributes:
        system: the standing instructions (the system message).
        user: the turn's text (the user message).
        kind: ``"act"``: the reply is parsed into this step's action; ``"reflect"``: a free-text
            reply kept in the agent's memory (a trial-end lesson), which plays no action.
        legal: the legal actions now (for the parser and the transcript).
        context: whatever ``parse_reply`` needs, as plain Python values (never the env state).
        json_schema: a JSON schema of the reply where the protocol asks for JSON, so a server
            that supports structured output can be asked for it; None otherwise.
    """

    system: str
    user: str
    kind: str = "act"
    legal: tuple[int, ...] = ()
    context: Mapping[str, Any] = field(default_factory=dict)
    json_schema: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class NoReply:
    """A seat that needs no reply this step (a frozen agent, a non-querier at the note stage):
    the harness plays ``action`` without calling the model."""

    action: int


class TextProtocol(abc.ABC):
    """Renderer and parser of one game, for one prompt variant.

    ``protocol_version`` counts changes of the prompts' text or order that leave the game as it
    was (docs/versions.md): a transcript records it, and ``--resume`` refuses a transcript made
    under another one, as its replies answer other prompts. The game's own version moves only for
    what an agent learns from.
    """

    protocol_version: ClassVar[int] = 0

    @abc.abstractmethod
    def render(self, state: Any, agent: str) -> str:
        """The prompt ``agent`` sees in ``state`` (a single, unbatched state)."""

    @abc.abstractmethod
    def parse(self, reply: str, state: Any, agent: str) -> ParsedReply:
        """The action ``reply`` asks for, checked against the legal set in ``state``."""

    def system_prompt(self, agent: str) -> str:
        """Standing instructions for ``agent`` (the rules); empty if the game has none apart."""
        return ""

    # ------------------------------------------------------------------ the play interface
    def new_memory(self, agent: str) -> Any:
        """A fresh per-agent memory for one episode (None for games that keep none)."""
        return None

    def next_memory(self, memory: Any, agent: str) -> Any:
        """The memory ``agent`` starts its next episode with, given the one it ended with
        (after ``after_episode``). Default: a fresh one; a protocol that recalls earlier rounds
        returns one that keeps them."""
        return self.new_memory(agent)

    def turn(self, state: Any, agent: str, memory: Any) -> Prompt | NoReply:
        """What ``agent`` is asked in ``state`` (single, unbatched), given its memory.

        Default: the stateless ``render``; the state travels in ``context`` only for this default
        parser. Games override it so the context holds plain values.
        """
        return Prompt(self.system_prompt(agent), self.render(state, agent),
                      context={"_state": state, "_agent": agent})  # fmt: skip

    def example_reply(self, prompt: Prompt, action: int | None, rng: Any = None) -> str:
        """A well-formed reply to ``prompt`` that plays ``action`` (None: a prompt that plays no
        action, such as a reflection), of a typical length: the stand-in reply of cost estimates
        and benchmarks (:mod:`dilemmax.envs.text_sample`). ``rng``: a numpy Generator, for
        protocols whose replies vary."""
        return str(action)

    def parse_reply(self, reply: str, prompt: Prompt) -> ParsedReply:
        """The action a reply to ``prompt`` asks for. Total: never raises, linear time."""
        return self.parse(reply, prompt.context["_state"], prompt.context["_agent"])

    def after_reply(
        self, memory: Any, agent: str, prompt: Prompt, reply: str, parsed: ParsedReply
    ) -> None:
        """Updates ``memory`` with the agent's own reply (note edits, a plan, a lesson)."""
        return None

    def after_step(
        self, memory: Any, agent: str, state: Any, actions: Any, infos: Any, next_state: Any
    ) -> list[Prompt]:
        """Updates ``memory`` with what ``agent`` observed in one transition (single states,
        numpy or jax leaves; ``infos`` of that transition). Returns prompts the harness must send
        before the agent's next turn (``kind="reflect"``, such as a trial-end lesson); each reply
        goes back through ``after_reply``."""
        return []

    def after_episode(self, memory: Any, agent: str, final_state: Any) -> None:
        """Called once per agent at the end of an episode (a protocol that remembers earlier
        rounds across episodes records them here)."""
        return None
