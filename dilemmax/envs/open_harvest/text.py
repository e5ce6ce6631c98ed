"""Text interface of OpenHarvest: one agent's view as a prompt, a reply as an action.

The prompt follows the paper's step message in spirit and information (Appendix A, Listings 2
and 4), worded for this project: a progress line, what the last step did, the agent's position,
facing, frozen and beam status, the trees and agents in its 11 x 11 window with absolute
(row, col) positions, the window drawn north-up, and the actions available now with what each
would do. The harness-side memory of the paper (rules learned, notes, earlier trials) belongs to
the arena's agent, not to this renderer.

Replies: a line ``ACTION <name or number>`` (e.g. ``ACTION north``, ``ACTION 6``), or a JSON
object with an ``"action"`` field (a number or a name). A reply naming no action, an unknown one,
or one that is not legal now (ZAP while the beam cools down; anything but STAY while frozen) is
invalid: the agent stays, as in the paper.
"""

from __future__ import annotations

import collections

import numpy as np

from dilemmax.envs import grid
from dilemmax.envs import osj_protocol as P
from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest.rendering import agent_letter, cell_token
from dilemmax.envs.text import NoReply, ParsedReply, Prompt, TextProtocol
from dilemmax.envs.text_parsing import guarded

MODES = ("harvest", "wait", "explore", "travel", "zap")
GOAL_TYPES = ("move_to", "eat", "wait", "zap")

_ALIASES = {
    "north": c.NORTH_ACTION, "n": c.NORTH_ACTION, "up": c.NORTH_ACTION,
    "south": c.SOUTH_ACTION, "s": c.SOUTH_ACTION, "down": c.SOUTH_ACTION,
    "east": c.EAST_ACTION, "e": c.EAST_ACTION,
    "west": c.WEST_ACTION, "w": c.WEST_ACTION,
    "turn left": c.TURN_LEFT, "turn_left": c.TURN_LEFT, "turnleft": c.TURN_LEFT,
    "left": c.TURN_LEFT,
    "turn right": c.TURN_RIGHT, "turn_right": c.TURN_RIGHT, "turnright": c.TURN_RIGHT,
    "right": c.TURN_RIGHT,
    "zap": c.ZAP, "fire": c.ZAP,
    "stay": c.STAY, "wait": c.STAY, "noop": c.STAY, "no-op": c.STAY,
}  # fmt: skip
_NAMES = {
    k.replace(" ", "").replace("_", "").replace("-", "").upper(): v for k, v in _ALIASES.items()
}
_FACING = ("north", "east", "south", "west")
_VIEW_OFFSETS = grid.view_offsets(c.VIEW_AHEAD, c.VIEW_BEHIND, c.VIEW_SIDE)


def _describe_apple(code: int) -> str:
    colour, stage = divmod(code - c.CODE_APPLE, c.NUM_STAGES)
    return f"{c.COLOUR_NAMES[colour]} {c.STAGE_NAMES[stage]} apple"


def _describe_cell(code: int) -> str:
    if code == c.CODE_WALL:
        return "wall"
    if code == c.CODE_GROUND:
        return "ground"
    if c.CODE_EMPTY_TREE <= code < c.CODE_APPLE:
        return f"empty {c.COLOUR_NAMES[code - c.CODE_EMPTY_TREE]} tree cell"
    return _describe_apple(code)


