"""Text interface of OpenCleanup: the OpenSocialJax agent protocol (paper, Appendix A).

The system prompt (``prompts/system.md``) states the rules the paper's prompt states (listing
1), in this project's words: the score, the river and the orchard, trials, waste hues and
shades, base tools, the pick-up window and hidden recipes, the beam, moves, how to read a turn,
the JSON reply and the notes. It does not say how many of the 16 pairs are recipes (the paper's
prompt never does).

Each step's user message (``turn``, from :class:`~dilemmax.envs.osj.protocol.OSJProtocol`) holds
what listing 3 holds (``layout="paper"``: in its order; the default ``"cached"`` layout moves
what an agent keeps for a trial ahead of what changes each step): a progress line, RULES YOU
KNOW (every pick-up pair the agent fired with and what those shots did to each waste colour,
from its own shots only: :mod:`.ledger`), YOUR NOTES, EARLIER TRIALS, OTHER AGENTS (only what
the agent saw), YOUR PLAN, LAST STEP, RECENT STEPS, NOW (place, facing, hand and window, what is
in view, stations / river / orchard seen so far, the 11 x 11 view drawn north-up:
:mod:`.view_text`) and ACTIONS NOW (a shot lists the cells its beam would cover). The reply
format and its parser are in :mod:`dilemmax.envs.osj`.
An invalid reply, or a frozen agent (zap option), plays stay (action 7).

``render`` / ``parse`` are the stateless view (no memory) that ``observation.text()`` shows in
the arena; the parser is the same.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from dilemmax.envs.open_cleanup import constants as C
from dilemmax.envs.open_cleanup import view_text as V
from dilemmax.envs.open_cleanup.ledger import (
    OpenCleanupMemory,
    OpenCleanupSighting,
    effect_phrases,
    own_beam_after,
    pair_text,
    trial_summary,
)
from dilemmax.envs.open_cleanup.rendering import cell_token, is_waste, waste_name
from dilemmax.envs.osj.blocks import actions_block
from dilemmax.envs.osj.prompts import fill
from dilemmax.envs.osj.protocol import OSJProtocol
from dilemmax.envs.osj.view import FACING_NAMES, agent_letter, view_cells

__all__ = ["GOAL_TYPES", "MODES", "OpenCleanupText", "waste_name"]

MODES = ("craft", "clean", "harvest", "explore")
GOAL_TYPES = ("move_to", "fire", "pick_up", "wait")
_EXTRA_NAMES = {
    "N": C.NORTH_ACTION, "UP": C.NORTH_ACTION, "S": C.SOUTH_ACTION, "DOWN": C.SOUTH_ACTION,
    "E": C.EAST_ACTION, "RIGHT": C.EAST_ACTION, "W": C.WEST_ACTION, "LEFT": C.WEST_ACTION,
    "PICK": C.PICK_UP_ACTION, "WAIT": C.STAY_ACTION, "NOOP": C.STAY_ACTION,
}  # fmt: skip
_MOVES = (C.NORTH_ACTION, C.SOUTH_ACTION, C.EAST_ACTION, C.WEST_ACTION)


class OpenCleanupText(OSJProtocol[OpenCleanupMemory, V.Snapshot]):
    """The OpenSocialJax protocol for one OpenCleanup env (see the module docstring).

    Args:
        env: the :class:`~dilemmax.envs.open_cleanup.env.OpenCleanupEnv`.
        role: None, or "cooperator" / "defector": item 1.5 of the system prompt used by the
            paper's Schelling-diagram runs (Listing 5).
        reveal: show the episode's recipes under HIDDEN RULES from the first turn (off by
            default; the reference harness's upper bound).
        layout: "cached" (default) or "paper": the order of the prompt's parts
            (:class:`~dilemmax.envs.osj.protocol.OSJProtocol`).
    """

    package = "dilemmax.envs.open_cleanup"
    memory_type = OpenCleanupMemory
    modes = MODES
    goal_types = GOAL_TYPES
    stay = C.STAY_ACTION

    def __init__(self, env, role: str | None = None, reveal: bool = False, layout: str = "cached"):
        super().__init__(env, env.num_actions, role, reveal, layout)
        self.names = C.ACTION_NAMES[: env.num_actions]
        self.name_map = {n.replace("_", "").upper(): a for a, n in enumerate(self.names)}
        self.name_map.update(_EXTRA_NAMES)

    def legal_mask(self, state) -> np.ndarray:
        return V.legal_mask(state, self.env.num_agents, self.env.num_actions)

    def snapshot(self, state) -> V.Snapshot:
        return V.Snapshot(state, self.legal_mask(state))

    def system_values(self, agent: str) -> dict:
        """Item 2.10 (the zap) when the env has the zap option."""
        if not self.env.zap:
            return {"zap": ""}
        return {"zap": f"\n{fill(self.package, 'zap.md', freeze=C.ZAP_FREEZE_STEPS)}"}

    # ------------------------------------------------------------------ stateless view
    def render(self, state, agent: str) -> str:
        i = self.env.agent_index[agent]
        s = self.snapshot(state)
        return "\n\n".join(
            [self.progress(s, i), V.shot_line(state, i), V.now_block(s, i, None)]
            + [actions_block(self.action_lines(s, i))]
        )

    # ------------------------------------------------------------------ blocks of a turn
    def progress(self, s: V.Snapshot, i: int) -> str:
        return V.progress(s, i, self.env.num_trials, self.env.trial_steps)

    def rules_block(self, memory: OpenCleanupMemory) -> str:
        return memory.ledger.block()

    def revealed_block(self, state) -> str:
        return revealed_recipes(np.asarray(state.config.pair_effect))

    def look(self, memory: OpenCleanupMemory, s: V.Snapshot, i: int) -> None:
        V.look(memory.seen, s, i)

    def now_block(
        self, s: V.Snapshot, i: int, memory: OpenCleanupMemory | None, mapped: bool = True
    ) -> str:
        return V.now_block(s, i, None if memory is None else memory.seen, mapped)

    def mapped_block(self, s: V.Snapshot, memory: OpenCleanupMemory) -> str:
        return "\n".join(V.seen_lines(memory.seen))

    def action_lines(self, s: V.Snapshot, i: int) -> list[str]:
        return V.action_lines(s, i, self.names)

    def sighting_now(self, j: int, sighting: OpenCleanupSighting) -> str:
        text = f"seen {sighting.seen} times this trial"
        if sighting.fired:
            effects = effect_phrases(sighting)
            text += f"; you saw it fire {sighting.fired} time(s)"
            text += (": " + "; ".join(effects)) if effects else ""
        return text

    def others_footer(self, memory: OpenCleanupMemory) -> list[str]:
        cleared = memory.stats.cleared_by_others
        return [f"River cells cleared in your view but not by you this trial: {cleared}."]

    # ------------------------------------------------------------------ trial end
    def trial_summary(self, memory: OpenCleanupMemory, number: int) -> str:
        return trial_summary(memory.stats, number)

    def sighting_summary(self, j: int, sighting: OpenCleanupSighting) -> str:
        text = f"{agent_letter(j)} seen {sighting.seen} steps"
        if sighting.fired:
            text += f", you saw it fire {sighting.fired} time(s)"
            effects = effect_phrases(sighting)
            if effects:
                text += ": " + "; ".join(effects)
        return text

    def others_summary_end(self, memory: OpenCleanupMemory) -> str:
        return (
            f"; {memory.stats.cleared_by_others} river cells in your view were cleared by others."
        )

    # ------------------------------------------------------------------ memory updates
    def record(self, memory: OpenCleanupMemory, i, state, actions, info, next_state) -> None:
        step = int(state.trial_step)
        pos = np.asarray(state.positions)
        facings = np.asarray(state.orientations)
        before_view = view_cells(pos[i], int(facings[i]), tuple(np.asarray(state.grid).shape))
        pair_effect = np.asarray(state.config.pair_effect)
        self._record_own(memory, i, step, state, actions, next_state, info)
        # A river cell cleared this step counts once for the others, and not if i cleared it too.
        counted = _cleared_cells(info, i, pair_effect) if bool(info["fired"][i]) else set()

        def saw(j: int, sighting: OpenCleanupSighting, cell) -> None:
            self._saw_shot(memory, j, sighting, info, before_view, pair_effect, counted)

        self.track_others(memory, i, step, pos, facings, before_view, saw)

    def _record_own(self, memory: OpenCleanupMemory, i, step, state, actions, next_state, info):
        stats = memory.stats
        done = bool(info["trial_done"])
        before = tuple(int(v) for v in np.asarray(state.positions)[i])
        after = before if done else tuple(int(v) for v in np.asarray(next_state.positions)[i])
        chosen = actions[memory.agent] if isinstance(actions, Mapping) else actions[i]
        chosen = int(np.asarray(chosen).reshape(()))
        if bool(info["invalid_action"][i]) or not 0 <= chosen < len(self.names):
            chosen = C.STAY_ACTION
        name = self.names[chosen]
        words = [f"you chose {chosen} ({name.replace('_', ' ')})"]
        outcome = ""
        if chosen in _MOVES:
            outcome = f"moved {before} -> {after}" if before != after else "blocked, you stayed"
        elif chosen in (C.TURN_LEFT_ACTION, C.TURN_RIGHT_ACTION):
            outcome = f"facing {FACING_NAMES[int(np.asarray(next_state.orientations)[i])]}"
        if int(info["picked_up"][i]) >= 0:
            window = [int(v) for v in np.asarray(next_state.window)[i] if v >= 0]
            outcome = f"picked up tool {int(info['picked_up'][i])}; window now {window}"
            if bool(info["made_tool"][i]) and stats.first_tool is None:
                stats.first_tool = step + 1
        if bool(info["ate"][i]):
            outcome += "; you ate an apple (+1)" if outcome else "you ate an apple (+1)"
            stats.ate += 1
        if bool(info["fired"][i]):
            stats.fired += 1
            outcome = self._record_shot(memory, i, info, np.asarray(state.config.pair_effect))
        stats.cleared += int(info["cleared"][i])
        stats.river_steps += _near_river(before, state)
        memory.last_step = f"Last step ({step}): " + " -> ".join(
            words + ([outcome] if outcome else [])
        )
        short = name.replace("_", " ")
        memory.recent.append(f"t{step} {short}" + (f" -> {after}" if before != after else ""))

    @staticmethod
    def _record_shot(memory: OpenCleanupMemory, i: int, info, pair_effect) -> str:
        """The agent's own shot: into the ledger (with a full window) and LAST STEP. Both say
        what this agent's beam did (:func:`own_beam_after`), not what the cells became after
        every shot of the step."""
        pair = int(info["shot_pair"][i])
        before = [int(v) for v in info["beam_before"][i]]
        after = own_beam_after(pair_effect, pair, before)
        cells = [tuple(int(v) for v in cell) for cell in info["beam_cells"][i]]
        hits = [
            (cell, b, a) for cell, b, a in zip(cells, before, after, strict=True) if is_waste(b)
        ]
        held = f"window {pair_text(pair)}" if pair >= 0 else "no full window"
        if not hits:
            return f"fired with {held}: no waste under the beam"
        parts = []
        for cell, b, a in hits:
            if pair >= 0:
                memory.ledger.record(pair, b, a)
            effect = "unchanged" if a == b else f"-> {cell_token(a)}"
            parts.append(f"{cell} {cell_token(b)} {effect}")
        return f"fired with {held}: " + "; ".join(parts)

    @staticmethod
    def _saw_shot(
        memory: OpenCleanupMemory,
        j: int,
        sighting: OpenCleanupSighting,
        info,
        view,
        pair_effect,
        counted,
    ) -> None:
        """What the agent saw agent ``j``'s own beam do, inside its own view (a cell two beams
        hit in one step is credited to the beam whose effect changed it)."""
        if not bool(info["fired"][j]):
            return
        sighting.fired += 1
        before = [int(b) for b in info["beam_before"][j]]
        after = own_beam_after(pair_effect, int(info["shot_pair"][j]), before)
        hit_any = False
        for cell, b, a in zip(info["beam_cells"][j], before, after, strict=True):
            cell = (int(cell[0]), int(cell[1]))
            if cell not in view or not is_waste(b):
                continue
            hit_any = True
            sighting.effects[(b, a)] += 1
            if a == C.WATER and cell not in counted:
                counted.add(cell)
                memory.stats.cleared_by_others += 1
        if not hit_any:
            sighting.empty_shots += 1
        elif all(b == a for b, a in zip(before, after, strict=True)):
            sighting.no_effect_shots += 1


def _cleared_cells(info, i: int, pair_effect) -> set[tuple[int, int]]:
    """The cells agent ``i``'s own shot cleared to water this step."""
    before = [int(b) for b in info["beam_before"][i]]
    after = own_beam_after(pair_effect, int(info["shot_pair"][i]), before)
    cells = [(int(c[0]), int(c[1])) for c in info["beam_cells"][i]]
    return {cell for cell, b, a in zip(cells, before, after, strict=True) if a == C.WATER != b}


def revealed_recipes(pair_effect) -> str:
    """HIDDEN RULES: every recipe of the episode and what its working tool does (``pair_effect``
    int[16], the env's effect of each pick-up pair)."""
    lines = ["HIDDEN RULES (given to you; the same for every trial of this episode)"]
    for effect in range(C.NUM_EFFECTS):
        pairs = [p for p, e in enumerate(pair_effect) if int(e) == effect]
        if not pairs:
            continue
        if effect == C.EFFECT_MID_TO_LIGHT:
            does = "makes mid waste of any hue one shade lighter (mid -> light)"
        elif effect == C.EFFECT_DARK_TO_MID:
            does = "makes dark waste of any hue one shade lighter (dark -> mid)"
        else:
            light = C.WASTE_BASE + effect * C.NUM_SHADES + C.LIGHT
            does = f"clears {waste_name(light)} waste to water"
        lines.append(", ".join(pair_text(p) for p in pairs) + f" -> {does}")
    lines.append("Every other pick-up order does nothing to waste.")
    return "\n".join(lines)


def _near_river(cell, state) -> int:
    mask = np.asarray(state.config.river_mask)
    r, c = cell
    return int(mask[max(r - 1, 0) : r + 2, max(c - 1, 0) : c + 2].any())
