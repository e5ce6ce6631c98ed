"""The OpenSocialJax turn blocks both grid games show the same way, and the trial-end request.

Each takes the agent's :class:`~dilemmax.envs.osj.memory.AgentMemory` and returns one block of
the user message (YOUR NOTES, EARLIER TRIALS, YOUR PLAN, LAST STEP, RECENT STEPS, ACTIONS NOW);
the game fills the blocks that depend on its rules (progress, RULES YOU KNOW, OTHER AGENTS, NOW).
"""

from __future__ import annotations

from collections.abc import Iterable

from dilemmax.envs.osj.memory import EARLIER_GOALS, AgentMemory, current_goal
from dilemmax.envs.osj.replies import MAX_LESSONS, NOTE_CHARS, REFLECT_SCHEMA
from dilemmax.envs.osj.view import manhattan
from dilemmax.envs.text import Prompt

EARLIER_EVENTS = 14  # earlier events of the trial shown under LAST STEP (paper listing 4: 14)
EVENTS_STRIDE = 14  # chosen: how far the "cached" layout's first event shown moves at a time


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
    current = current_goal(memory)
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


def last_step_block(memory: AgentMemory, events: bool = True) -> str:
    """LAST STEP, with the trial's earlier events unless ``events`` is False (the "cached"
    layout shows them before the progress line: they change only when something happens)."""
    lines = ["LAST STEP"]
    lines.append(memory.last_step or "Nothing yet: this is the first step of the trial.")
    if memory.note_result:
        lines.append("Your note edit: " + memory.note_result + ".")
    if events:
        lines.append(events_line(memory))
    return "\n".join(line for line in lines if line)


def events_line(memory: AgentMemory, steady: bool = False) -> str:
    """The trial's last events in the agent's view ("" before the first). ``steady`` (the
    "cached" layout, which shows them before the progress line): at least the last
    :data:`EARLIER_EVENTS` too, but from a first event that moves on :data:`EVENTS_STRIDE` at a
    time, so a new event adds to the end of the line instead of rewriting it."""
    if not memory.events:
        return ""
    events = list(memory.events)
    if not steady:
        shown = events[-EARLIER_EVENTS:]
        return f"Earlier events this trial (last {len(shown)}): " + "; ".join(shown)
    total = memory.events.total
    first = max(0, (total - EARLIER_EVENTS) // EVENTS_STRIDE * EVENTS_STRIDE)
    shown = events[len(events) - (total - first) :]
    return f"Earlier events this trial (from event {first + 1} on): " + "; ".join(shown)


def recent_block(memory: AgentMemory) -> str:
    if not memory.recent:
        return "RECENT STEPS\n(none yet this trial)"
    return "RECENT STEPS\n" + " ".join(memory.recent)


def actions_block(lines: Iterable[str]) -> str:
    return "ACTIONS NOW\n" + " | ".join(lines) + "\n\nReply with the JSON only."


def reflect_prompt(system: str, memory: AgentMemory, trial_summary: str, head: str = "") -> Prompt:
    """The trial-end request to rewrite the notes into lessons and plans (``head``: a first
    paragraph, the seat's own line in the "cached" layout)."""
    notes = memory.pending_notes or []
    body = "\n".join(notes) if notes else "(you had no notes)"
    user = "\n".join(
        [
            *([head, ""] if head else []),
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
