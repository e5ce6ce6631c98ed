"""The text of an OpenCleanup state as one agent sees it: progress, NOW, the map, ACTIONS NOW.

These are the parts of a turn that read the state, not the agent's memory (except the stations,
river and orchard it has seen, which NOW lists): its place, facing, hand and window, what is in
its 11 x 11 view, the view drawn north-up, the legal actions (a shot lists the cells its beam
would cover) and its last shot. All numpy, on one unbatched state read once into a
:class:`Snapshot`.
"""

from __future__ import annotations

import collections

import numpy as np

from dilemmax.envs.open_cleanup import constants as C
from dilemmax.envs.open_cleanup.ledger import MapSeen, pair_text
from dilemmax.envs.open_cleanup.rendering import cell_token, is_waste, waste_name
from dilemmax.envs.osj.view import FACING_NAMES, agent_letter, beam_cells, view_cells, view_map


class Snapshot:
    """The numpy values of one (unbatched) state that a turn reads, read once."""

    def __init__(self, state, legal: np.ndarray):
        self.grid = np.asarray(state.grid).astype(np.int32)  # int32[H, W] cell codes
        self.pos = np.asarray(state.positions).astype(np.int32)  # int32[A, 2] (row, col)
        self.dir = np.asarray(state.orientations).astype(np.int32)  # int32[A] N, E, S, W
        self.window = np.asarray(state.window).astype(np.int32)  # int32[A, 2] (-1: empty)
        self.frozen = np.asarray(state.frozen).astype(np.int32)  # int32[A] steps left
        self.trial = int(state.trial)
        self.step = int(state.trial_step)
        self.trial_return = np.asarray(state.trial_return)  # float[A] apples this trial
        self.trial_cleared = np.asarray(state.trial_cleared)  # int[A] cells cleared this trial
        self.legal = legal  # bool[A, num_actions]
        self.occupant = {(int(r), int(c)): j for j, (r, c) in enumerate(self.pos)}
        self.shape = self.grid.shape


def legal_mask(state, num_agents: int, num_actions: int) -> np.ndarray:
    """bool[A, num_actions], in numpy (the env's rule: pick up only on a station, a frozen
    agent only stays); a jax call here would cost more than the whole turn."""
    grid = np.asarray(state.grid)
    pos = np.asarray(state.positions)
    legal = np.ones((num_agents, num_actions), bool)
    legal[:, C.PICK_UP_ACTION] = grid[pos[:, 0], pos[:, 1]] >= C.STATION_BASE
    frozen = np.asarray(state.frozen) > 0
    legal[frozen] = False
    legal[frozen, C.STAY_ACTION] = True
    return legal


def progress(s: Snapshot, i: int, num_trials: int, trial_steps: int) -> str:
    return (
        f"Trial {s.trial + 1} of {num_trials}, step {s.step} of "
        f"{trial_steps}. This trial: you cleared {int(s.trial_cleared[i])} waste "
        f"cells, you ate {int(s.trial_return[i])} apples."
    )


def look(seen: MapSeen, s: Snapshot, i: int) -> None:
    """Adds what is in view now to the stations / river / orchard seen (same every trial)."""
    for r, c in view_cells(s.pos[i], s.dir[i], s.shape):
        code = int(s.grid[r, c])
        if code >= C.STATION_BASE:
            seen.stations[(r, c)] = code - C.STATION_BASE
        elif code == C.WATER or is_waste(code):
            seen.river.add((r, c))
        elif code in (C.ORCHARD, C.APPLE):
            seen.orchard.add((r, c))


# ----------------------------------------------------------------------------- NOW
def now_block(s: Snapshot, i: int, seen: MapSeen | None, mapped: bool = True) -> str:
    """NOW (``seen`` None: the stateless view; ``mapped`` False: without the lines of what the
    agent has mapped, which the "cached" layout shows before the progress line)."""
    r, c = (int(v) for v in s.pos[i])
    window = [int(v) for v in s.window[i] if v >= 0]
    hand = (
        f"You hold what your pick-ups [{window[0]}, {window[1]}] gave you."
        if len(window) == 2
        else "You hold no working tool (fewer than two pick-ups)."
    )
    lines = [
        "NOW",
        f"You are agent {agent_letter(i)}, at ({r}, {c}), facing "
        f"{FACING_NAMES[int(s.dir[i])]}, standing on {_cell_name(int(s.grid[r, c]))}. {hand}",
        _window_line(window),
        _in_view(s, i),
    ]
    if seen is not None and mapped:
        lines += seen_lines(seen)
    lines.append("Map:")
    lines.append(_view(s, i))
    return "\n".join(lines)


def _cell_name(code: int) -> str:
    if is_waste(code):
        return waste_name(code)
    if code == C.APPLE:
        return "apple"
    if code >= C.STATION_BASE:
        return f"station of tool {code - C.STATION_BASE}"
    return {C.GROUND: "ground", C.WALL: "wall", C.WATER: "water", C.ORCHARD: "orchard soil"}[code]


