"""An OpenSocialJax agent's memory: its notes, its plan, its recent steps, its earlier trials.

:class:`AgentMemory` holds what both grid games keep; each game's memory is a subclass that adds
its own typed records (the RULES YOU KNOW ledger, what the agent has seen of the map, the
counts of the trial). The functions below are the protocol's rules for the shared parts: a
note edit, a goal change, what a reply leaves behind and what a trial end clears.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Generic, TypeVar

from dilemmax.envs.osj.view import manhattan
from dilemmax.envs.text import ParsedReply, Prompt

RECENT_STEPS = 15  # [paper] "the last 15 steps"
EARLIER_GOALS = 5  # earlier goals shown under YOUR PLAN (paper listing 3 shows 5)
MAX_NOTES = 40  # chosen: a bound on the notes block (an add beyond it is refused)
EVENTS_KEPT = 64  # chosen: events of the trial kept (LAST STEP shows the last few)


class EventLog(collections.deque):
    """The events of the trial seen in view, oldest first: the last :data:`EVENTS_KEPT` kept,
    and ``total``, how many were logged this trial (where a window of them starts, counted from
    the trial's first, stays put while events are added and older ones fall out)."""

    def __init__(self, events=(), maxlen: int | None = EVENTS_KEPT, total: int | None = None):
        super().__init__(events, maxlen)
        self.total = len(self) if total is None else total

    def append(self, event: str) -> None:
        super().append(event)
        self.total += 1

    def extend(self, events) -> None:
        for event in events:
            self.append(event)

    def clear(self) -> None:
        super().clear()
        self.total = 0

    def __reduce__(self):
        return type(self), (list(self), self.maxlen, self.total)


@dataclass
class Goal:
    """One goal the agent set (YOUR PLAN)."""

    number: int  # 1, 2, ... within the trial
    type: str  # one of the game's goal types
    cell: tuple[int, int] | None  # (row, col) the goal is about, if the reply gave one
    why: str  # the reply's reason, at most GOAL_WHY_CHARS
    set_step: int  # trial step the goal was set at
    start_distance: int | None  # Manhattan distance to ``cell`` when set
    end: str = ""  # "" while current; "done at step t" or 'abandoned at step t ("why")'


@dataclass
class Sighting:
    """What an agent saw of one other agent this trial (OTHER AGENTS); each game's subclass
    adds the counts of what it saw that agent do."""

    last_step: int = -1  # trial step it was last in view (-1: never)
    position: tuple[int, int] = (0, 0)  # (row, col) where it was last seen
    facing: int = 0  # its facing then (N, E, S, W = 0..3)
    seen: int = 0  # steps it was in view this trial


SightingT = TypeVar("SightingT", bound=Sighting)


@dataclass
class AgentMemory(Generic[SightingT]):
    """Per-agent memory for one episode of an OpenSocialJax game: the parts both games share.

    ``notes`` maps entry number -> text; ``carried`` are the entries of the last trial-end
    rewrite (lessons, then plans) with ``carried_split`` the number of lessons among them. A
    game's subclass sets ``sighting_type`` and adds its records; :meth:`clear_trial` clears the
    ones that belong to one trial.
    """

    sighting_type: ClassVar[type[Sighting]] = Sighting

    agent: str  # the agent's name ("agent_0")
    index: int  # its index in env.agents
    trial: int = 0  # the trial being played (0-based)
    notes: dict[int, str] = field(default_factory=dict)  # entry number -> text
    next_note: int = 1  # number of the next added entry
    carried: int = 0  # entries 1..carried came from the last rewrite
    carried_split: int = 0  # of those, entries 1..carried_split are lessons, the rest plans
    goals: list[Goal] = field(default_factory=list)  # this trial's, oldest first (<= 6 kept)
    next_goal: int = 1  # number of the next goal
    recent: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=RECENT_STEPS)
    )  # short lines of the agent's own last steps (RECENT STEPS)
    events: EventLog = field(default_factory=EventLog)  # the trial's, seen in view
    last_step: str = ""  # what the last action did (LAST STEP)
    note_result: str = ""  # what the last note edit did
    earlier_trials: list[str] = field(default_factory=list)  # summaries of finished trials
    others: dict[int, SightingT] = field(default_factory=dict)  # agent index -> this trial's
    modes: list[str] = field(default_factory=list)  # reported mode per answered step ("" none)
    pending_notes: list[str] | None = None  # notes at the trial end, shown in the rewrite prompt

    def sighting(self, j: int) -> SightingT:
        """This trial's record of agent ``j`` (a fresh one the first time)."""
        if j not in self.others:
            self.others[j] = self.sighting_type()
        return self.others[j]

    def clear_trial(self) -> None:
        """Clears the game's records that belong to the trial that ended (subclasses)."""


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


def current_goal(memory: AgentMemory) -> Goal | None:
    return memory.goals[-1] if memory.goals and not memory.goals[-1].end else None


def update_plan(memory: AgentMemory, goal: Mapping | None, step: int, position) -> None:
    """Keeps the current goal, or closes it and opens the new one."""
    if not goal:
        return
    current = current_goal(memory)
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
    """A new trial starts without goals, numbered from 1 again."""
    memory.goals.clear()
    memory.next_goal = 1


def start_trial_notes(memory: AgentMemory, lessons: list[str], plans: list[str]) -> None:
    """The rewrite becomes the new trial's notes, numbered from 1 (lessons, then plans)."""
    entries = lessons + plans
    memory.notes = {k + 1: text for k, text in enumerate(entries)}
    memory.next_note = len(entries) + 1
    memory.carried = len(entries)
    memory.carried_split = len(lessons)


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


# ----------------------------------------------------------------------------- trial ends
def open_next_trial(memory: AgentMemory, number: int) -> None:
    """At a trial boundary: closes the notes and the plan, and clears what belonged to the trial
    that ended (the game's trial records, sightings, recent steps and events). The rules ledger
    and the earlier trials' summaries stay."""
    end_trial_notes(memory)
    close_plan_at_trial_end(memory)
    memory.trial = number
    memory.clear_trial()
    memory.others = {}
    memory.recent.clear()
    memory.events.clear()
    memory.last_step = ""
    memory.note_result = ""


def end_trial_notes(memory: AgentMemory) -> None:
    """At a trial end the step-by-step notes are dropped; a failed rewrite leaves none."""
    memory.pending_notes = [f"[{k}] {memory.notes[k]}" for k in sorted(memory.notes)]
    start_trial_notes(memory, [], [])
