"""The text of an OpenHarvest state as one agent sees it: progress, status, what is in view,
the map, ACTIONS NOW (with where each move lands), and the NOW block of a turn.

All numpy, on one unbatched state read once into a :class:`Snapshot`. The stateless view
(``render``) is the progress line, LAST STEP, the pays tasted, NOW and ACTIONS NOW; a turn's NOW
adds what the agent remembers of the orchard (:mod:`.ledger`).
"""

from __future__ import annotations

import numpy as np

from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest.ledger import OpenHarvestMemory, Trees
from dilemmax.envs.open_harvest.rendering import cell_token
from dilemmax.envs.osj.view import (
    DIRECTION_DELTAS,
    FACING_NAMES,
    agent_letter,
    beam_cells,
    view_cells,
    view_map,
)


class Snapshot:
    """The numpy values of one state the renderer needs (read once per turn)."""

    def __init__(self, state, legal: np.ndarray | None):
        self.config = state.config
        layout = state.config.layout
        orchard = state.orchard
        self.apple = np.asarray(orchard.apple)  # bool[T]
        self.stage = np.minimum(
            np.asarray(orchard.age) // np.maximum(np.asarray(orchard.stage_length), 1),
            c.NUM_STAGES - 1,
        )  # int[T]
        colour = np.asarray(state.config.patch_colours)[np.asarray(layout.tree_patch)]
        codes = np.where(np.asarray(layout.walls), c.CODE_WALL, c.CODE_GROUND).astype(int)
        pos = np.asarray(layout.tree_positions)
        codes[pos[:, 0], pos[:, 1]] = np.where(
            self.apple,
            c.CODE_APPLE + colour * c.NUM_STAGES + self.stage,
            c.CODE_EMPTY_TREE + colour,
        )
        self.codes = codes  # int[H, W] terrain codes
        self.height, self.width = self.codes.shape
        self.pos = np.asarray(state.agent_pos).astype(int)  # int[A, 2] (row, col)
        self.dir = np.asarray(state.agent_dir).astype(int)  # int[A] N, E, S, W
        self.frozen = np.asarray(state.frozen).astype(int)  # int[A] steps left
        self.cooldown = np.asarray(state.cooldown).astype(int)  # int[A] beam rest left
        self.trial = int(state.trial)
        self.step = int(state.trial_step)
        self.time = int(state.time)
        self.trial_eaten = np.asarray(state.trial_eaten).astype(int)  # int[A]
        self.trial_return = np.asarray(state.trial_return).astype(float).round(4)  # float[A]
        self.last_action = np.asarray(state.last_action).astype(int)  # int[A]
        self.last_ate_colour = np.asarray(state.last_ate_colour).astype(int)  # int[A] -1: none
        self.last_ate_stage = np.asarray(state.last_ate_stage).astype(int)  # int[A]
        self.last_pay = np.asarray(state.last_pay).astype(float).round(4)  # float[A]
        self.last_hit_by = np.asarray(state.last_hit_by).astype(int)  # int[A] -1: none
        self.agent_at = {(int(r), int(q)): j for j, (r, q) in enumerate(self.pos)}
        self.legal = legal  # bool[A, 8], or None where no one acts on this snapshot
        self._trees: Trees | None = None
        self._views: dict[int, set[tuple[int, int]]] = {}
        self._trees_in_view: dict[int, list[int]] = {}

    @property
    def trees(self) -> Trees:
        """The orchard of this state (built once, on first use)."""
        if self._trees is None:
            self._trees = Trees(self.config, None, snapshot=self)
        return self._trees

    def view(self, i: int) -> set[tuple[int, int]]:
        """The in-bounds cells of agent ``i``'s window (computed once per agent: a turn reads
        it in ``look`` and in ``now_block``)."""
        if i not in self._views:
            self._views[i] = view_cells(self.pos[i], self.dir[i], (self.height, self.width))
        return self._views[i]

    def trees_in_view(self, i: int) -> list[int]:
        """The trees in agent ``i``'s window, in index order (computed once per agent)."""
        if i not in self._trees_in_view:
            self._trees_in_view[i] = self.trees.in_view(self.view(i))
        return self._trees_in_view[i]


