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

import json
import re

import numpy as np

from dilemmax.envs import grid
from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest.observation import terrain_codes
from dilemmax.envs.open_harvest.rendering import agent_letter, cell_token
from dilemmax.envs.text import ParsedReply, TextProtocol

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
_ACTION_LINE = re.compile(r"ACTION\s*[:=]?\s*([A-Za-z_\- ]+?|\d+)\s*[.!]?\s*$", re.IGNORECASE)
_FACING = ("north", "east", "south", "west")


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


def action_from_text(text: str) -> int | None:
    """The action a name or number stands for, or None."""
    key = text.strip().lower().strip(".!\"'`")
    if key.isdigit():
        value = int(key)
        return value if 0 <= value < c.NUM_ACTIONS else None
    return _ALIASES.get(key.replace("-", " ") if key != "no-op" else key)


class HarvestTextProtocol(TextProtocol):
    """Renderer and parser for one OpenHarvest env.

    Args:
        env: the :class:`~dilemmax.envs.open_harvest.env.OpenHarvestEnv`.
        reply_format: "action_line" (``ACTION <name>``) or "json" (``{"action": <number>}``);
            the parser accepts both either way, the option only changes the instructions.
    """

    def __init__(self, env, reply_format: str = "action_line"):
        if reply_format not in ("action_line", "json"):
            raise ValueError(f"reply_format must be 'action_line' or 'json', got {reply_format!r}")
        self.env = env
        self.reply_format = reply_format

    # ------------------------------------------------------------------ rules
    def system_prompt(self, agent: str) -> str:
        i = self.env.agent_index[agent]
        letters = ", ".join(agent_letter(k) for k in range(self.env.num_agents))
        steps, trials = self.env.trial_steps, self.env.num_trials
        return "\n".join(
            [
                f"You are agent {agent_letter(i)}, one of {self.env.num_agents} agents "
                f"({letters}) sharing an orchard on a grid.",
                "GOAL: your score is the points of the apples YOU eat. Nobody else's points "
                "count for you, and you never see them.",
                f"TRIALS: {trials} trials of at most {steps} steps each. Every trial starts with "
                "an unripe apple on every tree and everyone on a spawn cell. The map, the colour "
                "of each patch and the hidden rules below stay the same for the whole episode.",
                "APPLES: each patch has one colour (red, yellow, green, cyan or purple; two "
                "patches may share one). An apple ripens: unripe -> ripe -> over-ripe, then it "
                "rots and vanishes. Walk onto an apple to eat it.",
                "HIDDEN PAY: what an apple pays depends on its colour and its stage at the moment "
                "you eat it. The table is hidden and the same for everyone; learn it by eating.",
                "REGROWTH: a cell whose apple was eaten can grow a new one only while apples hang "
                "within two cells of it. The more apples around it, the sooner it comes back; "
                "with none around it never does, so a patch eaten bare stays bare for the rest "
                "of the trial. How fast it comes back also depends, in a hidden way, on the "
                "colour and the stage the apple was eaten at. A cell whose apple rotted grows a "
                "new one by itself a few steps later. A trial ends early once no apple is left.",
                "MOVING: north/south/east/west move one cell on the compass and keep your "
                "facing; turn left/right change the facing only. Ground and empty tree cells "
                "are walkable; walls and other agents block.",
                "ZAP fires a short beam: the cell you face, the one beyond it, and the two cells "
                "beside the faced cell. An agent it hits goes back to a spawn cell and cannot "
                f"act for {c.FREEZE_STEPS} steps. After firing, your "
                "beam needs a short rest. A zap gains and costs no points.",
                "READING THE MAP: positions are (row, col); row 0 is the north edge, col 0 the "
                "west edge. You see 9 cells ahead, 1 behind and 5 to each side; the window is "
                "drawn north-up. ## = wall or outside the map, .. = ground, ME = you, @B = agent "
                "B. An apple is colour letter + stage letter (R, Y, G, C, P; g unripe, r ripe, "
                "o over-ripe), e.g. Cr = cyan ripe. An empty tree cell is the lower-case colour "
                "letter + _, e.g. c_.",
                self._reply_instructions(),
            ]
        )

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
        s = _Snapshot(state, np.asarray(self.env.legal_actions(state)))
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
            parts.append(f"You ate a {apple} apple: +{s.last_pay[i]:g} points.")
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
        offsets = grid.view_offsets(c.VIEW_AHEAD, c.VIEW_BEHIND, c.VIEW_SIDE)[s.dir[i]]
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
                dr, dq = grid.DIRECTION_DELTAS[direction].tolist()
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
        cells, inside = grid.beam_cells(s.pos[i], s.dir[i], (s.height, s.width))
        hit = [
            agent_letter(j)
            for (r, q), ok in zip(np.asarray(cells).tolist(), np.asarray(inside), strict=True)
            if ok and (j := s.agent_at.get((r, q))) is not None and s.frozen[j] == 0
        ]
        return ("hits " + ", ".join(hit)) if hit else "no agent in the beam"

    # ------------------------------------------------------------------ parsing
    def parse(self, reply: str, state, agent: str) -> ParsedReply:
        i = self.env.agent_index[agent]
        text = reply if isinstance(reply, str) else ""
        action, rationale, error = _find_action(text)
        if action is None:
            return ParsedReply(c.STAY, False, error, rationale)
        mask = np.asarray(self.env.legal_actions(state))[i]
        if not mask[action]:
            frozen = int(np.asarray(state.frozen)[i]) > 0
            why = "you are frozen and can only stay" if frozen else "your beam is resting"
            return ParsedReply(c.STAY, False, f"{c.ACTION_NAMES[action]} is not legal now: {why}",
                               rationale)  # fmt: skip
        return ParsedReply(action, True, "", rationale)


def _find_action(text: str) -> tuple[int | None, str, str]:
    """(action or None, the text around it, error message) from a reply."""
    stripped = text.strip()
    if not stripped:
        return None, "", "empty reply"
    # JSON object anywhere in the reply.
    start, end = stripped.find("{"), stripped.rfind("}")
    if 0 <= start < end:
        try:
            obj = json.loads(stripped[start : end + 1])
        except json.JSONDecodeError:
            obj = None
        if isinstance(obj, dict) and "action" in obj:
            action = action_from_text(str(obj["action"]))
            why = str(obj.get("why", obj.get("why_this_move", "")))
            if action is None:
                return None, why, f"unknown action {obj['action']!r}"
            return action, why, ""
    # The last "ACTION <x>" line.
    lines = stripped.splitlines()
    for k in range(len(lines) - 1, -1, -1):
        match = _ACTION_LINE.search(lines[k].strip())
        if match:
            rationale = "\n".join(lines[:k] + lines[k + 1 :]).strip()
            action = action_from_text(match.group(1))
            if action is None:
                return None, rationale, f"unknown action {match.group(1).strip()!r}"
            return action, rationale, ""
    # A bare action name or number as the whole reply.
    action = action_from_text(stripped)
    if action is not None:
        return action, "", ""
    return None, stripped, "no 'ACTION <name>' line and no JSON object with an 'action' field"


class _Snapshot:
    """The numpy values of one state the renderer needs (read once per render)."""

    def __init__(self, state, mask: np.ndarray):
        self.codes = np.asarray(terrain_codes(state)).astype(int)
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
