"""The OpenSocialJax reply: its JSON schema, the step and trial-end parsers, ``explore_share``.

A step reply is one JSON object (``why_this_move``, ``mode``, ``goal``, ``note``, ``action``);
a trial-end rewrite is ``{"lessons": [...], "plans": [...]}``. Both parsers are total and linear
in the reply, built on :mod:`dilemmax.envs.text_parsing`; the field limits are the paper's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from dilemmax.envs import text_parsing as tp
from dilemmax.envs.text import ParsedReply

WHY_CHARS, GOAL_WHY_CHARS = 500, 80  # [paper] reply field limits
NOTE_CHARS = 300  # chosen: one note entry at most this long
MAX_LESSONS = 12  # chosen: at most this many entries carried from a trial-end rewrite
NOTE_OPS = ("none", "add", "replace", "delete")


def reply_schema(modes: Sequence[str], goal_types: Sequence[str], num_actions: int) -> dict:
    """JSON schema of one step reply (for servers that take structured output)."""
    return {
        "type": "object",
        "properties": {
            "why_this_move": {"type": "string", "maxLength": WHY_CHARS},
            "mode": {"type": "string", "enum": list(modes)},
            "goal": {
                "type": "object",
                "properties": {
                    "type": {"type": "string", "enum": list(goal_types)},
                    "cell": {
                        "type": "array",
                        "items": {"type": "integer"},
                        "minItems": 2,
                        "maxItems": 2,
                    },
                    "why": {"type": "string", "maxLength": GOAL_WHY_CHARS},
                },
                "required": ["type", "cell", "why"],
                "additionalProperties": False,
            },
            "note": {
                "type": "object",
                "properties": {
                    "op": {"type": "string", "enum": list(NOTE_OPS)},
                    "id": {"type": "integer"},
                    "text": {"type": "string"},
                },
                "required": ["op", "id", "text"],
                "additionalProperties": False,
            },
            "action": {"type": "integer", "minimum": 0, "maximum": num_actions - 1},
        },
        "required": ["why_this_move", "mode", "goal", "note", "action"],
        "additionalProperties": False,
    }


REFLECT_SCHEMA = {
    "type": "object",
    "properties": {
        "lessons": {"type": "array", "items": {"type": "string"}},
        "plans": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["lessons", "plans"],
    "additionalProperties": False,
}


def _text_field(obj: Mapping, key: str, cap: int) -> str:
    value = obj.get(key, "")
    return value[:cap] if isinstance(value, str) else ""


def _cell(value: Any) -> tuple[int, int] | None:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    r, c = tp.parse_int(value[0], 3), tp.parse_int(value[1], 3)
    if r is None or c is None or isinstance(value[0], bool) or isinstance(value[1], bool):
        return None
    return (r, c)


def parse_step_reply(
    reply: Any,
    legal: Sequence[int],
    names: Mapping[str, int],
    num_actions: int,
    stay: int,
    modes: Sequence[str],
    goal_types: Sequence[str],
    illegal_reason: Callable[[int], str] | None = None,
) -> ParsedReply:
    """One step reply -> action and fields. Total and linear in the reply.

    Valid means: a JSON object (anywhere in the reply, fenced or not) whose ``action`` is legal
    now. A reply without JSON may still name its move on a last ``ACTION <name or number>``
    line, or be a bare action name or number (the paper parsed the free text of models without
    structured output); the other fields are then empty. Malformed optional fields (mode, goal,
    note) do not void the move: they are dropped and listed in ``fields["field_errors"]``.
    """
    text, truncated = tp.clean(reply)
    obj, json_error = tp.find_json_object(text)
    fields: dict[str, Any] = {"mode": None, "goal": None, "note": None, "field_errors": []}
    if truncated:
        fields["field_errors"].append(f"reply cut to its last {tp.MAX_REPLY_CHARS} characters")
    if obj is not None and "action" in obj:
        action, error = tp.as_action(obj["action"], names, num_actions)
        rationale = _text_field(obj, "why_this_move", WHY_CHARS) or _text_field(
            obj, "why", WHY_CHARS
        )
        _read_fields(obj, fields, modes, goal_types)
    else:
        tokens, line = tp.keyword_line(text, "ACTION")
        if tokens is None:
            if len(text) <= 40 and text.strip():
                action, error = tp.as_action(text, names, num_actions)
                if action is not None:
                    return _checked(action, legal, stay, "", fields, illegal_reason)
            why = json_error if obj is None else "the JSON object has no 'action' field"
            why = "no JSON object with an 'action' field and no 'ACTION <name>' line" + (
                f" ({why})" if "deeper" in why or "malformed" in why else ""
            )
            return ParsedReply(stay, False, why, text[-2000:].strip(), fields=fields)
        action, error = tp.as_action(" ".join(tokens[:2]), names, num_actions)
        if action is None and tokens:
            action, error = tp.as_action(tokens[0], names, num_actions)
        elif not tokens:
            error = "nothing after ACTION"
        lines = text.split("\n")
        rationale = "\n".join(lines[:line] + lines[line + 1 :])[-2000:].strip()
    if action is None:
        return ParsedReply(stay, False, error, rationale, fields=fields)
    return _checked(action, legal, stay, rationale, fields, illegal_reason)


def _checked(action, legal, stay, rationale, fields, illegal_reason) -> ParsedReply:
    if action not in legal:
        error = f"action {action} is not in ACTIONS NOW {sorted(int(a) for a in legal)}"
        if illegal_reason is not None:
            error += f": {illegal_reason(action)}"
        return ParsedReply(stay, False, error, rationale, fields=fields)
    return ParsedReply(int(action), True, "", rationale, fields=fields)


def _read_fields(obj: Mapping, fields: dict, modes, goal_types) -> None:
    errors = fields["field_errors"]
    mode = obj.get("mode")
    if isinstance(mode, str) and mode.strip().lower() in modes:
        fields["mode"] = mode.strip().lower()
    elif "mode" in obj:
        errors.append(f"mode must be one of {list(modes)}")
    goal = obj.get("goal")
    if isinstance(goal, Mapping):
        kind = goal.get("type")
        kind = kind.strip().lower() if isinstance(kind, str) else None
        if kind in goal_types:
            fields["goal"] = {
                "type": kind,
                "cell": _cell(goal.get("cell")),
                "why": _text_field(goal, "why", GOAL_WHY_CHARS),
            }
        else:
            errors.append(f"goal.type must be one of {list(goal_types)}")
    elif "goal" in obj:
        errors.append("goal must be an object")
    note = obj.get("note")
    if isinstance(note, Mapping):
        op = note.get("op")
        op = op.strip().lower() if isinstance(op, str) else None
        number = tp.parse_int(note.get("id", 0), 4)
        if op in NOTE_OPS and number is not None:
            fields["note"] = {"op": op, "id": number, "text": _text_field(note, "text", NOTE_CHARS)}
        else:
            errors.append("note must have op in none/add/replace/delete and an integer id")
    elif "note" in obj:
        errors.append("note must be an object")


def parse_reflection(reply: Any) -> tuple[list[str], list[str], str]:
    """(lessons, plans, error) from a trial-end rewrite. Total and linear.

    Accepts ``{"lessons": [...], "plans": [...]}`` or, without JSON, bullet or numbered lines
    (all read as lessons). Entries are capped in number and length.
    """
    text, _ = tp.clean(reply)
    obj, _ = tp.find_json_object(text)
    if obj is not None and ("lessons" in obj or "plans" in obj):
        lessons = _entries(obj.get("lessons"))
        plans = _entries(obj.get("plans"))
    else:
        lessons, plans = _bullets(text), []
    lessons = lessons[:MAX_LESSONS]
    plans = plans[: max(0, MAX_LESSONS - len(lessons))]
    if not lessons and not plans:
        return [], [], "no lessons found in the rewrite"
    return lessons, plans, ""


def _entries(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    return [
        v.strip()[:NOTE_CHARS] for v in value[: 4 * MAX_LESSONS] if isinstance(v, str) and v.strip()
    ]


def _bullets(text: str) -> list[str]:
    out = []
    for line in text.split("\n"):
        stripped = line.strip()
        head = stripped[:6]
        if stripped[:1] in "-*•" and len(stripped) > 1:
            out.append(stripped[1:].strip()[:NOTE_CHARS])
        elif head[:1].isascii() and head[:1].isdigit() and ("." in head or ")" in head):
            cut = min(k for k in (head.find("."), head.find(")")) if k >= 0)
            out.append(stripped[cut + 1 :].strip()[:NOTE_CHARS])
        elif stripped.startswith("[") and "]" in head:
            out.append(stripped[head.find("]") + 1 :].strip()[:NOTE_CHARS])
        if len(out) >= 4 * MAX_LESSONS:
            break
    return [o for o in out if o]


def parse_reflect_reply(reply: str, stay: int) -> ParsedReply:
    """A trial-end rewrite: the lessons and plans it keeps (it plays no move: ``stay``)."""
    lessons, plans, error = parse_reflection(reply)
    return ParsedReply(stay, not error, error, fields={"lessons": lessons, "plans": plans})


def explore_share(parsed: Iterable[ParsedReply | Mapping | None]) -> float:
    """The share of answered steps whose reply reported ``mode == "explore"`` (paper Table 3).

    ``parsed`` is the step replies of one agent (or several) over a trial: ParsedReply objects,
    their ``fields`` mappings or reported mode strings (``AgentMemory.modes``), or None for
    steps the agent was not asked. Replies without a readable mode count as answered, not
    exploring; NaN when there is no answered step.
    """
    asked = explored = 0
    for item in parsed:
        if item is None:
            continue
        if isinstance(item, ParsedReply):
            item = item.fields
        mode = item.get("mode") if isinstance(item, Mapping) else item
        asked += 1
        explored += mode == "explore"
    return explored / asked if asked else float("nan")
