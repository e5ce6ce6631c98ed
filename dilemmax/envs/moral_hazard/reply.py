"""Replies of the Dialogue Moral Hazard Game: the strict move lines, lenient recovery, the
step-rationale check and the RLOO reward (the formats are described in
:mod:`dilemmax.envs.moral_hazard.text`).

Every function here is total (a malformed reply is an invalid :class:`ParsedReply`, never an
exception) and linear in the reply.
"""

from __future__ import annotations

import re
from typing import Any

from dilemmax.envs import text_parsing as tp
from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.text import ParsedReply

_WORK = re.compile(r"^[ \t]*ACTION[ \t]+(?:LOCAL[ \t]+([A-D])|(QUERY))[ \t]*$", re.I | re.M)
_NOTE = re.compile(
    r"^[ \t]*(?:NOTE[ \t]+CASE[ \t]+([0-9]+)[ \t]+UNSAFE[ \t]+([A-D])|(NO[ \t]+NOTE))[ \t]*$",
    re.I | re.M,
)
RATIONALE_LABELS = ("FACTS", "ACCOUNTING", "DECISION")
# RLOO reward of the paper (Appendix B): parseable format, rationale structure, target action.
RLOO_WEIGHTS = {"format": 0.05, "rationale": 0.10, "target": 0.85}
_FINAL = re.compile(r"^[ \t]*FINAL[ \t]+([A-D])[ \t]*$", re.I | re.M)

_FORMATS = {
    c.WORK: "ACTION LOCAL <A-D> or ACTION QUERY",
    c.NOTE: "NOTE CASE <number> UNSAFE <A-D> or NO NOTE",
    c.FINAL: "FINAL <A-D>",
}


def legal_row(stage: int, queried: bool, num_actions: int) -> tuple[int, ...]:
    """The legal actions of one agent (the env's ``legal_matrix`` row, in plain Python)."""
    if stage == c.WORK:
        return tuple(range(c.LOCAL_BASE, c.QUERY + 1))
    if stage == c.NOTE:
        return tuple(range(c.NO_NOTE, num_actions)) if queried else (c.NO_NOTE,)
    if stage == c.FINAL:
        return tuple(range(c.FINAL_BASE, c.NO_NOTE))
    return (c.NO_MOVE,)


def _strict_move(stage: int, match: re.Match, i: int, n: int) -> tuple[int, str]:
    """(action, error) named by one strictly matched line."""
    if stage == c.WORK:
        if match.group(2):
            return c.QUERY, ""
        return c.LOCAL_BASE + c.LABELS.index(match.group(1).upper()), ""
    if stage == c.FINAL:
        return c.FINAL_BASE + c.LABELS.index(match.group(1).upper()), ""
    if match.group(3):
        return c.NO_NOTE, ""
    return _note(tp.parse_int(match.group(1), 4), match.group(2), i, n)


def _note(case: int | None, label: str, i: int, n: int) -> tuple[int, str]:
    if case is None or not 1 <= case <= n:
        shown = "a huge number" if case is None else str(case)
        return c.NO_MOVE, f"there is no case {shown} (cases are 1..{n})"
    offset = (case - 1 - i) % n
    return c.note_action(offset, c.LABELS.index(label.upper())), ""


def lenient_move(text: str, stage: int, i: int, n: int) -> int | None:
    """The last move-shaped phrase of the stage in ``text`` (see the module docstring), or None.

    Reads letter/digit words only, so punctuation and markdown between the words do not matter;
    linear in the text.
    """
    tokens = tp.words(text)
    for k in range(len(tokens) - 1, -1, -1):
        move = _move_at(tokens, k, stage, i, n)
        if move is not None:
            return move
    return None


def _label(token: str) -> int | None:
    return "ABCD".find(token) if len(token) == 1 and token in "ABCD" else None


def _move_at(tokens: list[str], k: int, stage: int, i: int, n: int) -> int | None:
    word = tokens[k]
    nxt = tokens[k + 1 : k + 5]
    if stage == c.WORK:
        if word == "LOCAL" and nxt and _label(nxt[0]) is not None:
            return c.LOCAL_BASE + _label(nxt[0])
        if word == "QUERY" and k > 0 and tokens[k - 1] == "ACTION":
            return c.QUERY
        return None
    if stage == c.FINAL:
        if word == "FINAL":
            for t in nxt[:3]:  # FINAL C, FINAL: C, FINAL ANSWER C, FINAL OPTION IS C
                if _label(t) is not None:
                    return c.FINAL_BASE + _label(t)
        return None
    if word == "NO" and nxt[:1] == ["NOTE"]:
        return c.NO_NOTE
    if word == "CASE" and len(nxt) >= 3 and nxt[1] == "UNSAFE" and _label(nxt[2]) is not None:
        action, error = _note(tp.parse_int(nxt[0], 4), nxt[2], i, n)
        return None if error else action
    return None