class HarvestTextProtocol(TextProtocol):
    """Renderer and parser for one OpenHarvest env.

    Args:
        env: the :class:`~dilemmax.envs.open_harvest.env.OpenHarvestEnv`.
        reply_format: "action_line" (``ACTION <name>``) or "json" (``{"action": <number>}``);
            the parser accepts both either way, the option only changes the instructions.
    """

    def __init__(self, env, reply_format: str = "action_line", role: str | None = None):
        if reply_format not in ("action_line", "json"):
            raise ValueError(f"reply_format must be 'action_line' or 'json', got {reply_format!r}")
        if role not in (None, "cooperator", "defector"):
            raise ValueError(f"role must be None, 'cooperator' or 'defector', got {role!r}")
        self.env = env
        self.reply_format = reply_format
        self.role = role
        self._systems: dict[str, str] = {}
        self.schema = P.reply_schema(MODES, GOAL_TYPES, c.NUM_ACTIONS)

    # ------------------------------------------------------------------ rules
    def system_prompt(self, agent: str) -> str:
        if agent not in self._systems:
            self._systems[agent] = self._system_prompt(agent)
        return self._systems[agent]

    def _system_prompt(self, agent: str) -> str:
        """The paper's system prompt (Listing 2) in this project's words, JSON reply included."""
        i = self.env.agent_index[agent]
        letters = ", ".join(agent_letter(k) for k in range(self.env.num_agents))
        role = f"\n{_ROLES[self.role]}" if self.role else ""
        return _HARVEST_SYSTEM.format(
            me=agent_letter(i), n=self.env.num_agents, letters=letters,
            steps=self.env.trial_steps, trials=self.env.num_trials, freeze=c.FREEZE_STEPS,
            role=role, curriculum=_curriculum_note(self.env),
        )  # fmt: skip

    def _reply_instructions(self) -> str:
        if self.reply_format == "json":
            return (
                'REPLY with one JSON object, e.g. {"why": "<short reason>", "action": 2}; the '
                "action is a number from ACTIONS NOW."
            )
        return (
            "REPLY with your reasoning if you like, then a last line ACTION <name or number> "
            "from ACTIONS NOW, e.g. ACTION north."
        )

    # ------------------------------------------------------------------ rendering
    def render(self, state, agent: str) -> str:
        i = self.env.agent_index[agent]
        s = _Snapshot(state, _legal_np(state))
        lines = [
            f"Trial {s.trial + 1} of {self.env.num_trials}, step {s.step} of "
            f"{self.env.trial_steps}. This trial: you ate {s.trial_eaten[i]} apples for "
            f"{s.trial_return[i]:g} points.",
            "LAST STEP: " + self._last_step(s, i),
            "RULES YOU KNOW: " + self._known_pays(state, i),
            "NOW: " + self._status(s, i),
        ]
        lines += self._in_view(s, i)
        lines.append("Map:")
        lines += self._map(s, i)
        lines.append("ACTIONS NOW")
        lines.append(" | ".join(self._action_effects(s, i)))
        lines.append(self._reply_instructions())
        return "\n".join(lines)

    def _last_step(self, s: _Snapshot, i: int) -> str:
        if s.step == 0 and s.time == 0:
            return "the episode has just started."
        if s.step == 0:
            return "a new trial has just started; everyone is back on a spawn cell."
        parts = [f"you did {c.ACTION_NAMES[s.last_action[i]].replace('_', ' ')}."]
        if s.last_ate_colour[i] >= 0:
            apple = f"{c.COLOUR_NAMES[s.last_ate_colour[i]]} {c.STAGE_NAMES[s.last_ate_stage[i]]}"
            parts.append(f"You ate a {apple} apple: {s.last_pay[i]:+g} points.")
        if s.last_hit_by[i] >= 0:
            parts.append(
                f"Agent {agent_letter(s.last_hit_by[i])}'s zap hit you: you were sent back to a "
                "spawn cell."
            )
        return " ".join(parts)

    def _known_pays(self, state, i: int) -> str:
        """The pays this agent has tasted itself this episode (never the hidden rest)."""
        known = np.asarray(state.known_pay)[i]
        pay = np.asarray(state.config.pay)
        tasted = [
            f"{c.COLOUR_NAMES[col]} {c.STAGE_NAMES[st]} -> {pay[col, st]:g}"
            for col in range(c.NUM_COLOURS)
            for st in range(c.NUM_STAGES)
            if known[col, st]
        ]
        if not tasted:
            return "you have not eaten anything yet this episode."
        return "points per apple you have been paid: " + "; ".join(tasted) + "."

    def _status(self, s: _Snapshot, i: int) -> str:
        r, q = s.pos[i]
        text = f"you are agent {agent_letter(i)}, at ({r}, {q}), facing {_FACING[s.dir[i]]}."
        if s.frozen[i] > 0:
            text += f" You are frozen: you cannot act for {s.frozen[i]} more step(s)."
        elif s.cooldown[i] > 0:
            text += f" Your beam is resting for {s.cooldown[i]} more step(s)."
        else:
            text += " Your beam is ready."
        return text

    def _window(self, s: _Snapshot, i: int) -> np.ndarray:
        """int32[11, 11, 2]: absolute cells of agent i's window."""
        offsets = _VIEW_OFFSETS[s.dir[i]]
        return offsets + s.pos[i]

    def _in_view(self, s: _Snapshot, i: int) -> list[str]:
        cells = self._window(s, i).reshape(-1, 2)
        inside = [(int(r), int(q)) for r, q in cells if 0 <= r < s.height and 0 <= q < s.width]
        inside.sort()
        apples, empty = [], []
        for r, q in inside:
            code = s.codes[r, q]
            if code >= c.CODE_APPLE:
                apples.append(f"({r}, {q}) {_describe_apple(code)}")
            elif code >= c.CODE_EMPTY_TREE:
                empty.append(f"({r}, {q}) {c.COLOUR_NAMES[code - c.CODE_EMPTY_TREE]}")
        agents = []
        for r, q in inside:
            j = s.agent_at.get((r, q))
            if j is None or j == i:
                continue
            note = f" (frozen for {s.frozen[j]} more steps)" if s.frozen[j] > 0 else ""
            agents.append(f"{agent_letter(j)} at ({r}, {q}) facing {_FACING[s.dir[j]]}{note}")
        return [
            f"Apples in view ({len(apples)}): " + ("; ".join(apples) or "none") + ".",
            f"Empty tree cells in view ({len(empty)}): " + ("; ".join(empty) or "none") + ".",
            "Other agents in view: " + ("; ".join(agents) or "none") + ".",
        ]

    def _map(self, s: _Snapshot, i: int) -> list[str]:
        cells = self._window(s, i)
        rows = range(int(cells[..., 0].min()), int(cells[..., 0].max()) + 1)
        cols = range(int(cells[..., 1].min()), int(cells[..., 1].max()) + 1)
        lines = ["     " + " ".join(f"{q:2d}" for q in cols)]
        for r in rows:
            tokens = []
            for q in cols:
                if not (0 <= r < s.height and 0 <= q < s.width):
                    tokens.append("##")
                elif (j := s.agent_at.get((r, q))) is not None:
                    tokens.append("ME" if j == i else "@" + agent_letter(j))
                else:
                    tokens.append(cell_token(int(s.codes[r, q])))
            lines.append(f"r{r:3d} " + " ".join(tokens))
        return lines

    def _action_effects(self, s: _Snapshot, i: int) -> list[str]:
        mask = s.mask[i]
        out = []
        for action in range(c.NUM_ACTIONS):
            if not mask[action]:
                continue
            name = c.ACTION_NAMES[action].replace("_", " ")
            direction = int(c.ACTION_MOVE_DIR[action])
            if direction >= 0:
                dr, dq = P.DIRECTION_DELTAS[direction]
                r, q = int(s.pos[i][0]) + dr, int(s.pos[i][1]) + dq
                out.append(f"{action} {name} -> ({r}, {q}): {self._move_target(s, r, q)}")
            elif action == c.ZAP:
                out.append(f"{action} zap ({self._beam_targets(s, i)})")
            else:
                out.append(f"{action} {name}")
        return out

    def _move_target(self, s: _Snapshot, r: int, q: int) -> str:
        if not (0 <= r < s.height and 0 <= q < s.width) or s.codes[r, q] == c.CODE_WALL:
            return "wall, you stay"
        if (j := s.agent_at.get((r, q))) is not None:
            return f"agent {agent_letter(j)} is there, blocked unless it leaves"
        what = _describe_cell(int(s.codes[r, q]))
        return f"{what}, you eat it" if s.codes[r, q] >= c.CODE_APPLE else what

    def _beam_targets(self, s: _Snapshot, i: int) -> str:
        hit = [
            agent_letter(j)
            for r, q in P.beam_cells(s.pos[i], s.dir[i])
            if (j := s.agent_at.get((r, q))) is not None and s.frozen[j] == 0
        ]
        return ("hits " + ", ".join(hit)) if hit else "no agent in the beam"

    # ------------------------------------------------------------------ parsing
    def parse(self, reply: str, state, agent: str) -> ParsedReply:
        """The stateless parser: JSON, an ``ACTION <x>`` line or a bare name. Total."""
        i = self.env.agent_index[agent]
        legal = _legal_np(state)[i]
        frozen = int(np.asarray(state.frozen)[i]) > 0
        return guarded(self._parse_act, self._invalid)(reply, _legal_tuple(legal), frozen)

    def _invalid(self, error: str) -> ParsedReply:
        return ParsedReply(c.STAY, False, error)

    def _parse_act(self, reply, legal, frozen: bool) -> ParsedReply:
        def why(action: int) -> str:
            name = c.ACTION_NAMES[action]
            return f"{name} is not legal now: " + (
                "you are frozen and can only stay" if frozen else "your beam is resting"
            )

        return P.parse_step_reply(
            reply, legal, _NAMES, c.NUM_ACTIONS, c.STAY, MODES, GOAL_TYPES, why
        )

    # ------------------------------------------------------------------ play interface
    def new_memory(self, agent: str) -> P.AgentMemory:
        memory = P.AgentMemory(agent, self.env.agent_index[agent])
        memory.ledger = _HarvestLedger()
        memory.extra = {"trees_seen": set(), "last_seen": {}, "watch": {}}
        return memory

    def turn(self, state, agent: str, memory: P.AgentMemory) -> Prompt | NoReply:
        i = self.env.agent_index[agent]
        s = _Snapshot(state, _legal_np(state))
        if s.frozen[i] > 0:
            return NoReply(c.STAY)
        position = (int(s.pos[i][0]), int(s.pos[i][1]))
        blocks = [
            f"Trial {s.trial + 1} of {self.env.num_trials}, step {s.step} of "
            f"{self.env.trial_steps}. This trial: you ate {s.trial_eaten[i]} apples for "
            f"{s.trial_return[i]:g} points.",
            memory.ledger.block(memory.extra, s.step),
            P.notes_block(memory),
            P.earlier_trials_block(memory),
            self._others_block(memory, s.step),
            P.plan_block(memory, s.step, position),
            P.last_step_block(memory),
            P.recent_block(memory),
            self._now_block(s, i, memory),
            P.actions_block(self._action_effects(s, i)),
        ]
        context = {"step": s.step, "trial": s.trial, "position": position, "frozen": False}
        return Prompt(
            self.system_prompt(agent), "\n\n".join(b for b in blocks if b), "act",
            _legal_tuple(s.mask[i]), context, self.schema,
        )  # fmt: skip

    def parse_reply(self, reply: str, prompt: Prompt) -> ParsedReply:
        """A step reply or a trial-end rewrite, by ``prompt.kind``. Total, linear time."""
        return guarded(self._parse_reply, self._invalid)(reply, prompt)

    def _parse_reply(self, reply: str, prompt: Prompt) -> ParsedReply:
        if prompt.kind == "reflect":
            return P.parse_reflect_reply(reply, c.STAY)
        return self._parse_act(reply, prompt.legal, bool(prompt.context.get("frozen", False)))

    def after_reply(self, memory, agent, prompt, reply, parsed) -> None:
        P.remember_reply(memory, prompt, parsed)

    def after_step(self, memory, agent, state, actions, infos, next_state) -> list[Prompt]:
        i = self.env.agent_index[agent]
        info = {k: np.asarray(v) for k, v in infos.items()}
        done = bool(info["trial_done"])
        step = int(state.trial_step)
        seen_state = state if done else next_state
        snap = _Snapshot(seen_state, None)
        view = P.view_cells(snap.pos[i], snap.dir[i], (snap.height, snap.width))
        trees = _Trees(state.config, seen_state)
        in_view = trees.in_view(view)
        self._record_own(memory, i, step, state, next_state, info, done)
        self._record_others(memory, i, step, snap, info, view, trees)
        memory.ledger.observe(memory, step + 1, info, trees, in_view)
        if not done:
            return []
        return self._end_trial(memory, agent)

    def after_episode(self, memory, agent, final_state) -> None:
        """Nothing to add: the last trial's summary was written by ``after_step``."""

    # ------------------------------------------------------------------ memory updates
    def _record_own(self, memory, i, step, state, next_state, info, done) -> None:
        stats = memory.trial_stats
        chosen = int(info["action"][i])
        before = tuple(int(v) for v in np.asarray(state.agent_pos)[i])
        after = before if done else tuple(int(v) for v in np.asarray(next_state.agent_pos)[i])
        name = c.ACTION_NAMES[chosen].replace("_", " ")
        if bool(info["frozen"][i]):
            text = "you were frozen and could not act"
        else:
            text = f"you chose {chosen} ({name})"
            if chosen in (c.NORTH_ACTION, c.SOUTH_ACTION, c.EAST_ACTION, c.WEST_ACTION):
                text += f" -> moved {before} -> {after}" if before != after else " -> blocked"
        short = f"t{step} {_SHORT[chosen]}" + (f" -> {after}" if before != after else "")
        if bool(info["ate"][i]):
            colour, stage = int(info["ate_colour"][i]), int(info["ate_stage"][i])
            pay = float(info["ate_pay"][i])
            apple = f"{c.COLOUR_NAMES[colour]} {c.STAGE_NAMES[stage]}"
            text += f"; you ate a {apple} apple: {pay:+g} points"
            short += f" ate {c.COLOUR_LETTERS[colour]}{c.STAGE_LETTERS[stage]} {pay:+g}"
            stats[("ate", colour, stage)] += 1
            stats["points"] += pay
            stats["apples"] += 1
            memory.ledger.paid(colour, stage, pay)
        if bool(info["zap_fired"][i]):
            stats["zaps"] += 1
        hitters = [j for j in range(self.env.num_agents) if bool(info["zap_hits"][j, i])]
        if hitters and bool(info["zapped"][i]):
            who = ", ".join(agent_letter(j) for j in hitters)
            text += f"; agent {who}'s zap sent you back to a spawn point"
            stats["zapped"] += 1
        memory.last_step = f"Last step ({step}): {text}."
        memory.recent.append(short)

    def _record_others(self, memory, i, step, snap, info, view, trees) -> None:
        for j in range(self.env.num_agents):
            if j == i:
                continue
            cell = (int(snap.pos[j][0]), int(snap.pos[j][1]))
            sighting = memory.others.setdefault(j, P.Sighting())
            letter = agent_letter(j)
            if cell not in view:
                if sighting.last_step == step - 1:
                    memory.events.append(f"t{step} Agent {letter} left your view.")
                continue
            if sighting.last_step != step - 1:
                memory.events.append(f"t{step} Agent {letter} came into your view at {cell}.")
            sighting.last_step, sighting.position, sighting.facing = step, cell, int(snap.dir[j])
            sighting.seen += 1
            if bool(info["ate"][j]):
                colour, stage = int(info["ate_colour"][j]), int(info["ate_stage"][j])
                sighting.counts[("ate", colour, stage)] += 1
                memory.events.append(
                    f"t{step} Agent {letter} ate a {c.COLOUR_NAMES[colour]} "
                    f"{c.STAGE_NAMES[stage]} apple at {cell}."
                )
            if bool(info["zap_fired"][j]):
                sighting.counts["fired"] += 1
            if bool(info["zap_hits"][j, i]) and bool(info["zapped"][i]):
                sighting.counts["hit_me"] += 1

    def _end_trial(self, memory, agent) -> list[Prompt]:
        stats = memory.trial_stats
        number = memory.trial + 1
        eaten = _eaten_phrase(stats)
        summary = (
            f"Trial {number}: you ate {stats['apples']} apples for {stats['points']:g} points"
            + (f" ({eaten})" if eaten else "")
            + f"; you zapped {stats['zaps']} times and were sent back {stats['zapped']} times."
        )
        memory.earlier_trials.append(summary)
        others = [self._other_line(j, s) for j, s in sorted(memory.others.items()) if s.seen]
        if others:
            memory.earlier_trials.append(
                f"Trial {number}, other agents: " + "; ".join(others) + "."
            )
        memory.ledger.end_trial()
        memory.extra["last_seen"] = {}
        memory.extra["watch"] = {}
        P.open_next_trial(memory, number)
        if number >= self.env.num_trials:
            return []
        return [P.reflect_prompt(self.system_prompt(agent), memory, summary)]

    @staticmethod
    def _other_line(j: int, s: P.Sighting) -> str:
        text = f"{agent_letter(j)} seen {s.seen} steps"
        ate = sum(v for k, v in s.counts.items() if isinstance(k, tuple))
        if ate:
            text += f", ate {ate} in your view ({_eaten_phrase(s.counts)})"
        if s.counts["fired"]:
            text += f", fired {s.counts['fired']} times in your view"
        if s.counts["hit_me"]:
            text += f", sent you back to a spawn point {s.counts['hit_me']} times"
        return text

    # ------------------------------------------------------------------ play blocks
    def _others_block(self, memory: P.AgentMemory, step: int) -> str:
        lines = ["OTHER AGENTS (what you have seen yourself)"]
        for j, s in sorted(memory.others.items()):
            if not s.seen:
                continue
            ago = "now" if s.last_step >= step - 1 else f"{step - 1 - s.last_step} steps ago"
            lines.append(
                f"Agent {agent_letter(j)}: last seen {ago} at {s.position} facing "
                f"{P.FACING_NAMES[s.facing]}; " + self._other_line(j, s).split(" ", 1)[1] + "."
            )
        if len(lines) == 1:
            lines.append("You have not seen any other agent this trial.")
        return "\n".join(lines)

    def _now_block(self, s: _Snapshot, i: int, memory: P.AgentMemory) -> str:
        trees = _Trees(s.config, None, snapshot=s)
        view = P.view_cells(s.pos[i], s.dir[i], (s.height, s.width))
        in_view = trees.in_view(view)
        extra = memory.extra
        for t in in_view:
            extra["trees_seen"].add(t)
            extra["last_seen"][t] = (s.step, bool(trees.apple[t]), int(trees.stage[t]))
        lines = ["NOW", self._status(s, i)]
        lines.append(
            "Patches in view: " + (trees.patch_lines(in_view, in_view_only=True) or "none") + "."
        )
        others = [
            f"{agent_letter(j)} at ({r}, {q})"
            for (r, q), j in sorted(s.agent_at.items(), key=lambda x: x[1])
            if j != i and (r, q) in view
        ]
        lines.append("Other agents in view: " + (", ".join(others) or "none") + ".")
        seen = extra["trees_seen"]
        if seen:
            lines.append(
                "Patches you have seen (same places every trial): " + trees.patch_spans(seen) + "."
            )
            out = trees.out_of_view_lines(seen - set(in_view), extra["last_seen"])
            if out:
                lines.append(
                    "Tree cells out of view, as you last saw them this trial: " + out + "."
                )
        clocks = memory.ledger.clocks(extra["watch"], in_view, trees)
        if clocks:
            lines.append("Apples in view whose clock you know: " + clocks + ".")
        waiting = memory.ledger.waiting_lines(s.step, trees)
        if waiting:
            lines.append(
                "Cells you are waiting on (you saw them emptied this trial and have not seen them "
                "regrow): " + waiting + "."
            )
        lines.append("Map:")
        lines += self._map(s, i)
        return "\n".join(lines)


