"""The Shared Well's text protocol: what a language model reads, and its reply made an action.

A turn shows the round, the stock and capacity, what the agent and the others received last
round and the well's regrowth (never the hidden g). The reply is a line ``TAKE <units>``
(any case, markdown around it ignored; the last such line counts); other lines are the
rationale. A reply without that line, with a number that is not ASCII digits, or asking for
more than 3 or than the well holds, is invalid and asks for nothing (action 0), which is the
env's illegal-move rule too. Parsing is total and linear in the reply
(:mod:`dilemmax.envs.text_parsing`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dilemmax.envs import text_parsing as tp
from dilemmax.envs.text import NoReply, ParsedReply, Prompt, TextProtocol
from dilemmax_commons_plugin.shared_well import constants as c

SYSTEM = """You are one of {n} agents drawing water from one shared well, for {rounds} rounds.
Each round every agent asks for 0 to 3 units and receives them if the requests fit in the well;
if they do not, the well is shared out in proportion to the requests. Whatever remains regrows
before the next round, by at most a fixed amount you are not told, and less when little remains:
an empty well never refills. Each unit you receive is worth one point to you.
Reply with a line of its own: TAKE <units>. Explain your reasoning on other lines if you like."""


class SharedWellText(TextProtocol):
    """Renderer and parser of the Shared Well (``env.text_protocol()``; no options)."""

    def __init__(self, env):
        self.env = env

    def system_prompt(self, agent: str) -> str:
        return SYSTEM.format(n=self.env.num_agents, rounds=self.env.num_rounds)

    def render(self, state, agent: str) -> str:
        i = self.env.agent_index[agent]
        stock, capacity = int(state.stock), int(state.config.capacity)
        takes = np.asarray(state.last_take)
        lines = [
            f"Round {int(state.round) + 1} of {self.env.num_rounds}. "
            f"The well holds {stock} of {capacity} units."
        ]
        if int(state.round) > 0:
            lines.append(
                f"Last round you received {int(takes[i])} units and the other agents "
                f"{int(takes.sum() - takes[i])} in total; the well then regrew by "
                f"{int(state.last_growth)}."
            )
        lines.append(f"Ask for 0 to {min(c.MAX_TAKE, stock)} units: TAKE <units>.")
        return "\n".join(lines)

    def turn(self, state, agent: str, memory: Any) -> Prompt | NoReply:
        stock = int(state.stock)
        if stock == 0 or int(state.round) >= self.env.num_rounds:
            return NoReply(0)
        legal = tuple(range(min(c.MAX_TAKE, stock) + 1))
        return Prompt(self.system_prompt(agent), self.render(state, agent), "act", legal,
                      {"stock": stock})  # fmt: skip

    def example_reply(self, prompt: Prompt, action: int | None, rng: Any = None) -> str:
        return f"I leave enough for the well to regrow.\nTAKE {int(action or 0)}"

    def parse_reply(self, reply: str, prompt: Prompt) -> ParsedReply:
        return self._parse(reply, int(prompt.context.get("stock", 0)))

    def parse(self, reply: str, state, agent: str) -> ParsedReply:
        return self._parse(reply, int(state.stock))

    def _parse(self, reply: Any, stock: int) -> ParsedReply:
        text, _ = tp.clean(reply)
        tokens, line = tp.keyword_line(text, "TAKE")
        rationale = "\n".join(t for k, t in enumerate(text.split("\n")) if k != line).strip()
        if tokens is None:
            return ParsedReply(0, False, "no 'TAKE <units>' line found", rationale)
        written = _after_keyword(text.split("\n")[line])
        units = tp.parse_int(written)
        if units is None:
            return ParsedReply(0, False, f"TAKE {written[:20]!r} is not a number", rationale)
        most = min(c.MAX_TAKE, stock)
        if not 0 <= units <= most:
            return ParsedReply(0, False, f"TAKE {units} is outside 0..{most}", rationale)
        return ParsedReply(units, True, "", rationale)


def _after_keyword(line: str) -> str:
    """The word after TAKE as written (a sign kept, markdown and a final stop dropped):
    ``**TAKE: 2.**`` -> ``2``, ``TAKE -1`` -> ``-1``."""
    after = line[:400].upper().split("TAKE", 1)[1].lstrip(" :*`_#\t")
    return after.split(maxsplit=1)[0].rstrip(".*`_") if after.split() else ""