def rationale_structure_ok(reply: Any) -> bool:
    """Whether a reply has the step-rationale structure: non-empty ``FACTS:``, ``ACCOUNTING:``
    and ``DECISION:`` lines, in that order, each on a line of its own. Total, linear."""
    text, _ = tp.clean(reply)
    found = []
    for line in text.split("\n"):
        head, sep, rest = line.strip().partition(":")
        key = head.strip("*# ").upper()
        if sep and key in RATIONALE_LABELS and rest.strip():
            found.append(key)
    order = [k for k in found if k in RATIONALE_LABELS]
    positions = [order.index(label) if label in order else -1 for label in RATIONALE_LABELS]
    return all(p >= 0 for p in positions) and positions == sorted(positions)


def rloo_reward(parsed: ParsedReply, reply: Any, target_action: int) -> float:
    """The paper's RLOO target-action reward (Appendix B): 0.05 for a parseable (strictly
    valid) reply, 0.10 for the rationale structure, 0.85 for the exact target action."""
    w = RLOO_WEIGHTS
    return (
        w["format"] * parsed.valid
        + w["rationale"] * rationale_structure_ok(reply)
        + w["target"] * (parsed.valid and parsed.action == int(target_action))
    )


def parse_move(
    reply: Any, stage: int, i: int, n: int, legal: tuple[int, ...], lenient: bool
) -> ParsedReply:
    """Agent ``i``'s move at ``stage`` read from ``reply`` (strict lines; the lenient reading of
    a reply that fails them when ``lenient``). Total: any exception is an invalid reply."""
    try:
        return _parse_stage(reply, stage, i, n, legal, lenient)
    except Exception as exc:  # noqa: BLE001 - a model's reply must never crash a run
        return ParsedReply(c.NO_MOVE, False, f"parser error: {type(exc).__name__}")


def _parse_stage(reply, stage: int, i: int, n: int, legal, lenient: bool) -> ParsedReply:
    text, _ = tp.clean(reply)
    if stage == c.DONE:
        return ParsedReply(c.NO_MOVE, False, "the round is over", text.strip())
    pattern = {c.WORK: _WORK, c.NOTE: _NOTE, c.FINAL: _FINAL}[stage]
    matches = list(pattern.finditer(text))
    rationale = re.sub(r"\n{3,}", "\n\n", pattern.sub("", text)).strip()
    fields = {"rationale_structure": rationale_structure_ok(text)}
    if not matches:
        error = f"no line of the form {_FORMATS[stage]}"
        return _recover(text, stage, i, n, legal, error, rationale, fields, lenient)
    moves = {_strict_move(stage, m, i, n) for m in matches}
    if len(moves) > 1:
        error = "conflicting move lines"
        return _recover(text, stage, i, n, legal, error, rationale, fields, lenient)
    action, error = moves.pop()
    if not error and action not in legal:
        error = "you did not query, so you cannot post"
    if error:
        return ParsedReply(c.NO_MOVE, False, error, rationale, fields=fields)
    return ParsedReply(int(action), True, "", rationale, fields=fields)


def _recover(text, stage, i, n, legal, error, rationale, fields, lenient) -> ParsedReply:
    """The lenient reading of a reply that failed the strict format (or NO_MOVE)."""
    if lenient:
        action = lenient_move(text, stage, i, n)
        if action is not None and action in legal:
            return ParsedReply(action, False, error, rationale, True, fields)
    return ParsedReply(c.NO_MOVE, False, error, rationale, fields=fields)


def example_reply(action: int, seat: int, num_agents: int, steps: bool = False) -> str:
    """A well-formed reply playing ``action`` for ``seat`` (a stand-in reply of cost estimates;
    ``steps``: with the FACTS / ACCOUNTING / DECISION lines)."""
    if action == c.QUERY:
        move = "ACTION QUERY"
    elif c.LOCAL_BASE <= action < c.QUERY:
        move = f"ACTION LOCAL {c.LABELS[action - c.LOCAL_BASE]}"
    elif c.FINAL_BASE <= action < c.NO_NOTE:
        move = f"FINAL {c.LABELS[action - c.FINAL_BASE]}"
    elif action >= c.NOTE_BASE:
        offset, option = divmod(action - c.NOTE_BASE, c.NUM_OPTIONS)
        move = f"NOTE CASE {(seat + offset) % num_agents + 1} UNSAFE {c.LABELS[option]}"
    else:
        move = "NO NOTE"
    if steps:
        return "FACTS: the contract.\nACCOUNTING: each move's value.\nDECISION: this one.\n" + move
    return "I compare what each move adds to my payoff.\n" + move