def _legal_np(state) -> np.ndarray:
    """bool[A, 8]: the env's rule in numpy (a frozen agent only stays; zap needs a ready beam)."""
    frozen = np.asarray(state.frozen) > 0
    cooldown = np.asarray(state.cooldown) > 0
    mask = np.repeat(~frozen[:, None], c.NUM_ACTIONS, axis=1)
    mask[:, c.ZAP] &= ~cooldown
    mask[:, c.STAY] = True
    return mask


def _legal_tuple(row) -> tuple[int, ...]:
    return tuple(int(a) for a in np.flatnonzero(row))


def _eaten_phrase(counts) -> str:
    items = sorted((k[1], k[2], v) for k, v in counts.items() if isinstance(k, tuple))
    return ", ".join(f"{c.COLOUR_NAMES[col]} {c.STAGE_NAMES[st]} {v}" for col, st, v in items)


_SHORT = ("N", "S", "E", "W", "turnL", "turnR", "zap", "stay")


class _Trees:
    """numpy view of the orchard of one state: positions, colours, patches, apples, stages."""

    def __init__(self, config, state, snapshot=None):
        layout = config.layout
        self.pos = np.asarray(layout.tree_positions).astype(int)
        self.patch = np.asarray(layout.tree_patch).astype(int)
        self.colour = np.asarray(config.patch_colours).astype(int)[self.patch]
        self.index = np.asarray(layout.tree_index)
        self.neighbours = np.asarray(layout.neighbours)
        if snapshot is not None:
            self.apple, self.stage = snapshot.apple, snapshot.stage
        else:
            orchard = state.orchard
            self.apple = np.asarray(orchard.apple)
            self.stage = np.minimum(
                np.asarray(orchard.age) // np.maximum(np.asarray(orchard.stage_length), 1), 2
            )

    def in_view(self, view: set) -> list[int]:
        out = [int(self.index[r, q]) for r, q in view if self.index[r, q] >= 0]
        return sorted(out)

    def around(self, tree: int) -> int:
        """Apples hanging within Manhattan distance 2 of a tree."""
        padded = np.append(self.apple, False)
        return int(padded[self.neighbours[tree]].sum())

    def _name(self, trees) -> str:
        cells = self.pos[list(trees)]
        colour = c.COLOUR_NAMES[self.colour[next(iter(trees))]]
        return (
            f"{colour} rows {cells[:, 0].min()}-{cells[:, 0].max()} "
            f"cols {cells[:, 1].min()}-{cells[:, 1].max()}"
        )

    def _by_patch(self, trees) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for t in sorted(trees):
            out.setdefault(int(self.patch[t]), []).append(t)
        return out

    def patch_spans(self, trees) -> str:
        return "; ".join(self._name(ts) for ts in self._by_patch(trees).values())

    def patch_lines(self, trees, in_view_only=False) -> str:
        parts = []
        for ts in self._by_patch(trees).values():
            stages = [int(self.stage[t]) for t in ts if self.apple[t]]
            empty = sum(1 for t in ts if not self.apple[t])
            counts = ", ".join(f"{name} {stages.count(k)}" for k, name in enumerate(c.STAGE_NAMES))
            parts.append(
                f"{self._name(ts)}: {len(stages)} apples ({counts}), {empty} empty tree cells"
            )
        return "; ".join(parts)

    def out_of_view_lines(self, trees, last_seen) -> str:
        parts = []
        for ts in self._by_patch(trees).values():
            known = [last_seen[t] for t in ts if t in last_seen]
            if not known:
                continue
            steps = [k[0] for k in known]
            stages = [k[2] for k in known if k[1]]
            counts = ", ".join(f"{name} {stages.count(k)}" for k, name in enumerate(c.STAGE_NAMES))
            when = (
                f"step {min(steps)}"
                if min(steps) == max(steps)
                else f"steps {min(steps)}-{max(steps)}"
            )
            parts.append(
                f"{self._name(ts)}: {len(known)} cells last seen at {when}: {len(stages)} apples "
                f"({counts}) and {len(known) - len(stages)} empty cells"
            )
        return "; ".join(parts)


