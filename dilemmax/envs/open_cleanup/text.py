"""Text interface of OpenCleanup: one agent's view as a prompt, a reply as one of the actions.

The prompt follows the paper's step prompt in spirit and in information (Appendix A, listing 3):
a progress line, the agent's place, facing and pick-up window, what its last shot did, the
11 x 11 window drawn north-up with absolute row / column labels, and the actions available now
(a shot lists the cells its beam would cover). The reply names one action: ``ACTION <name>`` or
``ACTION <number>`` (a JSON object ``{"action": <number>}`` is accepted too). An unreadable or
illegal reply is recorded as invalid and the agent stays (action 7), as in the paper.
"""

from __future__ import annotations

import json
import re

import numpy as np

from dilemmax.envs import grid as G
from dilemmax.envs.open_cleanup import constants as C
from dilemmax.envs.open_cleanup.observation import VIEW_AHEAD, VIEW_BEHIND, VIEW_SIDE
from dilemmax.envs.open_cleanup.rendering import agent_letter, cell_token
from dilemmax.envs.text import ParsedReply, TextProtocol

_ALIASES = {
    "n": C.NORTH_ACTION,
    "up": C.NORTH_ACTION,
    "s": C.SOUTH_ACTION,
    "down": C.SOUTH_ACTION,
    "e": C.EAST_ACTION,
    "right": C.EAST_ACTION,
    "w": C.WEST_ACTION,
    "left": C.WEST_ACTION,
    "turnleft": C.TURN_LEFT_ACTION,
    "turnright": C.TURN_RIGHT_ACTION,
    "pickup": C.PICK_UP_ACTION,
    "pick": C.PICK_UP_ACTION,
    "wait": C.STAY_ACTION,
    "noop": C.STAY_ACTION,
}
_ACTION_LINE = re.compile(
    r"ACTION\s*[:=]?\s*([A-Za-z_ \-]+?|\d+)\s*$", re.IGNORECASE | re.MULTILINE
)


def _name_key(text: str) -> str:
    return re.sub(r"[\s_\-]+", "", text.strip().lower())


def _cell_name(code: int) -> str:
    if C.WASTE_BASE <= code < C.WASTE_BASE + C.NUM_WASTE_TYPES:
        hue, shade = divmod(code - C.WASTE_BASE, C.NUM_SHADES)
        return f"{cell_token(code)} ({C.HUE_NAMES[hue]}-{C.SHADE_NAMES[shade]})"
    names = {C.GROUND: "ground", C.WALL: "wall", C.WATER: "water", C.ORCHARD: "orchard soil"}
    if code == C.APPLE:
        return "apple"
    if code >= C.STATION_BASE:
        return f"station of tool {code - C.STATION_BASE}"
    return names[code]


