"""Text interface of OpenHarvest: one agent's view as a prompt, a reply as an action.

The play interface is the OpenSocialJax agent protocol (paper, Appendix A, Listings 2 and 4;
the skeleton is :class:`~dilemmax.envs.osj.protocol.OSJProtocol`), worded for this project: the
system prompt is ``prompts/system.md``; each turn shows a progress line, RULES YOU KNOW (the
pays the agent tasted, the regrowth, ripening and rot it watched: :mod:`.ledger`), YOUR NOTES,
EARLIER TRIALS, OTHER AGENTS, YOUR PLAN, LAST STEP, RECENT STEPS, NOW (status, the patches in
view and seen, the 11 x 11 window drawn north-up: :mod:`.view_text`) and ACTIONS NOW with what
each would do.

The stateless ``render`` shows a progress line, what the last step did, the pays tasted, the
agent's position, facing, frozen and beam status, the trees and agents in its window with
absolute (row, col) positions, the window drawn north-up, and the actions available now.

Replies: the protocol's JSON object, a line ``ACTION <name or number>`` (e.g. ``ACTION north``,
``ACTION 6``), or a bare name. A reply naming no action, an unknown one, or one that is not
legal now (ZAP while the beam cools down; anything but STAY while frozen) is invalid: the agent
stays, as in the paper.
"""

from __future__ import annotations

import numpy as np

from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest import view_text as V
from dilemmax.envs.open_harvest.ledger import (
    OpenHarvestMemory,
    OpenHarvestSighting,
    Trees,
    eaten_phrase,
)
from dilemmax.envs.osj.prompts import prompt_text
from dilemmax.envs.osj.protocol import OSJProtocol
from dilemmax.envs.osj.view import agent_letter

__all__ = ["GOAL_TYPES", "MODES", "OpenHarvestText"]

MODES = ("harvest", "wait", "explore", "travel", "zap")
GOAL_TYPES = ("move_to", "eat", "wait", "zap")
REPLY_FORMATS = ("action_line", "json")

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
_MOVES = (c.NORTH_ACTION, c.SOUTH_ACTION, c.EAST_ACTION, c.WEST_ACTION)
_SHORT = ("N", "S", "E", "W", "turnL", "turnR", "zap", "stay")