def _window_line(window: list[int]) -> str:
    head = "Your window (last two pick-ups, oldest first): "
    if not window:
        return head + "empty."
    if len(window) == 1:
        return head + f"[{window[0]}]; one more pick-up x makes it [{window[0]}, x]."
    return head + f"[{window[0]}, {window[1]}]; your next pick-up x makes it [{window[1]}, x]."


def _in_view(s: Snapshot, i: int) -> str:
    cells = view_cells(s.pos[i], s.dir[i], s.shape)
    counts = collections.Counter()
    hue_shades = collections.Counter()
    stations = collections.defaultdict(list)
    for r, c in sorted(cells):
        code = int(s.grid[r, c])
        if is_waste(code):
            counts["waste"] += 1
            hue_shades[divmod(code - C.WASTE_BASE, C.NUM_SHADES)] += 1
        elif code == C.WATER:
            counts["water"] += 1
        elif code == C.APPLE:
            counts["apples"] += 1
        elif code >= C.STATION_BASE:
            stations[code - C.STATION_BASE].append((r, c))
    others = [
        f"{agent_letter(j)} at {cell}"
        for cell, j in sorted(s.occupant.items(), key=lambda x: x[1])
        if j != i and cell in cells
    ]
    text = "In view: "
    if hue_shades:
        hue = max(
            {h for h, _ in hue_shades},
            key=lambda h: sum(v for (hh, _), v in hue_shades.items() if hh == h),
        )
        shades = ", ".join(
            f"{C.SHADE_NAMES[sh]} {hue_shades[(hue, sh)]}" for sh in range(C.NUM_SHADES)
        )
        text += f"dominant hue {C.HUE_NAMES[hue]} ({shades}); "
    text += (
        f"river cells you can see: {counts['waste']} waste, {counts['water']} water; apples "
        f"{counts['apples']}; other agents: " + (", ".join(others) or "none") + "."
    )
    if stations:
        text += " Stations in view: " + _stations_text(stations) + "."
    return text


def _stations_text(stations: dict[int, list[tuple[int, int]]]) -> str:
    return "; ".join(
        f"T{t} at " + ", ".join(str(x) for x in cs) for t, cs in sorted(stations.items())
    )


def _span(cells) -> str:
    rows = [r for r, _ in cells]
    cols = [c for _, c in cells]
    return f"rows {min(rows)}-{max(rows)}, cols {min(cols)}-{max(cols)}"


def seen_lines(seen: MapSeen) -> list[str]:
    """The stations, river and orchard the agent has seen (the same places every trial)."""
    lines = []
    stations = collections.defaultdict(list)
    for cell, tool in sorted(seen.stations.items()):
        stations[tool].append(cell)
    if stations:
        lines.append(
            "Stations you have seen (same places every trial): " + _stations_text(stations) + "."
        )
    parts = []
    if seen.river:
        parts.append(
            f"River seen (same place every trial): {_span(seen.river)} "
            f"({len(seen.river)} cells seen)"
        )
    if seen.orchard:
        parts.append(f"orchard seen: {_span(seen.orchard)} ({len(seen.orchard)} cells seen)")
    if parts:
        lines.append("; ".join(parts) + ".")
    return lines


def _view(s: Snapshot, i: int) -> str:
    def token(r: int, c: int) -> str:
        return cell_token(int(s.grid[r, c]))

    return "\n".join(view_map(s.pos[i], s.dir[i], s.shape, s.occupant, i, token, "r{:>2}  "))


# ----------------------------------------------------------------------------- actions, shots
def action_lines(s: Snapshot, i: int, names) -> list[str]:
    height, width = s.shape
    lines = []
    for action, name in enumerate(names):
        if not s.legal[i][action]:
            continue
        text = f"{action} {name}"
        if action in (C.FIRE_ACTION, C.ZAP_ACTION):
            covered = [
                f"({r}, {c}) {cell_token(int(s.grid[r, c]))}"
                for r, c in beam_cells(s.pos[i], s.dir[i])
                if 0 <= r < height and 0 <= c < width
            ]
            text += " (beam: " + (", ".join(covered) or "off the map") + ")"
        lines.append(text)
    return lines


def shot_line(state, i: int) -> str:
    """The agent's last shot this trial (the stateless view's stand-in for RULES YOU KNOW)."""
    when = int(np.asarray(state.shot_time)[i])
    if when < 0:
        return "You have not fired this trial."
    pair = int(np.asarray(state.shot_pair)[i])
    held = f"window {pair_text(pair)}" if pair >= 0 else "an incomplete window"
    parts = []
    for (r, c), before, after in zip(
        np.asarray(state.shot_cells)[i], np.asarray(state.shot_before)[i],
        np.asarray(state.shot_after)[i], strict=True,
    ):  # fmt: skip
        before, after = int(before), int(after)
        if not is_waste(before):
            continue
        effect = "unchanged" if before == after else f"-> {cell_token(after)}"
        parts.append(f"({int(r)}, {int(c)}) {cell_token(before)} {effect}")
    hits = "; ".join(parts) if parts else "no waste under the beam"
    return f"Your last shot (step {when}, {held}): {hits}."