class OpenCleanupText(TextProtocol):
    """Renderer and parser for one OpenCleanup env (see the module docstring)."""

    def __init__(self, env):
        self.env = env
        self.names = C.ACTION_NAMES[: env.num_actions]

    # ------------------------------------------------------------------ prompt
    def system_prompt(self, agent: str) -> str:
        me = agent_letter(self.env.agent_index[agent])
        letters = ", ".join(agent_letter(i) for i in range(self.env.num_agents))
        zap = (
            "\n- zap (9) sends an agent hit by the beam to a spawn point, frozen for 12 steps."
            if self.env.zap
            else ""
        )
        return (
            f"You are agent {me}, one of {self.env.num_agents} agents ({letters}) on a grid.\n"
            "Score: +1 for every apple YOU eat (walk onto it). Apples grow in the orchard only "
            "while the river is clean enough; every waste cell in the river adds to the "
            "pollution.\n"
            "Waste has a hue (R red, Y yellow, G green, C cyan, P purple) and a shade "
            "(0 light, 1 mid, 2 dark). Dark must become mid, mid must become light, and light "
            "is cleared to water.\n"
            "Tools: pick_up (8) while standing on a station T0..T3 takes that base tool. Your "
            "window is your last two pick-ups, oldest first. Some ordered pairs are hidden "
            "recipes of working tools (7 of the 16 pairs work; which one does what is hidden "
            "and stays the same for the whole episode); the rest do nothing. Fire (6) to find "
            "out.\n"
            "The beam covers the cell you face, the one beyond it, and the two cells diagonally "
            "beside the faced cell. Moves north/south/east/west do not change your facing; "
            "turn_left / turn_right do. Walls and other agents block moves.\n"
            f"An episode has {self.env.num_trials} trials of {self.env.trial_steps} steps on "
            "the same map and recipes; each trial re-lays the map (river polluted again, hands "
            f"empty, apples gone).{zap}\n"
            "Reply with one line: ACTION <name or number>, e.g. ACTION pick_up."
        )

    def render(self, state, agent: str) -> str:
        i = self.env.agent_index[agent]
        grid = np.asarray(state.grid)
        positions = np.asarray(state.positions)
        orientations = np.asarray(state.orientations)
        row, col = (int(v) for v in positions[i])
        facing = int(orientations[i])
        window = [int(v) for v in np.asarray(state.window)[i] if v >= 0]
        lines = [
            f"Trial {int(state.trial) + 1} of {self.env.num_trials}, step "
            f"{int(state.trial_step)} of {self.env.trial_steps}. This trial: you ate "
            f"{int(np.asarray(state.trial_return)[i])} apples and cleared "
            f"{int(np.asarray(state.trial_cleared)[i])} waste cells.",
            f"You are agent {agent_letter(i)} at ({row}, {col}), facing "
            f"{G.ORIENTATION_NAMES[facing]}, standing on {_cell_name(int(grid[row, col]))}.",
            self._window_line(window),
            self._shot_line(state, i),
            "",
            "Map (your view, north up; ME = you, @X = agent X, T<n> = station of tool n, "
            "AP = apple, ,, = orchard soil, ~~ = water, ## = wall or beyond the edge, "
            ".. = ground, waste = hue letter + shade digit):",
            self._view(state, i),
            "",
            "ACTIONS NOW: " + " | ".join(self._action_lines(state, i)),
        ]
        frozen = int(np.asarray(state.frozen)[i])
        if frozen > 0:
            lines.insert(2, f"You were zapped: frozen for {frozen} more steps (only stay works).")
        return "\n".join(lines)

    @staticmethod
    def _window_line(window: list[int]) -> str:
        if not window:
            return "Your window (last two pick-ups, oldest first): empty."
        if len(window) == 1:
            return (
                f"Your window (last two pick-ups, oldest first): [{window[0]}]; one more pick-up "
                f"x makes it [{window[0]}, x]."
            )
        return (
            f"Your window (last two pick-ups, oldest first): [{window[0]}, {window[1]}]; your "
            f"next pick-up x makes it [{window[1]}, x]."
        )

    def _shot_line(self, state, i: int) -> str:
        when = int(np.asarray(state.shot_time)[i])
        if when < 0:
            return "You have not fired this trial."
        pair = int(np.asarray(state.shot_pair)[i])
        held = (
            f"window [{pair // C.NUM_TOOLS}, {pair % C.NUM_TOOLS}]"
            if pair >= 0
            else "an incomplete window"
        )
        parts = []
        for (r, c), before, after in zip(
            np.asarray(state.shot_cells)[i],
            np.asarray(state.shot_before)[i],
            np.asarray(state.shot_after)[i],
            strict=True,
        ):
            before, after = int(before), int(after)
            if not C.WASTE_BASE <= before < C.WASTE_BASE + C.NUM_WASTE_TYPES:
                continue
            effect = "unchanged" if before == after else f"-> {cell_token(after)}"
            parts.append(f"({int(r)}, {int(c)}) {cell_token(before)} {effect}")
        hits = "; ".join(parts) if parts else "no waste under the beam"
        return f"Your last shot (step {when}, {held}): {hits}."

    def _view(self, state, i: int) -> str:
        grid = np.asarray(state.grid)
        height, width = grid.shape
        position = np.asarray(state.positions)[i]
        offsets = G.view_offsets(VIEW_AHEAD, VIEW_BEHIND, VIEW_SIDE)[
            int(np.asarray(state.orientations)[i])
        ]
        cells = position + offsets.reshape(-1, 2)
        rows = range(cells[:, 0].min(), cells[:, 0].max() + 1)
        cols = range(cells[:, 1].min(), cells[:, 1].max() + 1)
        occupant = {tuple(int(v) for v in p): j for j, p in enumerate(np.asarray(state.positions))}
        out = ["     " + " ".join(f"{c:>2}" for c in cols)]
        for r in rows:
            tokens = []
            for c in cols:
                if not (0 <= r < height and 0 <= c < width):
                    tokens.append("##")
                elif (r, c) in occupant:
                    j = occupant[(r, c)]
                    tokens.append("ME" if j == i else "@" + agent_letter(j))
                else:
                    tokens.append(cell_token(int(grid[r, c])))
            out.append(f"r{r:>2}  " + " ".join(tokens))
        return "\n".join(out)

    def _action_lines(self, state, i: int) -> list[str]:
        legal = np.asarray(self.env.action_mask(state)[self.env.agents[i]])
        grid = np.asarray(state.grid)
        height, width = grid.shape
        lines = []
        for action, name in enumerate(self.names):
            if not legal[action]:
                continue
            text = f"{action} {name}"
            if action in (C.FIRE_ACTION, C.ZAP_ACTION):
                cells, inside = G.beam_cells(
                    np.asarray(state.positions)[i],
                    np.asarray(state.orientations)[i],
                    (height, width),
                )
                covered = [
                    f"({int(r)}, {int(c)}) {cell_token(int(grid[r, c]))}"
                    for (r, c), ok in zip(np.asarray(cells), np.asarray(inside), strict=True)
                    if ok
                ]
                text += " (beam: " + (", ".join(covered) or "off the map") + ")"
            lines.append(text)
        return lines

    # ------------------------------------------------------------------ reply
    def parse(self, reply: str, state, agent: str) -> ParsedReply:
        legal = np.asarray(self.env.action_mask(state)[agent])
        text = reply if isinstance(reply, str) else ""
        action, rationale, error = None, text.strip(), ""
        matches = list(_ACTION_LINE.finditer(text))
        match = matches[-1] if matches else None  # the last ACTION line wins
        if match is not None:
            action = self._lookup(match.group(1))
            rationale = (text[: match.start()] + text[match.end() :]).strip()
            if action is None:
                error = f"unknown action {match.group(1).strip()!r}"
        else:
            action = self._from_json(text)
            if action is None:
                error = "no 'ACTION <name>' line in the reply"
        if action is not None and not legal[action]:
            error = f"action {action} ({self.names[action]}) is not legal now"
            action = None
        if action is None:
            return ParsedReply(C.STAY_ACTION, False, error, rationale)
        return ParsedReply(int(action), True, "", rationale)

    def _lookup(self, token: str) -> int | None:
        token = token.strip()
        if token.isdigit():
            value = int(token)
            return value if value < len(self.names) else None
        key = _name_key(token)
        for action, name in enumerate(self.names):
            if _name_key(name) == key:
                return action
        value = _ALIASES.get(key)
        return value if value is not None and value < len(self.names) else None

    def _from_json(self, text: str) -> int | None:
        start, end = text.find("{"), text.rfind("}")
        if start < 0 or end <= start:
            return None
        try:
            value = json.loads(text[start : end + 1]).get("action")
        except (ValueError, AttributeError):
            return None
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value if 0 <= value < len(self.names) else None
        return self._lookup(value) if isinstance(value, str) else None
