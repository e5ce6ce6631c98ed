"""The OpenSocialJax agent protocol, the parts both grid games share (paper, Appendix A).

Every step an agent gets its game's system prompt and one user message built from its own
memory and view: RULES YOU KNOW (kept by the harness from the agent's own observations), YOUR
NOTES (written by the agent, one edit per step), EARLIER TRIALS (one summary per finished trial),
OTHER AGENTS (only as far as they were in view), YOUR PLAN (current and earlier goals), LAST STEP
and RECENT STEPS, NOW (position, hand or status, the 11 x 11 view) and ACTIONS NOW. The agent
replies with one JSON object::

    {"why_this_move": "...", "mode": "...",
     "goal": {"type": "...", "cell": [row, col], "why": "..."},
     "note": {"op": "none" | "add" | "replace" | "delete", "id": 0, "text": ""},
     "action": <integer from ACTIONS NOW>}

When a trial ends (and another follows) the agent is asked to rewrite its notes into a short
list of lessons and plans (a ``kind="reflect"`` prompt); only that list is carried into the next
trial, and a failed rewrite leaves the agent without notes. An invalid reply means "stay". A
frozen agent is not called.

This module holds the game-independent parts: the memory's notes, plan, recent steps and
earlier-trial summaries, the reply parser (total, linear time: built on
:mod:`dilemmax.envs.text_parsing`), the reflection round trip, the reply's JSON schema and
:func:`explore_share` (the paper's "explore %": the share of steps an agent reported exploring).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dilemmax.envs import grid as G
from dilemmax.envs import text_parsing as tp
from dilemmax.envs.text import ParsedReply, Prompt

RECENT_STEPS = 15  # [paper] "the last 15 steps"
EARLIER_EVENTS = 14  # earlier events of the trial shown under LAST STEP (paper listing 4: 14)
EARLIER_GOALS = 5  # earlier goals shown under YOUR PLAN (paper listing 3 shows 5)
WHY_CHARS, GOAL_WHY_CHARS = 500, 80  # [paper] reply field limits
NOTE_CHARS = 300  # chosen: one note entry at most this long
MAX_NOTES = 40  # chosen: a bound on the notes block (an add beyond it is refused)
MAX_LESSONS = 12  # chosen: at most this many entries carried from a trial-end rewrite
NOTE_OPS = ("none", "add", "replace", "delete")
FACING_NAMES = ("north", "east", "south", "west")


def agent_letter(i: int) -> str:
    return chr(ord("A") + int(i))


# ----------------------------------------------------------------------------- memory pieces
@dataclass
class Goal:
    """One goal the agent set (YOUR PLAN)."""

    number: int
    type: str
    cell: tuple[int, int] | None
    why: str
    set_step: int
    start_distance: int | None
    end: str = ""  # "" while current; "done at step t" or 'abandoned at step t ("why")'


@dataclass
class Sighting:
    """What an agent saw of one other agent this trial (OTHER AGENTS)."""

    last_step: int = -1
    position: tuple[int, int] = (0, 0)
    facing: int = 0
    seen: int = 0
    counts: collections.Counter = field(default_factory=collections.Counter)


@dataclass
class AgentMemory:
    """Per-agent memory for one episode of an OpenSocialJax game.

    ``notes`` maps entry number -> text; ``carried`` are the entries of the last trial-end
    rewrite (lessons, then plans) with ``carried_split`` the number of lessons among them.
    ``ledger`` is the game's RULES YOU KNOW record (game-specific, episode-long); ``trial_stats``
    and ``others`` are per trial; ``extra`` holds game-specific per-episode state.
    """

    agent: str
    index: int
    trial: int = 0
    notes: dict[int, str] = field(default_factory=dict)
    next_note: int = 1
    carried: int = 0
    carried_split: int = 0
    goals: list[Goal] = field(default_factory=list)
    next_goal: int = 1
    recent: collections.deque = field(
        default_factory=lambda: collections.deque(maxlen=RECENT_STEPS)
    )
    events: collections.deque = field(default_factory=lambda: collections.deque(maxlen=64))
    last_step: str = ""
    note_result: str = ""
    earlier_trials: list[str] = field(default_factory=list)
    others: dict[int, Sighting] = field(default_factory=dict)
    trial_stats: collections.Counter = field(default_factory=collections.Counter)
    ledger: Any = None
    extra: dict = field(default_factory=dict)
    modes: list = field(default_factory=list)  # reported mode per answered step ("" if none)
    pending_notes: list[str] | None = None  # notes at the trial end, shown in the rewrite prompt


# ----------------------------------------------------------------------------- view helpers
def view_cells(position, facing: int, shape: tuple[int, int]) -> set[tuple[int, int]]:
    """The in-bounds cells of the 11 x 11 egocentric window (9 ahead, 1 behind, 5 aside)."""
    offsets = _VIEW_OFFSETS[int(facing)].reshape(-1, 2) + np.asarray(position).reshape(1, 2)
    h, w = shape
    keep = (offsets[:, 0] >= 0) & (offsets[:, 0] < h) & (offsets[:, 1] >= 0) & (offsets[:, 1] < w)
    return set(map(tuple, offsets[keep].tolist()))


_VIEW_OFFSETS = np.asarray(G.view_offsets(9, 1, 5))


def beam_cells(position, facing: int) -> list[tuple[int, int]]:
    """The 4 cells a beam covers (faced, beyond, the two beside the faced cell), in numpy-free
    Python: same footprint and order as :func:`dilemmax.envs.grid.beam_cells`."""
    fwd = _DELTAS[int(facing)]
    right = _DELTAS[(int(facing) + 1) % 4]
    r0, c0 = int(position[0]), int(position[1])
    return [
        (r0 + f * fwd[0] + s * right[0], c0 + f * fwd[1] + s * right[1])
        for f, s in G.BEAM_FORWARD_RIGHT
    ]


_DELTAS = DIRECTION_DELTAS = ((-1, 0), (0, 1), (1, 0), (0, -1))  # grid.py order: N, E, S, W


def manhattan(a, b) -> int:
    return abs(int(a[0]) - int(b[0])) + abs(int(a[1]) - int(b[1]))


# ----------------------------------------------------------------------------- reply schema
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


# ----------------------------------------------------------------------------- reply parsing
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


# ----------------------------------------------------------------------------- notes and plan
def apply_note(memory: AgentMemory, note: Mapping | None, step: int) -> str:
    """Applies one note edit; returns what happened (shown under LAST STEP)."""
    if not note or note.get("op") == "none":
        return ""
    op, number, text = note["op"], int(note["id"]), note.get("text", "").strip()
    if op == "add":
        if not text:
            return "note add ignored: empty text"
        if len(memory.notes) >= MAX_NOTES:
            return f"note add refused: you already have {MAX_NOTES} entries; replace or delete"
        memory.notes[memory.next_note] = f"t{step}: {text}"
        memory.next_note += 1
        return f"note [{memory.next_note - 1}] added"
    if number not in memory.notes:
        return f"note {op} ignored: there is no entry [{number}]"
    if op == "delete":
        del memory.notes[number]
        return f"note [{number}] deleted"
    if not text:
        return f"note replace ignored: empty text for [{number}]"
    memory.notes[number] = f"{text} (revised t{step})"
    return f"note [{number}] replaced"


def update_plan(memory: AgentMemory, goal: Mapping | None, step: int, position) -> None:
    """Keeps the current goal, or closes it and opens the new one."""
    if not goal:
        return
    current = memory.goals[-1] if memory.goals and not memory.goals[-1].end else None
    cell = goal.get("cell")
    if current is not None and current.type == goal["type"] and current.cell == cell:
        return
    if current is not None:
        reached = current.cell is not None and tuple(position) == tuple(current.cell)
        current.end = (
            f"done at step {step}" if reached else f'abandoned at step {step} ("{goal["why"]}")'
        )
    distance = manhattan(position, cell) if cell is not None else None
    memory.goals.append(Goal(memory.next_goal, goal["type"], cell, goal["why"], step, distance))
    memory.next_goal += 1
    del memory.goals[: -(EARLIER_GOALS + 1)]


def close_plan_at_trial_end(memory: AgentMemory) -> None:
    memory.goals.clear()
    memory.next_goal = 1


# ----------------------------------------------------------------------------- blocks
def notes_block(memory: AgentMemory) -> str:
    lines = ["YOUR NOTES (what you worked out about playing)"]
    if not memory.notes:
        lines.append("(none yet)")
        return "\n".join(lines)
    carried = [k for k in sorted(memory.notes) if k <= memory.carried]
    lessons = [k for k in carried if k <= memory.carried_split]
    plans = [k for k in carried if k > memory.carried_split]
    added = [k for k in sorted(memory.notes) if k > memory.carried]
    if lessons:
        lines.append(f"What you worked out by the end of trial {memory.trial}:")
        lines += [f"[{k}] {memory.notes[k]}" for k in lessons]
    if plans:
        lines.append("What you meant to try this trial:")
        lines += [f"[{k}] {memory.notes[k]}" for k in plans]
    if added:
        lines.append("Notes you have added since:" if carried else "Notes you have added:")
        lines += [f"[{k}] {memory.notes[k]}" for k in added]
    return "\n".join(lines)


def earlier_trials_block(memory: AgentMemory) -> str:
    if not memory.earlier_trials:
        return ""
    return "EARLIER TRIALS\n" + "\n".join(memory.earlier_trials)


def plan_block(memory: AgentMemory, step: int, position) -> str:
    lines = ["YOUR PLAN"]
    current = memory.goals[-1] if memory.goals and not memory.goals[-1].end else None
    if current is None:
        lines.append("No current goal.")
    else:
        where = f" ({current.cell[0]}, {current.cell[1]})" if current.cell else ""
        line = (
            f"Current goal #{current.number} (set step {current.set_step}, "
            f'{step - current.set_step} steps ago): {current.type}{where} -- "{current.why}".'
        )
        if current.cell is not None:
            line += (
                f" Distance now {manhattan(position, current.cell)} (was {current.start_distance})."
            )
        lines.append(line)
    earlier = [g for g in memory.goals if g.end][-EARLIER_GOALS:]
    if earlier:
        parts = []
        for g in earlier:
            where = f" ({g.cell[0]}, {g.cell[1]})" if g.cell else ""
            parts.append(f"#{g.number} {g.type}{where} -- {g.end}")
        lines.append("Earlier goals this trial: " + " | ".join(parts))
    return "\n".join(lines)


def last_step_block(memory: AgentMemory) -> str:
    lines = ["LAST STEP"]
    lines.append(memory.last_step or "Nothing yet: this is the first step of the trial.")
    if memory.note_result:
        lines.append("Your note edit: " + memory.note_result + ".")
    if memory.events:
        shown = list(memory.events)[-EARLIER_EVENTS:]
        lines.append(f"Earlier events this trial (last {len(shown)}): " + "; ".join(shown))
    return "\n".join(lines)


def recent_block(memory: AgentMemory) -> str:
    if not memory.recent:
        return "RECENT STEPS\n(none yet this trial)"
    return "RECENT STEPS\n" + " ".join(memory.recent)


def actions_block(lines: Iterable[str]) -> str:
    return "ACTIONS NOW\n" + " | ".join(lines) + "\n\nReply with the JSON only."


# ----------------------------------------------------------------------------- reflection
def reflect_prompt(system: str, memory: AgentMemory, trial_summary: str) -> Prompt:
    """The trial-end request to rewrite the notes into lessons and plans."""
    notes = memory.pending_notes or []
    body = "\n".join(notes) if notes else "(you had no notes)"
    user = "\n".join(
        [
            f"Trial {memory.trial} is over. {trial_summary}",
            "",
            "Your notes at the end of the trial:",
            body,
            "",
            "Rewrite your notes into a short list for the next trial: what you worked out about "
            "how to play (lessons) and what you mean to try next (plans). THIS LIST IS ALL YOU "
            "KEEP of your notes; RULES YOU KNOW carries over by itself, so do not copy it. "
            f"At most {MAX_LESSONS} entries in all, each under {NOTE_CHARS} characters.",
            'Reply with ONE JSON object: {"lessons": ["..."], "plans": ["..."]}',
        ]
    )
    return Prompt(system, user, kind="reflect", json_schema=REFLECT_SCHEMA)


def start_trial_notes(memory: AgentMemory, lessons: list[str], plans: list[str]) -> None:
    """The rewrite becomes the new trial's notes, numbered from 1 (lessons, then plans)."""
    entries = lessons + plans
    memory.notes = {k + 1: text for k, text in enumerate(entries)}
    memory.next_note = len(entries) + 1
    memory.carried = len(entries)
    memory.carried_split = len(lessons)