class OpenHarvestText(OSJProtocol[OpenHarvestMemory, V.Snapshot]):
    """Renderer and parser for one OpenHarvest env.

    Args:
        env: the :class:`~dilemmax.envs.open_harvest.env.OpenHarvestEnv`.
        reply_format: "action_line" (``ACTION <name>``) or "json" (``{"action": <number>}``):
            the last line of the stateless ``render``; the parser accepts both either way.
        role: None, or "cooperator" / "defector" (item 1.5 of the system prompt).
        reveal: show the episode's pay table and regrowth multipliers under HIDDEN RULES from
            the first turn (off by default; the reference harness's upper bound).
        layout: "cached" (default) or "paper": the order of the prompt's parts
            (:class:`~dilemmax.envs.osj.protocol.OSJProtocol`).
    """

    package = "dilemmax.envs.open_harvest"
    memory_type = OpenHarvestMemory
    modes = MODES
    goal_types = GOAL_TYPES
    stay = c.STAY
    name_map = _NAMES

    def __init__(
        self,
        env,
        reply_format: str = "action_line",
        role: str | None = None,
        reveal: bool = False,
        layout: str = "cached",
    ):
        if reply_format not in REPLY_FORMATS:
            raise ValueError(f"reply_format must be 'action_line' or 'json', got {reply_format!r}")
        self.reply_format = reply_format
        super().__init__(env, c.NUM_ACTIONS, role, reveal, layout)

    def legal_mask(self, state) -> np.ndarray:
        return V.legal_mask(state)

    def snapshot(self, state) -> V.Snapshot:
        return V.Snapshot(state, V.legal_mask(state))

    def system_values(self, agent: str) -> dict:
        """The freeze of a zap and the curriculum options' sentences (Listing 2's prompt)."""
        return {"freeze": c.FREEZE_STEPS, "curriculum": self._curriculum_note()}

    def _curriculum_note(self) -> str:
        """Sentences about curriculum options: pay levels that include a cost, and one pay order
        for every colour (empty in the paper's game)."""
        note = ""
        if min(getattr(self.env, "pay_levels", c.PAY_LEVELS)) < 0:
            note += " " + prompt_text(self.package, "costly_pay.md")
        if getattr(self.env, "shared_pay_order", False):
            note += " " + prompt_text(self.package, "shared_pay_order.md")
        return note

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

    # ------------------------------------------------------------------ stateless view
    def render(self, state, agent: str) -> str:
        i = self.env.agent_index[agent]
        s = self.snapshot(state)
        lines = [
            self.progress(s, i),
            "LAST STEP: " + V.last_step(s, i),
            "RULES YOU KNOW: " + V.known_pays(state, i),
            "NOW: " + V.status(s, i),
        ]
        lines += V.in_view(s, i)
        lines.append("Map:")
        lines += V.map_lines(s, i)
        lines.append("ACTIONS NOW")
        lines.append(" | ".join(V.action_effects(s, i)))
        lines.append(self._reply_instructions())
        return "\n".join(lines)

    # ------------------------------------------------------------------ parsing
    def parse_context(self, frozen: bool) -> dict:
        return {"frozen": frozen}

    def illegal_reason(self, context):
        frozen = bool(context.get("frozen", False))

        def why(action: int) -> str:
            name = c.ACTION_NAMES[action]
            return f"{name} is not legal now: " + (
                "you are frozen and can only stay" if frozen else "your beam is resting"
            )

        return why

    # ------------------------------------------------------------------ blocks of a turn
    def progress(self, s: V.Snapshot, i: int) -> str:
        return V.progress(s, i, self.env.num_trials, self.env.trial_steps)

    def rules_block(self, memory: OpenHarvestMemory) -> str:
        return memory.ledger.block(steady=self.layout == "cached")

    def revealed_block(self, state) -> str:
        return revealed_rules(state.config)

    def look(self, memory: OpenHarvestMemory, s: V.Snapshot, i: int) -> None:
        V.look(memory, s, i)

    def now_block(
        self, s: V.Snapshot, i: int, memory: OpenHarvestMemory, mapped: bool = True
    ) -> str:
        return V.now_block(s, i, memory, mapped, tallies=self.layout == "cached")

    def mapped_block(self, s: V.Snapshot, memory: OpenHarvestMemory) -> str:
        return "\n".join(V.patches_seen(s, memory))

    def action_lines(self, s: V.Snapshot, i: int) -> list[str]:
        return V.action_effects(s, i)

    def sighting_now(self, j: int, sighting: OpenHarvestSighting) -> str:
        return self.sighting_summary(j, sighting).split(" ", 1)[1]

    # ------------------------------------------------------------------ trial end
    def trial_summary(self, memory: OpenHarvestMemory, number: int) -> str:
        stats = memory.stats
        eaten = eaten_phrase(stats.eaten)
        return (
            f"Trial {number}: you ate {stats.apples} apples for {stats.points:g} points"
            + (f" ({eaten})" if eaten else "")
            + f"; you zapped {stats.zaps} times and were sent back {stats.zapped} times."
        )

    def sighting_summary(self, j: int, sighting: OpenHarvestSighting) -> str:
        text = f"{agent_letter(j)} seen {sighting.seen} steps"
        ate = sum(sighting.eaten.values())
        if ate:
            text += f", ate {ate} in your view ({eaten_phrase(sighting.eaten)})"
        if sighting.fired:
            text += f", fired {sighting.fired} times in your view"
        if sighting.hit_me:
            text += f", sent you back to a spawn point {sighting.hit_me} times"
        return text

    # ------------------------------------------------------------------ memory updates
    def record(self, memory: OpenHarvestMemory, i, state, actions, info, next_state) -> None:
        done = bool(info["trial_done"])
        step = int(state.trial_step)
        seen_state = state if done else next_state
        snap = V.Snapshot(seen_state, None)
        view = snap.view(i)
        trees = Trees(state.config, seen_state)
        in_view = trees.in_view(view)
        self._record_own(memory, i, step, state, next_state, info, done)

        def saw(j: int, sighting: OpenHarvestSighting, cell) -> None:
            _saw_other(memory, i, j, sighting, cell, step, info)

        self.track_others(memory, i, step, snap.pos, snap.dir, view, saw)
        memory.ledger.observe(memory.events, step + 1, info, trees, in_view)

    def _record_own(
        self, memory: OpenHarvestMemory, i, step, state, next_state, info, done
    ) -> None:
        stats = memory.stats
        chosen = int(info["action"][i])
        before = tuple(int(v) for v in np.asarray(state.agent_pos)[i])
        after = before if done else tuple(int(v) for v in np.asarray(next_state.agent_pos)[i])
        name = c.ACTION_NAMES[chosen].replace("_", " ")
        if bool(info["frozen"][i]):
            text = "you were frozen and could not act"
        else:
            text = f"you chose {chosen} ({name})"
            if chosen in _MOVES:
                text += f" -> moved {before} -> {after}" if before != after else " -> blocked"
        short = f"t{step} {_SHORT[chosen]}" + (f" -> {after}" if before != after else "")
        if bool(info["ate"][i]):
            colour, stage = int(info["ate_colour"][i]), int(info["ate_stage"][i])
            pay = float(info["ate_pay"][i])
            apple = f"{c.COLOUR_NAMES[colour]} {c.STAGE_NAMES[stage]}"
            text += f"; you ate a {apple} apple: {pay:+g} points"
            short += f" ate {c.COLOUR_LETTERS[colour]}{c.STAGE_LETTERS[stage]} {pay:+g}"
            stats.eaten[(colour, stage)] += 1
            stats.points += pay
            stats.apples += 1
            memory.ledger.paid(colour, stage, pay)
        if bool(info["zap_fired"][i]):
            stats.zaps += 1
        hitters = [j for j in range(self.env.num_agents) if bool(info["zap_hits"][j, i])]
        if hitters and bool(info["zapped"][i]):
            who = ", ".join(agent_letter(j) for j in hitters)
            text += f"; agent {who}'s zap sent you back to a spawn point"
            stats.zapped += 1
        memory.last_step = f"Last step ({step}): {text}."
        memory.recent.append(short)