def legal_mask(state) -> np.ndarray:
    """bool[A, 8]: the env's rule in numpy (a frozen agent only stays; zap needs a ready beam)."""
    frozen = np.asarray(state.frozen) > 0
    cooldown = np.asarray(state.cooldown) > 0
    mask = np.repeat(~frozen[:, None], c.NUM_ACTIONS, axis=1)
    mask[:, c.ZAP] &= ~cooldown
    mask[:, c.STAY] = True
    return mask


def progress(s: Snapshot, i: int, num_trials: int, trial_steps: int) -> str:
    return (
        f"Trial {s.trial + 1} of {num_trials}, step {s.step} of "
        f"{trial_steps}. This trial: you ate {s.trial_eaten[i]} apples for "
        f"{s.trial_return[i]:g} points."
    )


def status(s: Snapshot, i: int) -> str:
    r, q = s.pos[i]
    text = f"you are agent {agent_letter(i)}, at ({r}, {q}), facing {FACING_NAMES[s.dir[i]]}."
    if s.frozen[i] > 0:
        text += f" You are frozen: you cannot act for {s.frozen[i]} more step(s)."
    elif s.cooldown[i] > 0:
        text += f" Your beam is resting for {s.cooldown[i]} more step(s)."
    else:
        text += " Your beam is ready."
    return text


def describe_apple(code: int) -> str:
    colour, stage = divmod(code - c.CODE_APPLE, c.NUM_STAGES)
    return f"{c.COLOUR_NAMES[colour]} {c.STAGE_NAMES[stage]} apple"


def _describe_cell(code: int) -> str:
    if code == c.CODE_WALL:
        return "wall"
    if code == c.CODE_GROUND:
        return "ground"
    if c.CODE_EMPTY_TREE <= code < c.CODE_APPLE:
        return f"empty {c.COLOUR_NAMES[code - c.CODE_EMPTY_TREE]} tree cell"
    return describe_apple(code)


# ----------------------------------------------------------------------------- stateless view
def last_step(s: Snapshot, i: int) -> str:
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


def known_pays(state, i: int) -> str:
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


def in_view(s: Snapshot, i: int) -> list[str]:
    inside = sorted(s.view(i))
    apples, empty = [], []
    for r, q in inside:
        code = s.codes[r, q]
        if code >= c.CODE_APPLE:
            apples.append(f"({r}, {q}) {describe_apple(code)}")
        elif code >= c.CODE_EMPTY_TREE:
            empty.append(f"({r}, {q}) {c.COLOUR_NAMES[code - c.CODE_EMPTY_TREE]}")
    agents = []
    for r, q in inside:
        j = s.agent_at.get((r, q))
        if j is None or j == i:
            continue
        note = f" (frozen for {s.frozen[j]} more steps)" if s.frozen[j] > 0 else ""
        agents.append(f"{agent_letter(j)} at ({r}, {q}) facing {FACING_NAMES[s.dir[j]]}{note}")
    return [
        f"Apples in view ({len(apples)}): " + ("; ".join(apples) or "none") + ".",
        f"Empty tree cells in view ({len(empty)}): " + ("; ".join(empty) or "none") + ".",
        "Other agents in view: " + ("; ".join(agents) or "none") + ".",
    ]


def map_lines(s: Snapshot, i: int) -> list[str]:
    def token(r: int, q: int) -> str:
        return cell_token(int(s.codes[r, q]))

    return view_map(s.pos[i], s.dir[i], (s.height, s.width), s.agent_at, i, token, "r{:3d} ")