def parse_reflect_reply(reply: str, stay: int) -> ParsedReply:
    """A trial-end rewrite: the lessons and plans it keeps (it plays no move: ``stay``)."""
    lessons, plans, error = parse_reflection(reply)
    return ParsedReply(stay, not error, error, fields={"lessons": lessons, "plans": plans})


def remember_reply(memory: AgentMemory, prompt: Prompt, parsed: ParsedReply) -> None:
    """What an agent's own reply leaves in its memory: a rewrite starts the next trial's notes;
    a step reply adds its reported mode, its note edit and its goal (the plan)."""
    fields = parsed.fields
    if prompt.kind == "reflect":
        start_trial_notes(memory, list(fields.get("lessons", [])), list(fields.get("plans", [])))
        return
    step = int(prompt.context.get("step", 0))
    memory.modes.append(fields.get("mode") or "")
    memory.note_result = apply_note(memory, fields.get("note"), step)
    update_plan(memory, fields.get("goal"), step, prompt.context.get("position"))


def open_next_trial(memory: AgentMemory, number: int) -> None:
    """At a trial boundary: closes the notes and the plan, and clears what belonged to the trial
    that ended (its stats, sightings, recent steps and events). The rules ledger and the earlier
    trials' lessons stay."""
    end_trial_notes(memory)
    close_plan_at_trial_end(memory)
    memory.trial = number
    memory.trial_stats = collections.Counter()
    memory.others = {}
    memory.recent.clear()
    memory.events.clear()
    memory.last_step = ""
    memory.note_result = ""


def end_trial_notes(memory: AgentMemory) -> None:
    """At a trial end the step-by-step notes are dropped; a failed rewrite leaves none."""
    memory.pending_notes = [f"[{k}] {memory.notes[k]}" for k in sorted(memory.notes)]
    start_trial_notes(memory, [], [])


# ----------------------------------------------------------------------------- metrics
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