class _HarvestLedger:
    """RULES YOU KNOW of OpenHarvest, from the agent's own eating and watching (episode-long).

    pays: (colour, stage) -> [pay, times eaten]. regrowth: (colour, eaten stage) -> list of
    (steps, exact?) for cells seen emptied and later seen regrown. pending: tree -> emptied cell
    being waited on this trial. ripening: "unripe -> ripe" / "ripe -> over-ripe" -> steps, from
    apples watched since they appeared. rot: colour -> apples seen rotting.
    """

    def __init__(self):
        self.pays: dict[tuple[int, int], list] = {}
        self.regrowth: dict[tuple[int, int], list[tuple[int, bool]]] = {}
        self.pending: dict[int, dict] = {}
        self.ripening: dict[str, list[int]] = {}
        self.rot: collections.Counter = collections.Counter()
        self.rot_ages: list[int] = []

    def paid(self, colour: int, stage: int, pay: float) -> None:
        entry = self.pays.setdefault((colour, stage), [pay, 0])
        entry[1] += 1

    def observe(self, memory, now: int, info, trees: _Trees, in_view: list[int]) -> None:
        """Updates the ledger with one step's orchard events seen in view (``now`` = step after)."""
        watch = memory.extra["watch"]
        visible = set(in_view)
        for t in in_view:
            colour = int(trees.colour[t])
            if bool(info["emptied_eaten"][t]):
                self.pending[t] = {
                    "colour": colour, "stage": -1, "emptied": now, "around": trees.around(t),
                    "look": now, "around_look": trees.around(t),
                }  # fmt: skip
                watch.pop(t, None)
            elif t in self.pending:
                self.pending[t]["look"] = now
                self.pending[t]["around_look"] = trees.around(t)
            if bool(info["regrown"][t]) and t in self.pending:
                entry = self.pending.pop(t)
                key = (entry["colour"], entry["stage"])
                self.regrowth.setdefault(key, []).append((now - entry["emptied"], True))
                memory.events.append(
                    f"t{now - 1} Regrowth in your view: 1 {c.COLOUR_NAMES[colour]}."
                )
            elif bool(info["regrown"][t]) or bool(info["regrown_after_rot"][t]):
                memory.events.append(
                    f"t{now - 1} Regrowth in your view: 1 {c.COLOUR_NAMES[colour]} (you did not "
                    "see that cell being emptied)."
                )
            if bool(info["regrown"][t]) or bool(info["regrown_after_rot"][t]):
                watch[t] = {"since": now, "stage": 0, "stage_since": now}
            if bool(info["rotted"][t]):
                self.rot[colour] += 1
                if t in watch:
                    self.rot_ages.append(now - watch[t]["since"])
                watch.pop(t, None)
        for t in list(watch):
            if t not in visible:
                del watch[t]  # no longer watched without a gap
                continue
            stage = int(trees.stage[t]) if trees.apple[t] else -1
            entry = watch[t]
            if stage > entry["stage"]:
                label = f"{c.STAGE_NAMES[entry['stage']]} -> {c.STAGE_NAMES[stage]}"
                self.ripening.setdefault(label, []).append(now - entry["stage_since"])
                entry["stage"], entry["stage_since"] = stage, now
        # Cells emptied in view by an eater: fix the stage the apple had.
        for j in range(len(info["ate"])):
            t = int(info["ate_tree"][j])
            if t in self.pending and self.pending[t]["emptied"] == now:
                self.pending[t]["stage"] = int(info["ate_stage"][j])
        # A pending cell seen regrown after a gap: an upper bound.
        for t in list(self.pending):
            if t in visible and trees.apple[t] and self.pending[t]["emptied"] < now:
                entry = self.pending.pop(t)
                key = (entry["colour"], entry["stage"])
                self.regrowth.setdefault(key, []).append((now - entry["emptied"], False))

    def end_trial(self) -> None:
        self.pending.clear()

    def block(self, extra, step: int) -> str:
        lines = ["RULES YOU KNOW", "What you ate and what it paid you:"]
        if not self.pays:
            lines[-1] += " nothing yet this episode."
        else:
            by_colour: dict[int, list[str]] = {}
            for (colour, stage), (pay, times) in sorted(self.pays.items()):
                by_colour.setdefault(colour, []).append(
                    f"{c.STAGE_NAMES[stage]} -> {pay:g} points (x{times})"
                )
            lines[-1] += (
                " "
                + "; ".join(
                    f"{c.COLOUR_NAMES[col]}: " + ", ".join(v) for col, v in by_colour.items()
                )
                + "."
            )
        lines.append(
            "Regrowth you watched (cells you saw emptied; steps until a new apple appeared, <= "
            "when you looked away):"
        )
        keys = sorted(
            set(self.regrowth) | {(e["colour"], e["stage"]) for e in self.pending.values()}
        )
        if not keys:
            lines[-1] += " none yet."
        for key in keys:
            colour, stage = key
            stage_name = c.STAGE_NAMES[stage] if stage >= 0 else "an unknown stage"
            parts = [("" if exact else "<=") + str(n) for n, exact in self.regrowth.get(key, [])]
            waiting = [e for e in self.pending.values() if (e["colour"], e["stage"]) == key]
            text = f"{c.COLOUR_NAMES[colour]} cells eaten at {stage_name}: "
            text += ("regrew after " + ", ".join(parts) + " steps") if parts else "none seen regrow"
            if waiting:
                ups = max(e["look"] - e["emptied"] for e in waiting)
                around = sorted({e["around"] for e in waiting})
                text += (
                    f"; {len(waiting)} not regrown yet this trial (still empty up to {ups} steps "
                    f"after being emptied; apples around when emptied: "
                    f"{', '.join(str(a) for a in around)})"
                )
            lines.append(text)
        ripening = "; ".join(
            f"{label} after {', '.join(str(v) for v in steps)} steps"
            for label, steps in sorted(self.ripening.items())
        )
        lines.append(
            "Ripening you watched (apples kept in view from the moment they appeared): "
            + (ripening or "none yet")
            + "."
        )
        rot = ", ".join(f"{c.COLOUR_NAMES[col]} {n}" for col, n in sorted(self.rot.items()))
        ages = (
            f" (rotted {', '.join(str(a) for a in self.rot_ages)} steps after appearing)"
            if self.rot_ages
            else ""
        )
        lines.append("Apples you saw rot: " + (rot + ages if rot else "none") + ".")
        return "\n".join(lines)

    def clocks(self, watch, in_view, trees: _Trees) -> str:
        parts = []
        for t in in_view:
            if t in watch and trees.apple[t]:
                r, q = trees.pos[t]
                parts.append(
                    f"({r}, {q}) {c.COLOUR_NAMES[trees.colour[t]]} "
                    f"{c.STAGE_NAMES[watch[t]['stage']]} since step {watch[t]['stage_since']}"
                )
        return "; ".join(parts)

    def waiting_lines(self, step: int, trees: _Trees) -> str:
        parts = []
        for t, e in sorted(self.pending.items(), key=lambda x: -x[1]["emptied"]):
            r, q = trees.pos[t]
            stage = c.STAGE_NAMES[e["stage"]] if e["stage"] >= 0 else "?"
            head = f"({r}, {q}) {c.COLOUR_NAMES[e['colour']]} eaten {stage} at step {e['emptied']}"
            if e["look"] >= step:
                parts.append(f"{head}, empty for {step - e['emptied']} steps so far")
            else:
                parts.append(f"{head}, still empty when you last saw it at step {e['look']}")
        return "; ".join(parts)


