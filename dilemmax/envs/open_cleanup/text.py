"""Text interface of OpenCleanup: the OpenSocialJax agent protocol (paper, Appendix A).

The system prompt states the rules the paper's prompt states (listing 1), in this project's
words: the score, the river and the orchard, trials, waste hues and shades, base tools, the
pick-up window and hidden recipes, the beam, moves, how to read a turn, the JSON reply and the
notes. It does not say how many of the 16 pairs are recipes (the paper's prompt never does).

Each step's user message (``turn``) follows listing 3: a progress line, RULES YOU KNOW (every
pick-up pair the agent fired with and what those shots did to each waste colour, from its own
shots only), YOUR NOTES, EARLIER TRIALS, OTHER AGENTS (only what the agent saw), YOUR PLAN, LAST
STEP, RECENT STEPS, NOW (place, facing, hand and window, what is in view, stations / river /
orchard seen so far, the 11 x 11 view drawn north-up) and ACTIONS NOW (a shot lists the cells its
beam would cover). The memory lives in :class:`~dilemmax.envs.osj_protocol.AgentMemory`; the
reply format and its parser are in :mod:`dilemmax.envs.osj_protocol`. An invalid reply, or a
frozen agent (zap option), plays stay (action 7).

``render`` / ``parse`` are the stateless view (no memory) that ``observation.text()`` shows in
the arena; the parser is the same.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping

import numpy as np

from dilemmax.envs import grid as G
from dilemmax.envs import osj_protocol as P
from dilemmax.envs.open_cleanup import constants as C
from dilemmax.envs.open_cleanup.observation import VIEW_AHEAD, VIEW_BEHIND, VIEW_SIDE
from dilemmax.envs.open_cleanup.rendering import agent_letter, cell_token
from dilemmax.envs.text import NoReply, ParsedReply, Prompt, TextProtocol
from dilemmax.envs.text_parsing import guarded

MODES = ("craft", "clean", "harvest", "explore")
GOAL_TYPES = ("move_to", "fire", "pick_up", "wait")
_EXTRA_NAMES = {
    "N": C.NORTH_ACTION, "UP": C.NORTH_ACTION, "S": C.SOUTH_ACTION, "DOWN": C.SOUTH_ACTION,
    "E": C.EAST_ACTION, "RIGHT": C.EAST_ACTION, "W": C.WEST_ACTION, "LEFT": C.WEST_ACTION,
    "PICK": C.PICK_UP_ACTION, "WAIT": C.STAY_ACTION, "NOOP": C.STAY_ACTION,
}  # fmt: skip


def _is_waste(code: int) -> bool:
    return C.WASTE_BASE <= code < C.WASTE_BASE + C.NUM_WASTE_TYPES


def waste_name(code: int) -> str:
    """``G2 (green-dark)`` for a waste code."""
    hue, shade = divmod(code - C.WASTE_BASE, C.NUM_SHADES)
    return f"{cell_token(code)} ({C.HUE_NAMES[hue]}-{C.SHADE_NAMES[shade]})"


def _cell_name(code: int) -> str:
    if _is_waste(code):
        return waste_name(code)
    if code == C.APPLE:
        return "apple"
    if code >= C.STATION_BASE:
        return f"station of tool {code - C.STATION_BASE}"
    return {C.GROUND: "ground", C.WALL: "wall", C.WATER: "water", C.ORCHARD: "orchard soil"}[code]


def _span(cells) -> str:
    rows = [r for r, _ in cells]
    cols = [c for _, c in cells]
    return f"rows {min(rows)}-{max(rows)}, cols {min(cols)}-{max(cols)}"


_VIEW_OFFSETS = G.view_offsets(VIEW_AHEAD, VIEW_BEHIND, VIEW_SIDE)


class _Snap:
    """The numpy values of one (unbatched) state that a turn reads, read once."""

    def __init__(self, state, legal: np.ndarray):
        self.grid = np.asarray(state.grid).astype(np.int32)
        self.pos = np.asarray(state.positions).astype(np.int32)
        self.dir = np.asarray(state.orientations).astype(np.int32)
        self.window = np.asarray(state.window).astype(np.int32)
        self.frozen = np.asarray(state.frozen).astype(np.int32)
        self.trial = int(state.trial)
        self.step = int(state.trial_step)
        self.trial_return = np.asarray(state.trial_return)
        self.trial_cleared = np.asarray(state.trial_cleared)
        self.legal = legal
        self.occupant = {(int(r), int(c)): j for j, (r, c) in enumerate(self.pos)}
        self.shape = self.grid.shape


class OpenCleanupText(TextProtocol):
    """The OpenSocialJax protocol for one OpenCleanup env (see the module docstring).

    Args:
        env: the :class:`~dilemmax.envs.open_cleanup.env.OpenCleanupEnv`.
        role: None, or "cooperator" / "defector": item 1.5 of the system prompt used by the
            paper's Schelling-diagram runs (Listing 5).
    """

    def __init__(self, env, role: str | None = None):
        if role not in (None, "cooperator", "defector"):
            raise ValueError(f"role must be None, 'cooperator' or 'defector', got {role!r}")
        self.env = env
        self.role = role
        self._systems: dict[str, str] = {}
        self.names = C.ACTION_NAMES[: env.num_actions]
        self.name_map = {n.replace("_", "").upper(): a for a, n in enumerate(self.names)}
        self.name_map.update(_EXTRA_NAMES)
        self.schema = P.reply_schema(MODES, GOAL_TYPES, env.num_actions)
        self._legal_fn = None

    def _invalid(self, error: str) -> ParsedReply:
        return ParsedReply(C.STAY_ACTION, False, error)

    def _legal(self, state) -> np.ndarray:
        """bool[A, num_actions], in numpy (the env's rule: pick up only on a station, a frozen
        agent only stays); a jax call here would cost more than the whole turn."""
        grid = np.asarray(state.grid)
        pos = np.asarray(state.positions)
        legal = np.ones((self.env.num_agents, self.env.num_actions), bool)
        legal[:, C.PICK_UP_ACTION] = grid[pos[:, 0], pos[:, 1]] >= C.STATION_BASE
        frozen = np.asarray(state.frozen) > 0
        legal[frozen] = False
        legal[frozen, C.STAY_ACTION] = True
        return legal

    # ------------------------------------------------------------------ system prompt
    def system_prompt(self, agent: str) -> str:
        if agent not in self._systems:
            self._systems[agent] = self._system_prompt(agent)
        return self._systems[agent]

    def _system_prompt(self, agent: str) -> str:
        env = self.env
        me = agent_letter(env.agent_index[agent])
        letters = ", ".join(agent_letter(i) for i in range(env.num_agents))
        zap = (
            f"\n2.10 ZAP (action 9) fires the same beam at agents: one it hits goes back to a "
            f"spawn point and cannot act for {C.ZAP_FREEZE_STEPS} steps."
            if env.zap
            else ""
        )
        role = f"\n{_ROLES[self.role]}" if self.role else ""
        return _CLEANUP_SYSTEM.format(
            me=me, n=env.num_agents, letters=letters, steps=env.trial_steps,
            trials=env.num_trials, zap=zap, role=role,
        )  # fmt: skip

    # ------------------------------------------------------------------ stateless view
    def render(self, state, agent: str) -> str:
        i = self.env.agent_index[agent]
        s = _Snap(state, self._legal(state))
        return "\n\n".join(
            [self._progress(s, i), self._shot_line(state, i), self._now(s, i, None)]
            + [P.actions_block(self._action_lines(s, i))]
        )

    def parse(self, reply: str, state, agent: str) -> ParsedReply:
        """The stateless parser (same reply format as a turn's). Total."""
        return guarded(self._parse, self._invalid)(reply, state, agent)

    def _parse(self, reply: str, state, agent: str) -> ParsedReply:
        legal = np.flatnonzero(self._legal(state)[self.env.agent_index[agent]])
        return self._parse_act(reply, tuple(int(a) for a in legal))

    def _parse_act(self, reply, legal) -> ParsedReply:
        return P.parse_step_reply(
            reply, legal, self.name_map, self.env.num_actions, C.STAY_ACTION, MODES, GOAL_TYPES
        )

    # ------------------------------------------------------------------ play interface
    def new_memory(self, agent: str) -> P.AgentMemory:
        memory = P.AgentMemory(agent, self.env.agent_index[agent])
        # ledger: pair -> waste code before the shot -> Counter(code after)
        memory.ledger = collections.defaultdict(
            lambda: collections.defaultdict(collections.Counter)
        )
        memory.extra = {"stations": {}, "river": set(), "orchard": set()}
        return memory

    def turn(self, state, agent: str, memory: P.AgentMemory) -> Prompt | NoReply:
        i = self.env.agent_index[agent]
        s = _Snap(state, self._legal(state))
        if s.frozen[i] > 0:
            return NoReply(C.STAY_ACTION)
        self._see(memory, s, i)
        position = tuple(int(v) for v in s.pos[i])
        blocks = [
            self._progress(s, i),
            self._rules_block(memory),
            P.notes_block(memory),
            P.earlier_trials_block(memory),
            self._others_block(memory, s.step),
            P.plan_block(memory, s.step, position),
            P.last_step_block(memory),
            P.recent_block(memory),
            self._now(s, i, memory),
            P.actions_block(self._action_lines(s, i)),
        ]
        legal = tuple(int(a) for a in np.flatnonzero(s.legal[i]))
        context = {"step": s.step, "trial": s.trial, "position": position}
        return Prompt(
            self.system_prompt(agent), "\n\n".join(b for b in blocks if b), "act", legal,
            context, self.schema,
        )  # fmt: skip

    def parse_reply(self, reply: str, prompt: Prompt) -> ParsedReply:
        """A step reply (JSON) or a trial-end rewrite, by ``prompt.kind``. Total, linear time."""
        return guarded(self._parse_reply, self._invalid)(reply, prompt)

    def _parse_reply(self, reply: str, prompt: Prompt) -> ParsedReply:
        if prompt.kind == "reflect":
            return P.parse_reflect_reply(reply, C.STAY_ACTION)
        return self._parse_act(reply, prompt.legal)

    def after_reply(self, memory, agent, prompt, reply, parsed) -> None:
        P.remember_reply(memory, prompt, parsed)

    def after_step(self, memory, agent, state, actions, infos, next_state) -> list[Prompt]:
        i = self.env.agent_index[agent]
        step = int(state.trial_step)
        pos = np.asarray(state.positions)
        before_view = P.view_cells(pos[i], int(np.asarray(state.orientations)[i]),
                                   tuple(np.asarray(state.grid).shape))  # fmt: skip
        info = {k: np.asarray(v) for k, v in infos.items()}
        self._record_own(memory, i, step, state, actions, next_state, info)
        self._record_others(memory, i, step, state, info, before_view)
        if not bool(info["trial_done"]):
            return []
        return self._end_trial(memory, agent, state)

    def after_episode(self, memory, agent, final_state) -> None:
        """Nothing to add: the episode's last trial summary was written by ``after_step``."""

    # ------------------------------------------------------------------ memory updates
    def _see(self, memory: P.AgentMemory, s: _Snap, i: int) -> None:
        """Adds what is in view now to the stations / river / orchard seen (same every trial)."""
        for r, c in P.view_cells(s.pos[i], s.dir[i], s.shape):
            code = int(s.grid[r, c])
            if code >= C.STATION_BASE:
                memory.extra["stations"][(r, c)] = code - C.STATION_BASE
            elif code == C.WATER or _is_waste(code):
                memory.extra["river"].add((r, c))
            elif code in (C.ORCHARD, C.APPLE):
                memory.extra["orchard"].add((r, c))

    def _record_own(self, memory, i, step, state, actions, next_state, info) -> None:
        stats = memory.trial_stats
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
        if chosen in (C.NORTH_ACTION, C.SOUTH_ACTION, C.EAST_ACTION, C.WEST_ACTION):
            outcome = f"moved {before} -> {after}" if before != after else "blocked, you stayed"
        elif chosen in (C.TURN_LEFT_ACTION, C.TURN_RIGHT_ACTION):
            facing = P.FACING_NAMES[int(np.asarray(next_state.orientations)[i])]
            outcome = f"facing {facing}"
        if int(info["picked_up"][i]) >= 0:
            window = [int(v) for v in np.asarray(next_state.window)[i] if v >= 0]
            outcome = f"picked up tool {int(info['picked_up'][i])}; window now {window}"
            if bool(info["made_tool"][i]) and "first_tool" not in stats:
                stats["first_tool"] = step + 1
        if bool(info["ate"][i]):
            outcome += "; you ate an apple (+1)" if outcome else "you ate an apple (+1)"
            stats["ate"] += 1
        if bool(info["fired"][i]):
            stats["fired"] += 1
            outcome = self._record_shot(memory, i, info)
        stats["cleared"] += int(info["cleared"][i])
        stats["river_steps"] += self._near_river(before, state)
        memory.last_step = f"Last step ({step}): " + " -> ".join(
            words + ([outcome] if outcome else [])
        )
        short = name.replace("_", " ")
        memory.recent.append(f"t{step} {short}" + (f" -> {after}" if before != after else ""))

    @staticmethod
    def _near_river(cell, state) -> int:
        mask = np.asarray(state.config.river_mask)
        r, c = cell
        return int(mask[max(r - 1, 0) : r + 2, max(c - 1, 0) : c + 2].any())

    def _record_shot(self, memory, i, info) -> str:
        pair = int(info["shot_pair"][i])
        before = [int(v) for v in info["beam_before"][i]]
        after = [int(v) for v in info["beam_after"][i]]
        cells = [tuple(int(v) for v in cell) for cell in info["beam_cells"][i]]
        hits = [
            (cell, b, a) for cell, b, a in zip(cells, before, after, strict=True) if _is_waste(b)
        ]
        held = (
            f"window [{pair // C.NUM_TOOLS}, {pair % C.NUM_TOOLS}]"
            if pair >= 0
            else "no full window"
        )
        if not hits:
            return f"fired with {held}: no waste under the beam"
        parts = []
        for cell, b, a in hits:
            if pair >= 0:
                memory.ledger[pair][b][a] += 1
            effect = "unchanged" if a == b else f"-> {cell_token(a)}"
            parts.append(f"{cell} {cell_token(b)} {effect}")
        return f"fired with {held}: " + "; ".join(parts)

    def _record_others(self, memory, i, step, state, info, view) -> None:
        positions = np.asarray(state.positions)
        facings = np.asarray(state.orientations)
        for j in range(self.env.num_agents):
            if j == i:
                continue
            cell = (int(positions[j][0]), int(positions[j][1]))
            sighting = memory.others.setdefault(j, P.Sighting())
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
            if not bool(info["fired"][j]):
                continue
            sighting.counts["fired"] += 1
            hit_any = False
            for bcell, b, a in zip(
                info["beam_cells"][j], info["beam_before"][j], info["beam_after"][j], strict=True
            ):
                b, a = int(b), int(a)
                if (int(bcell[0]), int(bcell[1])) not in view or not _is_waste(b):
                    continue
                hit_any = True
                sighting.counts[(b, a)] += 1
                if a == C.WATER:
                    memory.trial_stats["cleared_by_others"] += 1
            if not hit_any:
                sighting.counts["empty_shot"] += 1
            elif all(
                int(b) == int(a)
                for b, a in zip(info["beam_before"][j], info["beam_after"][j], strict=True)
            ):
                sighting.counts["no_effect_shot"] += 1

    def _end_trial(self, memory, agent, state) -> list[Prompt]:
        stats = memory.trial_stats
        number = memory.trial + 1
        first = stats.get("first_tool")
        summary = (
            f"Trial {number}: you cleared {stats['cleared']} waste cells, ate {stats['ate']} "
            f"apples, fired {stats['fired']} times, spent {stats['river_steps']} steps in or next "
            "to the river; "
            + (
                f"first working tool in hand at step {first}."
                if first
                else "you never made a working tool."
            )
        )
        others = [self._other_summary(j, s) for j, s in sorted(memory.others.items()) if s.seen]
        memory.earlier_trials.append(summary)
        if others:
            tail = (
                f"; {stats['cleared_by_others']} river cells in your view were cleared by others."
            )
            memory.earlier_trials.append(
                f"Trial {number}, other agents: " + "; ".join(others) + tail
            )
        P.open_next_trial(memory, number)
        if number >= self.env.num_trials:
            return []
        return [P.reflect_prompt(self.system_prompt(agent), memory, summary)]

    @staticmethod
    def _other_summary(j: int, s: P.Sighting) -> str:
        text = f"{agent_letter(j)} seen {s.seen} steps"
        if s.counts["fired"]:
            text += f", you saw it fire {s.counts['fired']} time(s)"
            effects = _effect_phrases(s.counts)
            if effects:
                text += ": " + "; ".join(effects)
        return text

    # ------------------------------------------------------------------ blocks
    def _progress(self, s: _Snap, i: int) -> str:
        return (
            f"Trial {s.trial + 1} of {self.env.num_trials}, step {s.step} of "
            f"{self.env.trial_steps}. This trial: you cleared {int(s.trial_cleared[i])} waste "
            f"cells, you ate {int(s.trial_return[i])} apples."
        )

    def _rules_block(self, memory: P.AgentMemory) -> str:
        lines = ["RULES YOU KNOW"]
        if not memory.ledger:
            lines.append("You have not fired at waste with a full window yet.")
            return "\n".join(lines)
        lines.append("Orders you have fired with so far (what you watched them do):")
        for pair in sorted(memory.ledger):
            changed, unchanged = [], []
            for before in sorted(memory.ledger[pair]):
                for after, count in sorted(memory.ledger[pair][before].items()):
                    times = f" ({count}x)" if count > 1 else ""
                    if after == before:
                        unchanged.append(f"{waste_name(before)}{times}")
                    elif after == C.WATER:
                        changed.append(f"cleared {waste_name(before)} to water{times}")
                    else:
                        changed.append(
                            f"turned {waste_name(before)} into {waste_name(after)}{times}"
                        )
            parts = changed + (["no effect on " + ", ".join(unchanged)] if unchanged else [])
            lines.append(f"[{pair // C.NUM_TOOLS}, {pair % C.NUM_TOOLS}] -> " + "; ".join(parts))
        return "\n".join(lines)

    def _others_block(self, memory: P.AgentMemory, step: int) -> str:
        lines = ["OTHER AGENTS (what you have seen yourself)"]
        for j, s in sorted(memory.others.items()):
            if not s.seen:
                continue
            ago = "now" if s.last_step >= step - 1 else f"{step - 1 - s.last_step} steps ago"
            text = (
                f"Agent {agent_letter(j)}: last seen {ago} at {s.position} facing "
                f"{P.FACING_NAMES[s.facing]}; seen {s.seen} times this trial"
            )
            if s.counts["fired"]:
                effects = _effect_phrases(s.counts)
                text += f"; you saw it fire {s.counts['fired']} time(s)"
                text += (": " + "; ".join(effects)) if effects else ""
            lines.append(text + ".")
        if len(lines) == 1:
            lines.append("You have not seen any other agent this trial.")
        cleared = memory.trial_stats["cleared_by_others"]
        lines.append(f"River cells cleared in your view but not by you this trial: {cleared}.")
        return "\n".join(lines)

    def _now(self, s: _Snap, i: int, memory: P.AgentMemory | None) -> str:
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
            f"{P.FACING_NAMES[int(s.dir[i])]}, standing on {_cell_name(int(s.grid[r, c]))}. {hand}",
            _window_line(window),
            self._in_view(s, i),
        ]
        if memory is not None:
            lines += self._seen_lines(memory)
        lines.append("Map:")
        lines.append(self._view(s, i))
        return "\n".join(lines)

    def _in_view(self, s: _Snap, i: int) -> str:
        cells = P.view_cells(s.pos[i], s.dir[i], s.shape)
        counts = collections.Counter()
        hue_shades = collections.Counter()
        stations = collections.defaultdict(list)
        for r, c in sorted(cells):
            code = int(s.grid[r, c])
            if _is_waste(code):
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
            text += (
                " Stations in view: "
                + "; ".join(
                    f"T{t} at " + ", ".join(str(x) for x in cs)
                    for t, cs in sorted(stations.items())
                )
                + "."
            )
        return text

    @staticmethod
    def _seen_lines(memory: P.AgentMemory) -> list[str]:
        lines = []
        stations = collections.defaultdict(list)
        for cell, tool in sorted(memory.extra["stations"].items()):
            stations[tool].append(cell)
        if stations:
            lines.append(
                "Stations you have seen (same places every trial): "
                + "; ".join(
                    f"T{t} at " + ", ".join(str(c) for c in cs)
                    for t, cs in sorted(stations.items())
                )
                + "."
            )
        parts = []
        if memory.extra["river"]:
            river = memory.extra["river"]
            parts.append(
                f"River seen (same place every trial): {_span(river)} ({len(river)} cells seen)"
            )
        if memory.extra["orchard"]:
            orchard = memory.extra["orchard"]
            parts.append(f"orchard seen: {_span(orchard)} ({len(orchard)} cells seen)")
        if parts:
            lines.append("; ".join(parts) + ".")
        return lines

    def _view(self, s: _Snap, i: int) -> str:
        height, width = s.shape
        offsets = _VIEW_OFFSETS[int(s.dir[i])]
        cells = s.pos[i] + offsets.reshape(-1, 2)
        rows = range(int(cells[:, 0].min()), int(cells[:, 0].max()) + 1)
        cols = range(int(cells[:, 1].min()), int(cells[:, 1].max()) + 1)
        out = ["     " + " ".join(f"{c:>2}" for c in cols)]
        for r in rows:
            tokens = []
            for c in cols:
                if not (0 <= r < height and 0 <= c < width):
                    tokens.append("##")
                elif (r, c) in s.occupant:
                    j = s.occupant[(r, c)]
                    tokens.append("ME" if j == i else "@" + agent_letter(j))
                else:
                    tokens.append(cell_token(int(s.grid[r, c])))
            out.append(f"r{r:>2}  " + " ".join(tokens))
        return "\n".join(out)

    def _action_lines(self, s: _Snap, i: int) -> list[str]:
        height, width = s.shape
        lines = []
        for action, name in enumerate(self.names):
            if not s.legal[i][action]:
                continue
            text = f"{action} {name}"
            if action in (C.FIRE_ACTION, C.ZAP_ACTION):
                covered = [
                    f"({r}, {c}) {cell_token(int(s.grid[r, c]))}"
                    for r, c in P.beam_cells(s.pos[i], s.dir[i])
                    if 0 <= r < height and 0 <= c < width
                ]
                text += " (beam: " + (", ".join(covered) or "off the map") + ")"
            lines.append(text)
        return lines

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
            np.asarray(state.shot_cells)[i], np.asarray(state.shot_before)[i],
            np.asarray(state.shot_after)[i], strict=True,
        ):  # fmt: skip
            before, after = int(before), int(after)
            if not _is_waste(before):
                continue
            effect = "unchanged" if before == after else f"-> {cell_token(after)}"
            parts.append(f"({int(r)}, {int(c)}) {cell_token(before)} {effect}")
        hits = "; ".join(parts) if parts else "no waste under the beam"
        return f"Your last shot (step {when}, {held}): {hits}."