# ----------------------------------------------------------------------------- ACTIONS NOW
def action_effects(s: Snapshot, i: int) -> list[str]:
    mask = s.legal[i]
    out = []
    for action in range(c.NUM_ACTIONS):
        if not mask[action]:
            continue
        name = c.ACTION_NAMES[action].replace("_", " ")
        direction = int(c.ACTION_MOVE_DIR[action])
        if direction >= 0:
            dr, dq = DIRECTION_DELTAS[direction]
            r, q = int(s.pos[i][0]) + dr, int(s.pos[i][1]) + dq
            out.append(f"{action} {name} -> ({r}, {q}): {_move_target(s, r, q)}")
        elif action == c.ZAP:
            out.append(f"{action} zap ({_beam_targets(s, i)})")
        else:
            out.append(f"{action} {name}")
    return out


def _move_target(s: Snapshot, r: int, q: int) -> str:
    if not (0 <= r < s.height and 0 <= q < s.width) or s.codes[r, q] == c.CODE_WALL:
        return "wall, you stay"
    if (j := s.agent_at.get((r, q))) is not None:
        return f"agent {agent_letter(j)} is there, blocked unless it leaves"
    what = _describe_cell(int(s.codes[r, q]))
    return f"{what}, you eat it" if s.codes[r, q] >= c.CODE_APPLE else what


def _beam_targets(s: Snapshot, i: int) -> str:
    hit = [
        agent_letter(j)
        for r, q in beam_cells(s.pos[i], s.dir[i])
        if (j := s.agent_at.get((r, q))) is not None and s.frozen[j] == 0
    ]
    return ("hits " + ", ".join(hit)) if hit else "no agent in the beam"


# ----------------------------------------------------------------------------- a turn's NOW
def look(memory: OpenHarvestMemory, s: Snapshot, i: int) -> None:
    """The trees in view now become seen, with how they look (for when they are out of view)."""
    trees = s.trees
    for t in s.trees_in_view(i):
        memory.seen.trees.add(t)
        memory.seen.last_seen[t] = (s.step, bool(trees.apple[t]), int(trees.stage[t]))


def patches_seen(s: Snapshot, memory: OpenHarvestMemory) -> list[str]:
    """The patches the agent has seen (the same places every trial)."""
    seen = memory.seen.trees
    if not seen:
        return []
    return ["Patches you have seen (same places every trial): " + s.trees.patch_spans(seen) + "."]


def now_block(
    s: Snapshot, i: int, memory: OpenHarvestMemory, mapped: bool = True, tallies: bool = False
) -> str:
    """NOW (``mapped`` False: without the patches the agent has seen, which the "cached" layout
    shows before the progress line; ``tallies``: with the counts that layout's steady RULES YOU
    KNOW leaves out, ``HarvestLedger.block(steady=True)``)."""
    trees = s.trees
    view = s.view(i)
    in_view_trees = s.trees_in_view(i)
    lines = ["NOW", status(s, i)]
    lines.append("Patches in view: " + (trees.patch_lines(in_view_trees) or "none") + ".")
    others = [
        f"{agent_letter(j)} at ({r}, {q})"
        for (r, q), j in sorted(s.agent_at.items(), key=lambda x: x[1])
        if j != i and (r, q) in view
    ]
    lines.append("Other agents in view: " + (", ".join(others) or "none") + ".")
    seen = memory.seen.trees
    if seen:
        lines += patches_seen(s, memory) if mapped else []
        out = trees.out_of_view_lines(seen - set(in_view_trees), memory.seen.last_seen)
        if out:
            lines.append("Tree cells out of view, as you last saw them this trial: " + out + ".")
    clocks = memory.ledger.clocks(in_view_trees, trees)
    if clocks:
        lines.append("Apples in view whose clock you know: " + clocks + ".")
    waiting = memory.ledger.waiting_lines(s.step, trees, around=tallies)
    if waiting:
        lines.append(
            "Cells you are waiting on (you saw them emptied this trial and have not seen them "
            "regrow): " + waiting + "."
        )
    lines += memory.ledger.tallies() if tallies else []
    lines.append("Map:")
    lines += map_lines(s, i)
    return "\n".join(lines)
