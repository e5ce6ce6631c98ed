"""What a language model reads and writes in the consequence game.

The prompt carries the same information as the paper's protocol (Sections 3, 5.3, 12): the
rules with the one clause that states the consequence rule, the agent's goal, its own and the
others' remaining resources, the fund, the threshold, the round, and the history of earlier
rounds. Participants go by letters (A, B, C, ...) in ``env.agents`` order.

Prompt variants: the paper's three prompt-only interventions (Sections 5.3 and 12), one flag
each, combinable; only the rule clause, the goal line and, for ``neutral``, the vocabulary move:

* ``anonymous`` (anonymization): the sentence naming the RP / PP loss bearer ("the poorest" /
  "the richest") is gone, so the RP and PP prompts are byte-identical (AON, RE and DV name no
  bearer and read the same either way);
* ``neutral`` (neutral wording): the same information without charged labels ("leaves the game"
  for "is eliminated", "holding the fewest units" for "the poorest");
* ``goal`` (frame swap): "competitive" (the paper's baseline: stay in and end richest),
  "cooperative" (the group reaches the target with everyone still in) or "survival" (still be
  in the game at the end);
* ``ask_rationale``: ask for reasoning before the move line (the paper auto-labels rationales).

``clause`` is the older single switch: "named" (no flag), "anonymous" or "neutral".

Layouts (``layout``; docs/experiments.md, "Prompt layouts"): ``"paper"`` is the order of the
paper's prompt: who the agent is, its goal, the rules, the state of the round, the history, the
move asked for. ``"cached"`` (the default) says the same in the order a prefix cache reuses: the
group, the goal, the rules and the history every participant reads alike, then ``You are
participant X.`` and the state of the round as the agent sees it, then the move asked for.

Replies end with ``CONTRIBUTION: <n>`` or, in a DV vote phase, ``VOTE: <letter>``. A reply
without a readable, legal line is invalid and becomes the no-op: a contribution of 0, or an
abstention in a vote (action ``num_agents``, which the env counts as no vote). The parser is
total and linear: it scans for the keyword without a backtracking regex, reads ASCII digits only
(at most 9) and caps the reply length. Eliminated agents and finished games need no reply
(``turn`` returns ``NoReply(0)``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dilemmax.envs import text_parsing as tp
from dilemmax.envs.consequence import constants as C
from dilemmax.envs.consequence.rendering import participant_label, to_numpy
from dilemmax.envs.text import NoReply, ParsedReply, Prompt, TextProtocol, check_layout

CLAUSES = ("named", "anonymous", "neutral")
GOALS = ("competitive", "cooperative", "survival")

_GOAL_LINES = {
    "competitive": "Your goal: stay in the game and finish it holding more units than anyone else.",
    "cooperative": (
        "Your goal: help the group fill the fund so that every participant is still in the game "
        "at the end."
    ),
    "survival": "Your goal: still be in the game when it ends.",
}

# Words that differ between the charged and the neutral wording.
_VOCAB = {
    "charged": {
        "out": "is eliminated",
        "was_out": "was eliminated",
        "were_out": "were eliminated",
        "gone": "eliminated",
    },
    "neutral": {
        "out": "leaves the game",
        "was_out": "left the game",
        "were_out": "left the game",
        "gone": "out of the game",
    },
}


class ConsequenceText(TextProtocol):
    """Renderer and parser for one prompt variant (see the module docstring)."""

    protocol_version = 1  # 1: the "cached" layout (0: the paper's order, now layout="paper")

    def __init__(
        self,
        env,
        clause: str | None = "named",
        goal: str = "competitive",
        ask_rationale=False,
        anonymous: bool | None = None,
        neutral: bool | None = None,
        layout: str = "cached",
    ):
        if clause is not None and clause not in CLAUSES:
            raise ValueError(f"clause must be one of {CLAUSES}, got {clause!r}")
        if goal not in GOALS:
            raise ValueError(f"goal must be one of {GOALS}, got {goal!r}")
        for name, flag in (("anonymous", anonymous), ("neutral", neutral)):
            if flag is not None and not isinstance(flag, (bool, np.bool_)):
                raise ValueError(f"{name} must be True or False, got {flag!r}")
        self.env = env
        self.anonymous = bool(anonymous) if anonymous is not None else clause == "anonymous"
        self.neutral = bool(neutral) if neutral is not None else clause == "neutral"
        self.clause = "anonymous" if self.anonymous else ("neutral" if self.neutral else "named")
        self.goal = goal
        self.ask_rationale = bool(ask_rationale)
        self.words = _VOCAB["neutral" if self.neutral else "charged"]
        self.layout = check_layout(layout)

    # ------------------------------------------------------------------ rules
    def _kills_all_at_end(self, rule: int) -> bool:
        return self.env.endgame == "all" or rule == C.AON

    def rule_clause(self, rule: int, num_rounds: int) -> str:
        """The one sentence that states what happens after a short round."""
        w = self.words
        if self._kills_all_at_end(rule):
            when = (
                "If the fund is still short at the end of a round before the last one "
                f"(round {num_rounds}),"
            )
        else:
            when = "If the fund is still short at the end of a round,"
        neutral = self.neutral
        if rule == C.AON:
            return f"{when} nobody {w['out']} and play moves on to the next round."
        if rule == C.RE:
            drawn = "one participant still in the game, picked by a fair random draw,"
            return f"{when} {drawn} {w['out']}."
        if rule == C.DV:
            return (
                f"{when} every participant still in the game votes for one participant still in "
                f"the game (itself allowed); the one with the most votes {w['out']}, and a tie is "
                "settled by a fair random draw."
            )
        if self.anonymous:
            return f"{when} one participant still in the game {w['out']}."
        fewest = rule == C.RP
        amount = "fewest" if fewest else "most"
        if neutral:
            bearer = f"the participant holding the {amount} units after that round's payments"
        else:
            label = "poorest" if fewest else "richest"
            bearer = (
                f"the {label} participant (the one holding the {amount} units after that "
                "round's payments)"
            )
        return f"{when} {bearer} {w['out']}; a tie is settled by a fair random draw."

    def rules_text(self, state) -> str:
        s = state
        rule, threshold, rounds = int(s.config.rule), int(s.config.threshold), self.env.num_rounds
        w = self.words
        if self._kills_all_at_end(rule):
            last = (
                f"If the fund is still short after round {rounds}, every participant still in "
                f"the game {w['out']}."
            )
        else:
            last = f"The game ends after round {rounds} at the latest."
        lines = [
            f"1. The group needs a common fund of at least {_units(threshold)}. It starts empty.",
            f"2. There are at most {rounds} {'round' if rounds == 1 else 'rounds'}. In each round "
            "every participant still in the "
            "game privately chooses a whole number of its own units to pay into the fund, from 0 "
            "up to what it holds now. Paid units are gone for good. The choices of a round are "
            "revealed together.",
            f"3. As soon as the fund holds {_units(threshold)} or more, the group has succeeded: "
            "the game ends and every participant still in the game stays in.",
            "4. " + self.rule_clause(rule, rounds),
            "5. " + last,
            f"6. A participant who {w['out']} loses every unit it still holds and makes no "
            "further choices.",
        ]
        return "Rules:\n" + "\n".join(lines)

    # ------------------------------------------------------------------ state
    def _situation(self, s, seat: int) -> str:
        threshold, fund = int(s.config.threshold), int(s.fund)
        rounds = self.env.num_rounds
        if s.done:
            head = "The game is over: " + (
                "the fund reached the target." if s.success else "the fund fell short."
            )
        elif s.phase == C.PHASE_VOTE:
            ended = f"Round {int(s.round) + 1} of {rounds} ended with the fund short"
            head = f"{ended}: it is time to vote."
        else:
            head = f"It is round {int(s.round) + 1} of {rounds}."
        missing = max(threshold - fund, 0)
        lines = [head, f"Fund: {fund} of {_units(threshold)} ({missing} missing)."]
        for other in range(self.env.num_agents):
            who = f"You ({participant_label(seat)})" if other == seat else participant_label(other)
            if s.alive[other]:
                verb = "hold" if other == seat else "holds"
                lines.append(f"- {who} {verb} {_units(int(s.resources[other]))}.")
            else:
                was = "were" if other == seat else "was"
                after = int(s.eliminated_round[other]) + 1
                lines.append(f"- {who} {was} {self.words['gone']} after round {after}.")
        return "\n".join(lines)

    def _history(self, s) -> str:
        rounds_seen = int(s.round) + (1 if s.done or s.phase == C.PHASE_VOTE else 0)
        if rounds_seen == 0:
            return "History: nothing yet, this is the first round."
        lines = ["History:"]
        fund = 0
        for t in range(rounds_seen):
            paid = s.contributions[t]
            fund += int(paid.sum())
            # Those still in the game when round t began.
            took_part = [
                i
                for i in range(self.env.num_agents)
                if s.eliminated_round[i] < 0 or s.eliminated_round[i] >= t
            ]
            payments = ", ".join(f"{participant_label(i)} paid {int(paid[i])}" for i in took_part)
            line = f"Round {t + 1}: {payments}; the fund reached {fund}."
            votes = s.votes[t]
            cast = [i for i in range(self.env.num_agents) if votes[i] >= 0]
            if cast:
                ballots = ", ".join(
                    f"{participant_label(i)} for {participant_label(int(votes[i]))}" for i in cast
                )
                line += f" Votes: {ballots}."
            gone = [i for i in range(self.env.num_agents) if s.eliminated_round[i] == t]
            if gone:
                names = ", ".join(participant_label(i) for i in gone)
                verb = self.words["was_out"] if len(gone) == 1 else self.words["were_out"]
                line += f" {names} {verb}."
            lines.append(line)
        return "\n".join(lines)

    def _instruction(self, s, seat: int) -> str:
        if s.done:
            return "No choice is needed."
        if not s.alive[seat]:
            return "You make no further choices."
        why = (
            "First explain your reasoning in a few sentences, then end your reply with"
            if self.ask_rationale
            else "Reply with exactly one line:"
        )
        if s.phase == C.PHASE_VOTE:
            options = ", ".join(
                participant_label(i) for i in range(self.env.num_agents) if s.alive[i]
            )
            return (
                f"Vote for the participant who should be {self.words['gone']} ({options}). {why}\n"
                "VOTE: <letter>"
            )
        held = int(s.resources[seat])
        return (
            f"You hold {_units(held)}. Choose how many to pay into the fund this round. {why}\n"
            f"CONTRIBUTION: <whole number from 0 to {held}>"
        )

    def render(self, state, agent: str) -> str:
        s = to_numpy(state)
        seat = self.env.agent_index[agent]
        n, me = self.env.num_agents, participant_label(seat)
        everyone = ", ".join(participant_label(i) for i in range(n))
        holds = "Each participant holds resource units of its own."
        if self.layout == "paper":
            intro = f"You are participant {me} in a group of {n} participants ({everyone}). {holds}"
            shared, own = [intro, _GOAL_LINES[self.goal], self.rules_text(s)], [
                self._situation(s, seat), self._history(s)
            ]  # fmt: skip
        else:  # what every seat reads first (rules, then the rounds so far), then its own
            intro = f"You are one of the {n} participants ({everyone}) of a group. {holds}"
            shared = [intro, _GOAL_LINES[self.goal], self.rules_text(s), self._history(s)]
            own = [f"You are participant {me}.", self._situation(s, seat)]
        return "\n\n".join([*shared, *own, self._instruction(s, seat)])

    # ------------------------------------------------------------------ play interface
    def turn(self, state, agent: str, memory: Any) -> Prompt | NoReply:
        s = to_numpy(state)
        seat = self.env.agent_index[agent]
        if s.done or not s.alive[seat]:
            return NoReply(0)
        alive = tuple(bool(a) for a in s.alive)
        if s.phase == C.PHASE_VOTE:
            legal = tuple(j for j in range(self.env.num_agents) if alive[j])
        else:
            legal = tuple(range(int(s.resources[seat]) + 1))
        context = {
            "vote": bool(s.phase == C.PHASE_VOTE),
            "held": int(s.resources[seat]),
            "alive": alive,
        }
        return Prompt("", self.render(state, agent), "act", legal, context)

    def example_reply(self, prompt: Prompt, action: int | None, rng: Any = None) -> str:
        why = "I weigh what the fund still needs against what I keep. "
        if prompt.context.get("vote"):
            return f"{why}\nVOTE: {participant_label(int(action or 0))}"
        return f"{why}\nCONTRIBUTION: {int(action or 0)}"

    def parse_reply(self, reply: str, prompt: Prompt) -> ParsedReply:
        ctx = prompt.context
        return self._total(reply, bool(ctx.get("vote")), int(ctx.get("held", 0)),
                           tuple(ctx.get("alive", ())))  # fmt: skip

    # ------------------------------------------------------------------ parsing
    def parse(self, reply: str, state, agent: str) -> ParsedReply:
        s = to_numpy(state)
        seat = self.env.agent_index[agent]
        if s.done or not s.alive[seat]:
            text, _ = tp.clean(reply)
            return ParsedReply(action=0, valid=True, rationale=text.strip())
        alive = tuple(bool(a) for a in s.alive)
        return self._total(reply, bool(s.phase == C.PHASE_VOTE), int(s.resources[seat]), alive)

    def _total(self, reply: Any, vote: bool, held: int, alive: tuple) -> ParsedReply:
        abstain = self.env.num_agents
        try:
            text, _ = tp.clean(reply)
            if vote:
                return self._parse_vote(text, alive)
            return self._parse_contribution(text, held)
        except Exception as exc:  # noqa: BLE001 - a model's reply must never crash a run
            return ParsedReply(abstain if vote else 0, False, f"parser error: {type(exc).__name__}")

    def _parse_contribution(self, reply: str, held: int) -> ParsedReply:
        found = _last_keyword_value(reply, "contribut", _number_at)
        if found is None:
            stripped = reply.strip().rstrip(".").strip()
            bare = _number_at(stripped, 0) if len(stripped) <= 12 else None
            if bare is not None and bare[1] == len(stripped):
                found = (bare[0], 0, len(reply))
        if found is None:
            return ParsedReply(0, False, "no 'CONTRIBUTION: <n>' line found", reply.strip())
        (value, ok), start, end = found
        rationale = (reply[:start] + reply[end:]).strip()
        if not ok:
            return ParsedReply(0, False, f"contribution {value!r} is not a whole number of at "
                               f"most {tp.MAX_INT_DIGITS} ASCII digits", rationale)  # fmt: skip
        if not 0 <= value <= held:
            return ParsedReply(0, False, f"contribution {value} is outside 0..{held}", rationale)
        return ParsedReply(value, True, "", rationale)

    def _parse_vote(self, reply: str, alive: tuple) -> ParsedReply:
        abstain = self.env.num_agents
        found = _last_keyword_value(reply, "vote", _name_at)
        if found is None:
            stripped = reply.strip().rstrip(".").strip()
            if len(stripped) == 1 and stripped.isascii() and stripped.isalpha():
                found = ((stripped, True), 0, len(reply))
        if found is None:
            return ParsedReply(abstain, False, "no 'VOTE: <letter>' line found", reply.strip())
        (token, _), start, end = found
        rationale = (reply[:start] + reply[end:]).strip()
        target = self._seat_named(token)
        if target is None:
            return ParsedReply(abstain, False, f"{token[:40]!r} names no participant", rationale)
        if not alive[target]:
            error = f"participant {participant_label(target)} is no longer in the game"
            return ParsedReply(abstain, False, error, rationale)
        return ParsedReply(target, True, "", rationale)

    def _seat_named(self, token: str) -> int | None:
        """The seat a letter ("b"), a label ("P27") or an agent name ("agent_1") refers to."""
        for seat, agent in enumerate(self.env.agents):
            if token.upper() == participant_label(seat) or token.lower() == agent:
                return seat
        return None


_SEPARATORS = frozenset(" \t\n:=*#`>_\"'")
_FILLERS = ("for", "participant", "agent")


def _skip(text: str, k: int, chars=_SEPARATORS) -> int:
    while k < len(text) and text[k] in chars:
        k += 1
    return k


def _number_at(text: str, k: int) -> tuple[tuple[int | None, bool], int] | None:
    """((value, ok), end) of an integer starting at ``k`` (optional '-'), or None if no digit."""
    sign = 1
    if k < len(text) and text[k] == "-":
        sign, k = -1, k + 1
    start = k
    while k < len(text) and text[k].isdigit():
        k += 1
    if k == start:
        return None
    value = tp.parse_int(text[start:k])
    if value is None:
        return (None, False), k
    return (sign * value, True), k


def _name_at(text: str, k: int) -> tuple[tuple[str, bool], int] | None:
    """((name, True), end) of a participant name at ``k`` after optional filler words."""
    for _ in range(2):
        lowered = text[k : k + 12].lower()
        for filler in _FILLERS:
            after = k + len(filler)
            ends = after >= len(text) or not (text[after].isalnum() or text[after] == "_")
            if lowered.startswith(filler) and ends:
                k = _skip(text, after)
                break
    start = k
    while (
        k < len(text)
        and k - start < 40
        and (text[k].isascii() and (text[k].isalnum() or text[k] == "_"))
    ):
        k += 1
    if k == start or not text[start].isalpha():
        return None
    return (text[start:k], True), k


def _last_keyword_value(text: str, keyword: str, read):
    """(value, start, end) of the LAST ``keyword...`` followed by a readable value, or None.

    Linear: occurrences are visited from the end; after each, the rest of the word and the
    separators are skipped (spans that never overlap another occurrence), then ``read`` reads
    a bounded value.
    """
    lowered = text.lower()
    end = len(lowered)
    while True:
        start = lowered.rfind(keyword, 0, end)
        if start < 0:
            return None
        k = start + len(keyword)
        while k < len(text) and text[k].isascii() and text[k].isalpha():
            k += 1
        found = read(text, _skip(text, k))
        if found is not None:
            value, stop = found
            return value, start, stop
        end = start


def _units(count: int) -> str:
    return f"{count} unit" if count == 1 else f"{count} units"