def _window_line(window: list[int]) -> str:
    head = "Your window (last two pick-ups, oldest first): "
    if not window:
        return head + "empty."
    if len(window) == 1:
        return head + f"[{window[0]}]; one more pick-up x makes it [{window[0]}, x]."
    return head + f"[{window[0]}, {window[1]}]; your next pick-up x makes it [{window[1]}, x]."


def _effect_phrases(counts: collections.Counter) -> list[str]:
    phrases = []
    for key, count in sorted((k, v) for k, v in counts.items() if isinstance(k, tuple)):
        before, after = key
        if before == after:
            continue
        if after == C.WATER:
            phrases.append(f"cleared {count} {waste_name(before)}")
        else:
            phrases.append(f"turned {count} {waste_name(before)} into {waste_name(after)}")
    if counts["no_effect_shot"]:
        phrases.append(f"{counts['no_effect_shot']} shot(s) hit waste with no effect")
    if counts["empty_shot"]:
        phrases.append(f"{counts['empty_shot']} shot(s) with no waste under the beam in your view")
    return phrases


_ROLES = {
    "cooperator": (
        "1.5 YOUR ROLE: the group's total matters more to you than your own score. You will give "
        "up some of your own apples, and spend your time on work that helps everyone, if it lets "
        "the others eat more."
    ),
    "defector": (
        "1.5 YOUR ROLE: only your own score matters to you. Eat as many apples as you can "
        "yourself; what the other agents eat does not matter to you."
    ),
}