def revealed_rules(config) -> str:
    """HIDDEN RULES: per colour on the map, what each stage pays and how fast a cell eaten at
    that stage comes back (its multiplier on the regrowth chance)."""
    pay = np.asarray(config.pay)
    multiplier = np.asarray(config.regrowth_multiplier)
    lines = ["HIDDEN RULES (given to you; the same for every trial of this episode)"]
    for colour in sorted({int(k) for k in np.asarray(config.patch_colours)}):
        stages = "; ".join(
            f"{name} pays {pay[colour, g]:g}, a cell eaten then regrows x{multiplier[colour, g]:g}"
            for g, name in enumerate(c.STAGE_NAMES)
        )
        lines.append(f"{c.COLOUR_NAMES[colour]}: {stages}")
    lines.append(
        "x2 comes back twice as fast as x1, x0.5 half as fast; the apples near a cell (2.3) "
        "still decide whether it can come back at all."
    )
    return "\n".join(lines)


def _saw_other(
    memory: OpenHarvestMemory, i, j, sighting: OpenHarvestSighting, cell, step, info
) -> None:
    """What the agent saw agent ``j`` do in its view: eat (an event too), zap, zap it."""
    if bool(info["ate"][j]):
        colour, stage = int(info["ate_colour"][j]), int(info["ate_stage"][j])
        sighting.eaten[(colour, stage)] += 1
        memory.events.append(
            f"t{step} Agent {agent_letter(j)} ate a {c.COLOUR_NAMES[colour]} "
            f"{c.STAGE_NAMES[stage]} apple at {cell}."
        )
    if bool(info["zap_fired"][j]):
        sighting.fired += 1
    if bool(info["zap_hits"][j, i]) and bool(info["zapped"][i]):
        sighting.hit_me += 1