class _Snapshot:
    """The numpy values of one state the renderer needs (read once per turn)."""

    def __init__(self, state, mask: np.ndarray | None):
        self.config = state.config
        layout = state.config.layout
        orchard = state.orchard
        self.apple = np.asarray(orchard.apple)
        self.stage = np.minimum(
            np.asarray(orchard.age) // np.maximum(np.asarray(orchard.stage_length), 1),
            c.NUM_STAGES - 1,
        )
        colour = np.asarray(state.config.patch_colours)[np.asarray(layout.tree_patch)]
        codes = np.where(np.asarray(layout.walls), c.CODE_WALL, c.CODE_GROUND).astype(int)
        pos = np.asarray(layout.tree_positions)
        codes[pos[:, 0], pos[:, 1]] = np.where(
            self.apple,
            c.CODE_APPLE + colour * c.NUM_STAGES + self.stage,
            c.CODE_EMPTY_TREE + colour,
        )
        self.codes = codes
        self.height, self.width = self.codes.shape
        self.pos = np.asarray(state.agent_pos).astype(int)
        self.dir = np.asarray(state.agent_dir).astype(int)
        self.frozen = np.asarray(state.frozen).astype(int)
        self.cooldown = np.asarray(state.cooldown).astype(int)
        self.trial = int(state.trial)
        self.step = int(state.trial_step)
        self.time = int(state.time)
        self.trial_eaten = np.asarray(state.trial_eaten).astype(int)
        self.trial_return = np.asarray(state.trial_return).astype(float).round(4)
        self.last_action = np.asarray(state.last_action).astype(int)
        self.last_ate_colour = np.asarray(state.last_ate_colour).astype(int)
        self.last_ate_stage = np.asarray(state.last_ate_stage).astype(int)
        self.last_pay = np.asarray(state.last_pay).astype(float).round(4)
        self.last_hit_by = np.asarray(state.last_hit_by).astype(int)
        self.agent_at = {(int(r), int(q)): j for j, (r, q) in enumerate(self.pos)}
        self.mask = mask