_CLEANUP_SYSTEM = """\
You are agent {me}, one of {n} agents ({letters}) in a grid world called Clean Up.

1. YOUR OBJECTIVE
1.1 Your score is the number of apples YOU eat. Apples eaten by others do not count for you. \
Cleaning the river helps everyone; an apple goes to whoever reaches it first.
1.2 Apples grow only in the orchard, and only while the river is clean enough. The places of \
the river, the orchard and the stations differ between episodes and stay the same for all \
trials of one episode: look around to find them.
1.3 A trial lasts {steps} steps. Then the map is laid out again in the same layout (the \
stations stay put): the river is fully polluted again, your hand is empty and the apples are \
gone. The recipes (2.6) and what each working tool does stay the same for all {trials} trials \
of the episode.
1.4 You are told only what YOU cleared and ate; you never see other agents' scores, hands or \
windows.{role}

2. THE WORLD
2.1 A waste cell has a HUE (red, yellow, green, cyan, purple) and a SHADE (light, mid, dark). \
Colour code = hue * 3 + shade: 6 = green-light, 7 = green-mid, 8 = green-dark.
2.2 A shot of your beam at a waste cell does exactly one of three things: it CLEARS the cell \
to water, makes it ONE SHADE LIGHTER (dark -> mid, mid -> light), or does NOTHING.
2.3 A WORKING tool is made by picking up two base tools in a certain order; a single base tool \
does nothing to waste. Which order makes which working tool, and which waste that tool acts on, \
you find out by trying; RULES YOU KNOW then keeps it for you.
2.4 There are 4 kinds of BASE tool stations (tools 0-3), in a chain between the river and the \
orchard, more than one of each.
2.5 PICK UP is action 8 while you stand on a station. Walking onto or over a station does not \
change your hand.
2.6 You have one hand and a WINDOW: your last two pick-ups, oldest first. A pick-up pushes the \
oldest one out: window [2, 0], pick up 3 -> window [0, 3]. Each working tool has a hidden \
RECIPE, an ordered pair such as [2, 0] = pick up tool 2, then tool 0. As soon as your window \
equals a recipe you hold that working tool; the next pick-up slides the window and you hold a \
plain base tool again. No two working tools share a recipe.
2.7 What you hold is shown only as the pick-ups that made it, never as what it is or does, and \
not even whether those two pick-ups are a recipe at all. Firing tells you.
2.8 The beam covers the cell you FACE, the cell beyond it, and the two cells diagonally beside \
the faced cell.
2.9 Moves are compass moves (north, south, east, west) and do not change your facing; only \
turning does. Walls and other agents block a move. Walking onto an apple eats it (+1). Waste \
slowly comes back.{zap}

3. HOW TO READ YOUR TURN
3.1 Positions are (row, col): row 0 is the NORTH edge, rows grow southward; col 0 is the WEST \
edge, columns grow eastward. North = row-1, south = row+1, east = col+1, west = col-1.
3.2 You see an 11x11 window that turns with you: 9 cells ahead, 1 behind and 5 to each side, \
so turning changes what you see. The map shows exactly those cells, drawn north-up with column \
numbers on top and row numbers on the left; cells beyond the edge are ##. ME = you, @B = agent \
B, T<n> = station of tool n, AP = apple, ,, = orchard soil, ~~ = water, ## = wall, .. = ground, \
waste = hue letter + shade digit (G2 = green-dark).
3.3 RULES YOU KNOW: every pick-up order you have fired with and what those shots did, kept for \
you; you never need to write a shot down. YOUR NOTES: yours alone, the only part written by \
you: what you have worked out about how to PLAY and what you mean to do next; nothing in it is \
checked or filled in for you. EARLIER TRIALS: one summary per finished trial, of what you did \
and what you saw of the others. OTHER AGENTS: only what you saw in your own view. YOUR PLAN: \
your current goal and earlier ones. LAST STEP: what your last action did and events in your \
view. RECENT STEPS: your last steps. ACTIONS NOW: what you can do now; fire lists what the \
beam would cover.
3.4 You know only what you see: other agents and parts of the river exist beyond your view, \
but you are told nothing about them.

4. HOW TO ANSWER
4.1 Reply with ONE JSON object and nothing else:
{{"why_this_move": "<at most 500 characters>", "mode": "craft" | "clean" | "harvest" | \
"explore", "goal": {{"type": "move_to" | "fire" | "pick_up" | "wait", "cell": [row, col], \
"why": "<at most 80 characters>"}}, "note": {{"op": "none" | "add" | "replace" | "delete", \
"id": <entry number to replace or delete, else 0>, "text": "<the entry to add, or the new \
wording of [id]; empty otherwise>"}}, "action": <one number from ACTIONS NOW>}}
4.2 mode = what you are working on: craft (getting a working tool), clean (firing at waste), \
harvest (going for apples), explore (testing a pair you do not know yet).
4.3 goal = the sub-goal this action serves. Keep the SAME goal from step to step until it is \
done or an event makes it pointless; when you change it, say why in "why". For fire, pick_up \
and wait, cell = where you do it.
4.4 A reply that is not such an object, or whose action is not in ACTIONS NOW, makes you stay.

5. YOUR NOTES
5.1 What your shots did is kept for you under RULES YOU KNOW for the whole episode; do not \
copy shots into your notes.
5.2 What is NOT kept for you is how to play. "note" is one EDIT to your notes, which are shown \
to you every step. Each entry has a number, like [3], that it keeps for the whole trial. Write \
down what you have worked out and what you mean to do: a way of working that paid off or \
wasted time, what the river needed before apples appeared, what the others seem to be doing, \
what you will try next and why.
5.3 add: a new entry with "text". replace: entry [id] becomes "text"; do it as soon as an \
entry proves wrong or can be said better, including the lessons carried in from the last \
trial. delete: remove entry [id] when it is wrong and nothing replaces it. none: leave the \
notes as they are (right on most steps). A wrong entry left standing misleads you every step.
5.4 When a trial ends you will be asked to rewrite your notes into a short list. ONLY THAT \
LIST is carried into the next trial; the step-by-step entries are dropped. RULES YOU KNOW \
carries over by itself, so spend the list on how to play."""
