"""The OpenSocialJax protocol skeleton: one turn, one reply, one step, one trial end.

:class:`OSJProtocol` owns the order of everything both grid games do the same way; a game is a
subclass that fills the hooks (as an XLand-MiniGrid env fills its step):

- ``snapshot(state)``: the numpy values of one state a turn reads (with ``frozen``, ``pos``,
  ``trial``, ``step`` and the ``legal`` mask);
- the blocks that depend on the game: ``progress``, ``rules_block`` (RULES YOU KNOW),
  ``sighting_now`` / ``others_footer`` (OTHER AGENTS), ``now_block`` and ``action_lines``;
- ``look`` (what the agent sees this turn goes into its memory) and ``record`` (what one
  transition leaves in it, calling :meth:`OSJProtocol.track_others` for the agents in view);
- the trial end: ``trial_summary``, ``sighting_summary`` and ``others_summary_end`` (EARLIER
  TRIALS);
- the system prompt (``system_values``, from the game's ``prompts/system.md``), the stateless
  ``render``, the ``legal_mask`` and the parser's ``name_map``, ``parse_context`` and
  ``illegal_reason``;
- ``revealed_block(state)``: the episode's hidden rules in words, shown every turn when the
  protocol's ``reveal`` option is on (the reference harness's upper bound; off by default).

Options (``env.text_protocol(**options)``; a harness builds one instance per distinct option
set, so a seat's own options, such as its role, are options of its instance): ``role`` (item 1.5
of the system prompt), ``reveal`` and ``layout``.

Layouts (docs/experiments.md, "Prompt layouts"): ``"paper"`` is the order of the paper's
listings 1 and 3: the system prompt opens with the agent's letter and holds its role; a turn is
the progress line, RULES YOU KNOW, HIDDEN RULES, YOUR NOTES, EARLIER TRIALS, then what changes
each step. ``"cached"`` (the default) says the same things in the order a prefix cache reuses:
the system prompt is the game text every seat shares (no letter, no role); a turn opens with
HIDDEN RULES (every seat's), then the seat's own ``You are agent X.`` line and role, then what a
seat keeps for a trial, least changed first (EARLIER TRIALS, the places it has mapped, YOUR
NOTES, RULES YOU KNOW, the trial's earlier events), then the progress line and the blocks that
change each step.

A frozen agent is not called (it stays); an invalid reply stays; a trial end that another trial
follows asks every agent to rewrite its notes (a ``kind="reflect"`` prompt).
"""

from __future__ import annotations

import abc
import json
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np

from dilemmax.envs.osj import blocks as B
from dilemmax.envs.osj.memory import AgentMemory, Sighting, open_next_trial, remember_reply
from dilemmax.envs.osj.prompts import fill, prompt_text
from dilemmax.envs.osj.replies import parse_reflect_reply, parse_step_reply, reply_schema
from dilemmax.envs.osj.view import FACING_NAMES, agent_letter
from dilemmax.envs.text import NoReply, ParsedReply, Prompt, TextProtocol, check_layout
from dilemmax.envs.text_parsing import guarded

ROLES = (None, "cooperator", "defector")  # item 1.5 of the paper's Schelling-diagram runs


class TurnState(Protocol):
    """What the skeleton reads of a game's snapshot of one state (the game adds the rest)."""

    frozen: np.ndarray  # int[A] steps each agent still cannot act
    pos: np.ndarray  # int[A, 2] (row, col)
    trial: int  # the trial being played (0-based)
    step: int  # step within the trial
    legal: np.ndarray | None  # bool[A, num_actions]


MemoryT = TypeVar("MemoryT", bound=AgentMemory)
SnapT = TypeVar("SnapT", bound=TurnState)


def legal_tuple(row) -> tuple[int, ...]:
    """The legal actions of one bool[num_actions] row, as plain ints."""
    return tuple(int(a) for a in np.flatnonzero(row))