_ROLES = {
    "cooperator": (
        "1.5 YOUR ROLE: the group's total matters more to you than your own score. You will give "
        "up some of your own points, and spend your time on work that helps everyone, if it lets "
        "the others earn more."
    ),
    "defector": (
        "1.5 YOUR ROLE: only your own score matters to you. Earn as many points as you can "
        "yourself; what the other agents earn does not matter to you."
    ),
}


def _curriculum_note(env) -> str:
    """Sentences for the system prompt about curriculum options: pay levels that include a cost,
    and one pay order for every colour (empty in the paper's game)."""
    note = ""
    if min(getattr(env, "pay_levels", c.PAY_LEVELS)) < 0:
        note += (
            " Some apples COST points: eaten at the wrong stage for its colour, an apple can pay "
            "less than nothing."
        )
    if getattr(env, "shared_pay_order", False):
        note += (
            " In this game every colour pays by the same stage order: what one stage paid for "
            "one colour, it pays for all colours."
        )
    return note


_HARVEST_SYSTEM = """\
You are agent {me}, one of {n} agents ({letters}) in a grid world.

1. YOUR OBJECTIVE
1.1 Your score is the points paid by the apples YOU eat. Points earned by others do not count \
for you.
1.2 A trial starts with an apple on every tree, and apples also grow back during the trial; \
whether an emptied cell grows one back depends on what still hangs near it (2.3).
1.2b Apples come in several colours; each patch's colour is drawn at random, so two patches \
can share a colour. What an apple pays depends on its colour and its ripeness stage. That \
table is hidden and the same for every agent; you learn it by eating.{curriculum}
1.3 A trial lasts at most {steps} steps. Then the orchard is laid out again with unripe apples \
on every tree and you go back to a spawn point. The colours, the places of the patches and \
the hidden rules (2.2, 2.3) stay the same for all {trials} trials of the episode. A trial ends \
early once no apple is left anywhere (nothing can grow back then).
1.4 You are told only what YOU ate and what YOU see; you never see other agents' scores.{role}

2. THE WORLD
2.1 An apple has a visible RIPENESS that advances with time: unripe -> ripe -> over-ripe. An \
over-ripe apple rots after a while and vanishes, as if nobody had eaten it.
2.2 You eat an apple by walking onto its cell, which empties the cell. Its points depend on \
its colour and stage (hidden: read them off the points you get), and the stage you eat it at \
also sets how fast that cell comes back (2.3).
2.3 REGROWTH. An empty tree cell can grow a new apple, which always starts unripe; this is the \
only way a trial gives more apples than it started with.
- A cell whose apple was EATEN grows a new one ONLY while apples still hang close to it (within \
two steps). With none left around it, it NEVER grows one, so a patch eaten bare stays bare for \
the rest of the trial, however long you wait beside it.
- The more apples hang close to an empty cell, the sooner it grows one, and the drop is steep: \
with three or more around it a cell usually comes back within the trial; with two it takes \
many times longer; with one it rarely comes back; with none it never does. Apples in another \
patch do nothing for it.
- How fast an eaten cell comes back also depends on its colour and on the stage its apple had \
when it was eaten. This part is hidden: watch the cells you empty.
- A cell whose apple ROTTED grows a new one by itself a few steps later, whatever is around it.
2.4 Moves are compass moves (north, south, east, west) and do not change your facing; only \
turning does. Ground and empty tree cells are walkable; walls and other agents block you. \
Walking onto an apple eats it.
2.5 ZAP fires a short beam ahead: the cell you face, the one beyond it, and the two cells \
beside the faced cell. An agent it hits goes back to a spawn point and cannot act for the \
next {freeze} steps, losing those steps and the walk back. After you fire, your beam needs a \
short rest before it can fire again. A zap gives and costs nobody points and does nothing to \
apples.

3. HOW TO READ YOUR TURN
3.1 Positions are (row, col): row 0 is the NORTH edge, rows grow southward; col 0 is the WEST \
edge, columns grow eastward. North = row-1, south = row+1, east = col+1, west = col-1.
3.2 You see an 11x11 window that turns with you: 9 cells ahead, 1 behind and 5 to each side, \
so turning changes what you see. The map shows exactly those cells, drawn north-up with column \
numbers on top and row numbers on the left; cells beyond the edge are ##. ME = you, @B = agent \
B, ## = wall, .. = ground. An apple is its colour letter plus its stage letter: colours R red, \
Y yellow, G green, C cyan, P purple; stages g unripe, r ripe, o over-ripe (Yr = yellow ripe). \
An EMPTY tree cell is its colour letter in lower case plus _, e.g. y_.
3.3 RULES YOU KNOW: what you learned yourself: the points each colour and stage paid you; for \
cells you saw emptied, how many steps they took to grow back (by colour and by the stage the \
apple was eaten at); how long apples took to ripen and to rot while you watched; the rotting \
you saw. YOUR NOTES: yours alone, the only part written by you: what you have worked out about \
how to PLAY and what you mean to do next; nothing in it is checked or filled in for you. \
EARLIER TRIALS: one summary per finished trial: what you ate per colour and stage, and what \
you saw of the others. OTHER AGENTS: only what you saw in your own view. YOUR PLAN: your \
current goal and earlier ones. LAST STEP: what your last action did, events in your view and \
earlier events of the trial. RECENT STEPS: your last steps. NOW also lists the patches you have \
seen, how the ones out of view looked when you last saw them this trial, how long the apples \
you watched have been at their stage, and the emptied cells you are waiting on. ACTIONS NOW: \
what you can do now and where each move lands.
3.4 You know only what you see: other agents and patches exist beyond your view, but you are \
told nothing about them.

4. HOW TO ANSWER
4.1 Reply with ONE JSON object and nothing else:
{{"why_this_move": "<at most 500 characters>", "mode": "harvest" | "wait" | "explore" | \
"travel" | "zap", "goal": {{"type": "move_to" | "eat" | "wait" | "zap", "cell": [row, col], \
"why": "<at most 80 characters>"}}, "note": {{"op": "none" | "add" | "replace" | "delete", \
"id": <entry number to replace or delete, else 0>, "text": "<the entry to add, or the new \
wording of [id]; empty otherwise>"}}, "action": <one number from ACTIONS NOW>}}
4.2 mode = what you are working on: harvest (going to eat an apple), wait (staying near apples \
for them to ripen or grow back), explore (testing what you do not know yet: a colour or stage \
you have not eaten, or an emptied cell you want to watch), travel (moving to another patch), \
zap (firing the beam at an agent).
4.3 goal = the sub-goal this action serves. Keep the SAME goal from step to step until it is \
done or an event makes it pointless; when you change it, say why in "why". For eat, cell = the \
apple's cell; for wait, cell = where you wait; for zap, cell = the cell of the agent you aim at.
4.4 A reply that is not such an object, or whose action is not in ACTIONS NOW, makes you stay.

5. YOUR NOTES
5.1 What you ate and what it paid, and how long the cells you watched took to grow back, are \
kept for you under RULES YOU KNOW for the whole episode; do not copy them into your notes.
5.2 What is NOT kept for you is how to play. "note" is one EDIT to your notes, which are shown \
to you every step. Each entry has a number, like [3], that it keeps for the whole trial. Write \
down what you have worked out and what you mean to do: a way of eating that paid off or cost \
you later, how the patches behaved, what the others seem to be doing, what you will try next \
and why.
5.3 add: a new entry with "text". replace: entry [id] becomes "text"; do it as soon as an \
entry proves wrong or can be said better, including the lessons carried in from the last \
trial. delete: remove entry [id] when it is wrong and nothing replaces it. none: leave the \
notes as they are (right on most steps). A wrong entry left standing misleads you every step.
5.4 When a trial ends you will be asked to rewrite your notes into a short list. ONLY THAT \
LIST is carried into the next trial; the step-by-step entries are dropped. RULES YOU KNOW \
carries over by itself, so spend the list on how to play."""
