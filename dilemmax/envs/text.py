"""The text interface every game provides: state -> prompt, reply -> action.

A game's ``TextProtocol`` turns what one agent can see into the text a language model reads,
and turns the model's reply back into an integer action of the same ``env.step``. Parsing never
raises on a malformed reply: it returns ``ParsedReply(valid=False, ...)`` and the game's
``invalid_action`` (what the paper does with an invalid reply, usually "the move is not made").
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ParsedReply:
    """A reply turned into an action.

    Attributes:
        action: the integer action to pass to ``env.step`` (the game's invalid action when
            ``valid`` is False).
        valid: whether the reply had the required format and named a legal action.
        error: why it was invalid (empty when valid).
        rationale: any text around the action line, kept for transcripts.
    """

    action: int
    valid: bool
    error: str = ""
    rationale: str = ""


class TextProtocol(abc.ABC):
    """Renderer and parser of one game, for one prompt variant."""

    @abc.abstractmethod
    def render(self, state: Any, agent: str) -> str:
        """The prompt ``agent`` sees in ``state`` (a single, unbatched state)."""

    @abc.abstractmethod
    def parse(self, reply: str, state: Any, agent: str) -> ParsedReply:
        """The action ``reply`` asks for, checked against the legal set in ``state``."""

    def system_prompt(self, agent: str) -> str:
        """Standing instructions for ``agent`` (the rules); empty if the game has none apart."""
        return ""