class OSJProtocol(TextProtocol, Generic[MemoryT, SnapT]):
    """The OpenSocialJax agent protocol for one env (see the module docstring).

    Args:
        env: the game's env.
        num_actions: the size of the game's action space.
        role: None, or "cooperator" / "defector": item 1.5 of the system prompt used by the
            paper's Schelling-diagram runs (Listing 5).
        reveal: tell the agent the episode's hidden rules from its first turn (the system
            prompt says so in item 1.6 and every turn shows them under HIDDEN RULES). Off by
            default, as in the paper's runs.
        layout: "cached" (default) or "paper": the order of the prompt's parts (module
            docstring).
    """

    # 2: in the "cached" layout the trial's events grow at the end of their line, and
    # open_harvest's RULES YOU KNOW leaves its tallies to NOW (both stay the same from step to
    # step); 1: the "cached" layout; 0: the paper's order, now layout="paper"
    protocol_version = 2

    package: ClassVar[str]  # the game's package, whose prompts/ folder holds its prompt texts
    memory_type: ClassVar[type[AgentMemory]]  # the game's memory (a dataclass)
    modes: ClassVar[tuple[str, ...]]  # the reply's "mode" values
    goal_types: ClassVar[tuple[str, ...]]  # the reply's "goal.type" values
    stay: ClassVar[int]  # the action of an invalid reply and of a frozen agent
    name_map: Mapping[str, int]  # upper-case action names without spaces / underscores -> action

    def __init__(
        self,
        env,
        num_actions: int,
        role: str | None = None,
        reveal: bool = False,
        layout: str = "cached",
    ):
        if role not in ROLES:
            raise ValueError(f"role must be None, 'cooperator' or 'defector', got {role!r}")
        if not isinstance(reveal, bool):
            raise ValueError(f"reveal must be true or false, got {reveal!r}")
        self.env = env
        self.num_actions = num_actions
        self.role = role
        self.reveal = reveal
        self.layout = check_layout(layout)
        self._systems: dict[str, str] = {}
        self.schema = reply_schema(self.modes, self.goal_types, num_actions)

    # ------------------------------------------------------------------ hooks of the game
    @abc.abstractmethod
    def snapshot(self, state) -> SnapT:
        """The numpy values of one unbatched state that a turn reads, read once."""

    @abc.abstractmethod
    def legal_mask(self, state) -> np.ndarray:
        """bool[A, num_actions]: the env's legal actions, in numpy."""

    def system_values(self, agent: str) -> dict[str, Any]:
        """The values of the game's own ``${...}`` fields of ``prompts/system.md`` (beyond
        ``me``, ``n``, ``letters``, ``steps``, ``trials`` and ``role``; none by default)."""
        return {}

    @abc.abstractmethod
    def progress(self, s: SnapT, i: int) -> str:
        """The first line of a turn: trial, step and the agent's score this trial."""

    @abc.abstractmethod
    def rules_block(self, memory: MemoryT) -> str:
        """RULES YOU KNOW: what the agent's own observations taught it (episode-long)."""

    @abc.abstractmethod
    def sighting_now(self, j: int, sighting: Sighting) -> str:
        """What the agent saw of agent ``j`` this trial, after its place (OTHER AGENTS)."""

    def others_footer(self, memory: MemoryT) -> list[str]:
        """Lines closing OTHER AGENTS (none by default)."""
        return []

    def look(self, memory: MemoryT, s: SnapT, i: int) -> None:
        """Adds what agent ``i`` sees now to its memory of the map (nothing by default)."""

    def revealed_block(self, state) -> str:
        """HIDDEN RULES: the episode's hidden rules in words, read from ``state.config`` (only
        with ``reveal``)."""
        raise NotImplementedError(f"{type(self).__name__} cannot reveal its rules")

    @abc.abstractmethod
    def now_block(self, s: SnapT, i: int, memory: MemoryT | None, mapped: bool = True) -> str:
        """NOW: place, hand or status, what is in view, the map (``memory`` None: the stateless
        view, without what the agent remembers; ``mapped`` False: without ``mapped_block``)."""

    def mapped_block(self, s: SnapT, memory: MemoryT) -> str:
        """The places the agent has mapped, the same every trial (part of NOW in the "paper"
        layout; before the progress line in the "cached" one). None by default."""
        return ""

    @abc.abstractmethod
    def action_lines(self, s: SnapT, i: int) -> list[str]:
        """One line per legal action, saying what it would do (ACTIONS NOW)."""

    @abc.abstractmethod
    def record(self, memory: MemoryT, i: int, state, actions, info: dict, next_state) -> None:
        """What one transition leaves in agent ``i``'s memory (``info``: numpy leaves)."""

    @abc.abstractmethod
    def trial_summary(self, memory: MemoryT, number: int) -> str:
        """EARLIER TRIALS: what the agent did in the trial ``number`` (1-based) that ended."""

    @abc.abstractmethod
    def sighting_summary(self, j: int, sighting: Sighting) -> str:
        """EARLIER TRIALS: what the agent saw of agent ``j`` in the trial that ended."""

    def others_summary_end(self, memory: MemoryT) -> str:
        """What closes the trial-end line about the others (a full stop by default)."""
        return "."

    def parse_context(self, frozen: bool) -> dict[str, Any]:
        """What the parser needs beyond the legal set, as plain values (none by default)."""
        return {}

    def illegal_reason(self, context: Mapping[str, Any]) -> Callable[[int], str] | None:
        """Why an action outside the legal set is illegal, for the parse error (None: no
        reason is given)."""
        return None

    # ------------------------------------------------------------------ system prompt
    def system_prompt(self, agent: str) -> str:
        if agent not in self._systems:
            env = self.env
            paper = self.layout == "paper"
            values = {
                "you": f"You are agent {agent_letter(env.agent_index[agent])},"
                if paper
                else "You are",
                "n": env.num_agents,
                "letters": ", ".join(agent_letter(k) for k in range(env.num_agents)),
                "steps": env.trial_steps,
                "trials": env.num_trials,
                "role": self._role_item() if paper else "",
                "reveal": self._reveal_item(),
            }
            values.update(self.system_values(agent))
            self._systems[agent] = fill(self.package, "system.md", **values)
        return self._systems[agent]

    def identity(self, agent: str) -> str:
        """The seat's own opening of a turn in the "cached" layout: its letter, and its role."""
        line = f"You are agent {agent_letter(self.env.agent_index[agent])}."
        return line + self._role_item()

    def _role_item(self) -> str:
        """Item 1.5 of the system prompt when a role is set (on a line of its own), else ""."""
        return f"\n{prompt_text(self.package, f'role_{self.role}.md')}" if self.role else ""

    def _reveal_item(self) -> str:
        """Item 1.6 of the system prompt when the rules are revealed (a line of its own)."""
        return f"\n{prompt_text(self.package, 'reveal.md')}" if self.reveal else ""

    # ------------------------------------------------------------------ parsing
    def parse(self, reply: str, state, agent: str) -> ParsedReply:
        """The stateless parser (same reply format as a turn's). Total."""
        return guarded(self._parse, self._invalid)(reply, state, agent)

    def _parse(self, reply: str, state, agent: str) -> ParsedReply:
        i = self.env.agent_index[agent]
        frozen = int(np.asarray(state.frozen)[i]) > 0
        legal = legal_tuple(self.legal_mask(state)[i])
        return self.parse_act(reply, legal, self.parse_context(frozen))

    def _invalid(self, error: str) -> ParsedReply:
        return ParsedReply(self.stay, False, error)

    def parse_act(self, reply, legal, context: Mapping[str, Any]) -> ParsedReply:
        """A step reply against the legal set ``legal``."""
        return parse_step_reply(
            reply, legal, self.name_map, self.num_actions, self.stay, self.modes,
            self.goal_types, self.illegal_reason(context),
        )  # fmt: skip

    def example_reply(self, prompt: Prompt, action: int | None, rng: Any = None) -> str:
        """A step reply of a typical length (a note added on one step in forty), or a rewrite."""
        if prompt.kind == "reflect":
            return json.dumps({"lessons": ["Clean first, then harvest."], "plans": ["Explore."]})
        added = rng is not None and rng.random() < 0.025
        note = {"op": "add", "id": 0, "text": "a note"} if added else {"op": "none", "id": 0}
        return json.dumps(
            {
                "why_this_move": "This move serves my current goal given what I see now. " * 3,
                "mode": self.modes[0],
                "goal": {"type": self.goal_types[0], "cell": [3, 4], "why": "a stand-in goal"},
                "note": {**note, "text": "a note" if added else ""},
                "action": int(action or 0),
            }
        )

    def parse_reply(self, reply: str, prompt: Prompt) -> ParsedReply:
        """A step reply (JSON) or a trial-end rewrite, by ``prompt.kind``. Total, linear time."""
        return guarded(self._parse_reply, self._invalid)(reply, prompt)

    def _parse_reply(self, reply: str, prompt: Prompt) -> ParsedReply:
        if prompt.kind == "reflect":
            return parse_reflect_reply(reply, self.stay)
        return self.parse_act(reply, prompt.legal, prompt.context)

    # ------------------------------------------------------------------ play interface
    def new_memory(self, agent: str) -> MemoryT:
        return self.memory_type(agent, self.env.agent_index[agent])

    def turn(self, state, agent: str, memory: MemoryT) -> Prompt | NoReply:
        i = self.env.agent_index[agent]
        s = self.snapshot(state)
        if s.frozen[i] > 0:
            return NoReply(self.stay)
        self.look(memory, s, i)
        position = (int(s.pos[i][0]), int(s.pos[i][1]))
        blocks = [
            *self._kept_blocks(state, s, i, memory, agent),
            self.others_block(memory, s.step),
            B.plan_block(memory, s.step, position),
            B.last_step_block(memory, events=self.layout == "paper"),
            B.recent_block(memory),
            self.now_block(s, i, memory, mapped=self.layout == "paper"),
            B.actions_block(self.action_lines(s, i)),
        ]
        context = {"step": s.step, "trial": s.trial, "position": position}
        context.update(self.parse_context(False))
        return Prompt(
            self.system_prompt(agent), "\n\n".join(b for b in blocks if b), "act",
            legal_tuple(s.legal[i]), context, self.schema,
        )  # fmt: skip

    def _kept_blocks(self, state, s: SnapT, i: int, memory: MemoryT, agent: str) -> list[str]:
        """The blocks of a turn before OTHER AGENTS, in the protocol's layout: the progress line
        and what the agent keeps for the episode or the trial."""
        hidden = self.revealed_block(state) if self.reveal else ""
        rules, notes, earlier = (
            self.rules_block(memory), B.notes_block(memory), B.earlier_trials_block(memory)
        )  # fmt: skip
        if self.layout == "paper":
            return [self.progress(s, i), rules, hidden, notes, earlier]
        events = B.events_line(memory, steady=True)
        kept = [earlier, self.mapped_block(s, memory), notes, rules, events]
        return [hidden, self.identity(agent), *kept, self.progress(s, i)]

    def others_block(self, memory: MemoryT, step: int) -> str:
        """OTHER AGENTS: each agent seen this trial, where and when, and what it was seen do."""
        lines = ["OTHER AGENTS (what you have seen yourself)"]
        for j, s in sorted(memory.others.items()):
            if not s.seen:
                continue
            ago = "now" if s.last_step >= step - 1 else f"{step - 1 - s.last_step} steps ago"
            lines.append(
                f"Agent {agent_letter(j)}: last seen {ago} at {s.position} facing "
                f"{FACING_NAMES[s.facing]}; " + self.sighting_now(j, s) + "."
            )
        if len(lines) == 1:
            lines.append("You have not seen any other agent this trial.")
        return "\n".join(lines + self.others_footer(memory))

    def after_reply(self, memory, agent, prompt, reply, parsed) -> None:
        remember_reply(memory, prompt, parsed)

    def after_step(self, memory, agent, state, actions, infos, next_state) -> list[Prompt]:
        i = self.env.agent_index[agent]
        info = {k: np.asarray(v) for k, v in infos.items()}
        self.record(memory, i, state, actions, info, next_state)
        if not bool(info["trial_done"]):
            return []
        return self._end_trial(memory, agent)

    def after_episode(self, memory, agent, final_state) -> None:
        """Nothing to add: the episode's last trial summary was written by ``after_step``."""

    # ------------------------------------------------------------------ memory updates
    def track_others(
        self,
        memory: MemoryT,
        i: int,
        step: int,
        positions,
        facings,
        view: set[tuple[int, int]],
        saw: Callable[[int, Sighting, tuple[int, int]], None],
    ) -> None:
        """Follows the other agents through agent ``i``'s view (``positions`` / ``facings`` of
        the state the view is of): entering and leaving it are events; ``saw(j, sighting,
        cell)`` adds what the game counts of an agent in view."""
        for j in range(self.env.num_agents):
            if j == i:
                continue
            cell = (int(positions[j][0]), int(positions[j][1]))
            sighting = memory.sighting(j)
            if cell not in view:
                if sighting.last_step == step - 1:
                    memory.events.append(f"t{step} Agent {agent_letter(j)} left your view.")
                continue
            if sighting.last_step != step - 1:
                memory.events.append(
                    f"t{step} Agent {agent_letter(j)} came into your view at {cell}."
                )
            sighting.last_step, sighting.position, sighting.facing = step, cell, int(facings[j])
            sighting.seen += 1
            saw(j, sighting, cell)

    def _end_trial(self, memory: MemoryT, agent: str) -> list[Prompt]:
        number = memory.trial + 1
        summary = self.trial_summary(memory, number)
        memory.earlier_trials.append(summary)
        others = [self.sighting_summary(j, s) for j, s in sorted(memory.others.items()) if s.seen]
        if others:
            memory.earlier_trials.append(
                f"Trial {number}, other agents: " + "; ".join(others)
                + self.others_summary_end(memory)
            )  # fmt: skip
        open_next_trial(memory, number)
        if number >= self.env.num_trials:
            return []
        head = self.identity(agent) if self.layout == "cached" else ""
        return [B.reflect_prompt(self.system_prompt(agent), memory, summary, head)]
