"""What an OpenHarvest agent remembers: what it was paid, the orchard it watched (RULES YOU
KNOW), the trees it has seen, the counts of the trial and what it saw the others do.

Everything here is the agent's own observation, never the hidden tables: the pays it tasted,
how long the cells it saw emptied took to grow back (exact when it watched without a gap, an
upper bound otherwise), how long apples it kept in view took to ripen and rot. :class:`Trees`
is the numpy view of one state's orchard these records are read from.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.osj.memory import AgentMemory, Sighting


class Trees:
    """numpy view of the orchard of one state: positions, colours, patches, apples, stages."""

    def __init__(self, config, state, snapshot=None):
        layout = config.layout
        self.pos = np.asarray(layout.tree_positions).astype(int)  # int[T, 2] (row, col)
        self.patch = np.asarray(layout.tree_patch).astype(int)  # int[T]
        self.colour = np.asarray(config.patch_colours).astype(int)[self.patch]  # int[T]
        self.index = np.asarray(layout.tree_index)  # int[H, W] tree at a cell (-1: none)
        self.neighbours = np.asarray(layout.neighbours)  # int[T, K] trees within 2 (T: pad)
        if snapshot is not None:
            self.apple, self.stage = snapshot.apple, snapshot.stage
        else:
            orchard = state.orchard
            self.apple = np.asarray(orchard.apple)  # bool[T]
            self.stage = np.minimum(
                np.asarray(orchard.age) // np.maximum(np.asarray(orchard.stage_length), 1), 2
            )  # int[T] 0 unripe, 1 ripe, 2 over-ripe

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

    def patch_lines(self, trees) -> str:
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


# ----------------------------------------------------------------------------- RULES YOU KNOW
@dataclass
class Pay:
    """What one (colour, stage) paid the agent."""

    pay: float  # points of the first one eaten (the table is fixed for the episode)
    times: int = 0  # how many the agent ate


@dataclass
class Pending:
    """A cell the agent saw emptied by an eater this trial and has not seen regrow."""

    colour: int  # the tree's colour
    stage: int  # stage of the apple eaten there (-1 until the eater is known)
    emptied: int  # step count it was emptied at
    around: int  # apples within 2 when it was emptied
    look: int  # step count it was last seen (still empty)
    around_look: int  # apples within 2 then


@dataclass
class Watch:
    """An apple kept in view without a gap since it appeared."""

    since: int  # step count it appeared at
    stage: int  # its stage when last seen
    stage_since: int  # step count it reached that stage at


@dataclass
class HarvestLedger:
    """RULES YOU KNOW of OpenHarvest, from the agent's own eating and watching (episode-long,
    except ``pending`` and ``watch``, which belong to one trial)."""

    pays: dict[tuple[int, int], Pay] = field(default_factory=dict)  # (colour, stage) ->
    regrowth: dict[tuple[int, int], list[tuple[int, bool]]] = field(
        default_factory=dict
    )  # (colour, eaten stage) -> (steps to regrow, exact?) per cell seen regrow
    pending: dict[int, Pending] = field(default_factory=dict)  # tree -> emptied cell waited on
    watch: dict[int, Watch] = field(default_factory=dict)  # tree -> apple watched
    ripening: dict[str, list[int]] = field(default_factory=dict)  # "unripe -> ripe" -> steps
    rot: collections.Counter[int] = field(default_factory=collections.Counter)  # colour ->
    rot_ages: list[int] = field(default_factory=list)  # steps from appearing to rotting

    def paid(self, colour: int, stage: int, pay: float) -> None:
        self.pays.setdefault((colour, stage), Pay(pay)).times += 1

    def observe(self, events, now: int, info, trees: Trees, in_view: list[int]) -> None:
        """Updates the ledger with one step's orchard events seen in view (``now`` = step after);
        what it saw regrow also goes into ``events``."""
        watch = self.watch
        visible = set(in_view)
        for t in in_view:
            colour = int(trees.colour[t])
            if bool(info["emptied_eaten"][t]):
                self.pending[t] = Pending(
                    colour, -1, now, trees.around(t), look=now, around_look=trees.around(t)
                )
                watch.pop(t, None)
            elif t in self.pending:
                self.pending[t].look = now
                self.pending[t].around_look = trees.around(t)
            if bool(info["regrown"][t]) and t in self.pending:
                entry = self.pending.pop(t)
                key = (entry.colour, entry.stage)
                self.regrowth.setdefault(key, []).append((now - entry.emptied, True))
                events.append(f"t{now - 1} Regrowth in your view: 1 {c.COLOUR_NAMES[colour]}.")
            elif bool(info["regrown"][t]) or bool(info["regrown_after_rot"][t]):
                events.append(
                    f"t{now - 1} Regrowth in your view: 1 {c.COLOUR_NAMES[colour]} (you did not "
                    "see that cell being emptied)."
                )
            if bool(info["regrown"][t]) or bool(info["regrown_after_rot"][t]):
                watch[t] = Watch(since=now, stage=0, stage_since=now)
            if bool(info["rotted"][t]):
                self.rot[colour] += 1
                if t in watch:
                    self.rot_ages.append(now - watch[t].since)
                watch.pop(t, None)
        for t in list(watch):
            if t not in visible:
                del watch[t]  # no longer watched without a gap
                continue
            stage = int(trees.stage[t]) if trees.apple[t] else -1
            entry = watch[t]
            if stage > entry.stage:
                label = f"{c.STAGE_NAMES[entry.stage]} -> {c.STAGE_NAMES[stage]}"
                self.ripening.setdefault(label, []).append(now - entry.stage_since)
                entry.stage, entry.stage_since = stage, now
        # Cells emptied in view by an eater: fix the stage the apple had.
        for j in range(len(info["ate"])):
            t = int(info["ate_tree"][j])
            if t in self.pending and self.pending[t].emptied == now:
                self.pending[t].stage = int(info["ate_stage"][j])
        # A pending cell seen regrown after a gap: an upper bound.
        for t in list(self.pending):
            if t in visible and trees.apple[t] and self.pending[t].emptied < now:
                entry = self.pending.pop(t)
                key = (entry.colour, entry.stage)
                self.regrowth.setdefault(key, []).append((now - entry.emptied, False))

    def end_trial(self) -> None:
        self.pending.clear()
        self.watch.clear()

    def block(self, steady: bool = False) -> str:
        """RULES YOU KNOW. ``steady`` (the "cached" layout): without the tallies that move
        during a trial (apples eaten of each kind, apples seen rot, the cells still waited on),
        which NOW shows instead (:meth:`tallies`, :meth:`waiting_lines`), so the block changes
        only when the agent learns something new about the rules."""
        lines = ["RULES YOU KNOW", "What you ate and what it paid you:"]
        if not self.pays:
            lines[-1] += " nothing yet this episode."
        else:
            by_colour: dict[int, list[str]] = {}
            for colour, stage in sorted(self.pays):
                entry = self.pays[(colour, stage)]
                times = "" if steady else f" (x{entry.times})"
                by_colour.setdefault(colour, []).append(
                    f"{c.STAGE_NAMES[stage]} -> {entry.pay:g} points{times}"
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
        keys = set(self.regrowth)
        if not steady:
            keys |= {(e.colour, e.stage) for e in self.pending.values()}
        if not keys:
            lines[-1] += " none yet."
        for key in sorted(keys):
            lines.append(self._regrowth_line(key, waiting=not steady))
        ripening = "; ".join(
            f"{label} after {', '.join(str(v) for v in steps)} steps"
            for label, steps in sorted(self.ripening.items())
        )
        lines.append(
            "Ripening you watched (apples kept in view from the moment they appeared): "
            + (ripening or "none yet")
            + "."
        )
        lines.append("Apples you saw rot: " + self._rot_phrase(steady) + ".")
        return "\n".join(lines)

    def _rot_phrase(self, steady: bool) -> str:
        """The colours seen rot (with how many of each unless ``steady``) and the ages of the
        watched apples that rotted."""
        if not self.rot:
            return "none"
        colours = sorted(self.rot.items())
        rot = ", ".join(c.COLOUR_NAMES[col] + ("" if steady else f" {n}") for col, n in colours)
        if not self.rot_ages:
            return rot
        return rot + f" (rotted {', '.join(str(a) for a in self.rot_ages)} steps after appearing)"

    def tallies(self) -> list[str]:
        """The episode's counts the steady RULES YOU KNOW leaves out, for NOW: the apples the
        agent ate of each kind and the apples it saw rot, by colour."""
        lines = []
        eaten = {key: entry.times for key, entry in self.pays.items()}
        if eaten:
            lines.append(f"Apples you have eaten this episode: {eaten_phrase(eaten)}.")
        if self.rot:
            rot = ", ".join(f"{c.COLOUR_NAMES[col]} {n}" for col, n in sorted(self.rot.items()))
            lines.append(f"Apples you have seen rot this episode: {rot}.")
        return lines

    def _regrowth_line(self, key: tuple[int, int], waiting: bool = True) -> str:
        """One colour and eaten stage's regrowth, with the cells still waited on unless
        ``waiting`` is False."""
        colour, stage = key
        stage_name = c.STAGE_NAMES[stage] if stage >= 0 else "an unknown stage"
        parts = [("" if exact else "<=") + str(n) for n, exact in self.regrowth.get(key, [])]
        pending = [e for e in self.pending.values() if (e.colour, e.stage) == key and waiting]
        text = f"{c.COLOUR_NAMES[colour]} cells eaten at {stage_name}: "
        text += ("regrew after " + ", ".join(parts) + " steps") if parts else "none seen regrow"
        if pending:
            ups = max(e.look - e.emptied for e in pending)
            around = sorted({e.around for e in pending})
            text += (
                f"; {len(pending)} not regrown yet this trial (still empty up to {ups} steps "
                f"after being emptied; apples around when emptied: "
                f"{', '.join(str(a) for a in around)})"
            )
        return text

    def clocks(self, in_view, trees: Trees) -> str:
        """The watched apples in view and since when they are at their stage (NOW)."""
        parts = []
        for t in in_view:
            if t in self.watch and trees.apple[t]:
                r, q = trees.pos[t]
                parts.append(
                    f"({r}, {q}) {c.COLOUR_NAMES[trees.colour[t]]} "
                    f"{c.STAGE_NAMES[self.watch[t].stage]} since step {self.watch[t].stage_since}"
                )
        return "; ".join(parts)

    def waiting_lines(self, step: int, trees: Trees, around: bool = False) -> str:
        """The emptied cells the agent waits on, latest first (NOW); ``around``: with the apples
        near each when it was emptied (the "cached" layout, whose RULES YOU KNOW leaves the
        waited cells to NOW)."""
        parts = []
        for t, e in sorted(self.pending.items(), key=lambda x: -x[1].emptied):
            r, q = trees.pos[t]
            stage = c.STAGE_NAMES[e.stage] if e.stage >= 0 else "?"
            head = f"({r}, {q}) {c.COLOUR_NAMES[e.colour]} eaten {stage} at step {e.emptied}"
            head += f" with {e.around} apples around" if around else ""
            if e.look >= step:
                parts.append(f"{head}, empty for {step - e.emptied} steps so far")
            else:
                parts.append(f"{head}, still empty when you last saw it at step {e.look}")
        return "; ".join(parts)


# ----------------------------------------------------------------------------- the memory
@dataclass
class TreesSeen:
    """The trees the agent has seen (episode-long) and how each looked when last seen."""

    trees: set[int] = field(default_factory=set)  # every tree ever in view
    last_seen: dict[int, tuple[int, bool, int]] = field(
        default_factory=dict
    )  # tree -> (step, apple?, stage), this trial


@dataclass
class TrialStats:
    """The agent's counts of the trial being played (EARLIER TRIALS)."""

    apples: int = 0  # apples it ate
    points: float = 0.0  # what they paid
    eaten: collections.Counter[tuple[int, int]] = field(
        default_factory=collections.Counter
    )  # (colour, stage) -> apples eaten
    zaps: int = 0  # beams it fired
    zapped: int = 0  # times a zap sent it back to a spawn point


@dataclass
class OpenHarvestSighting(Sighting):
    """What the agent saw of one other agent this trial."""

    eaten: collections.Counter[tuple[int, int]] = field(
        default_factory=collections.Counter
    )  # (colour, stage) -> apples seen eaten
    fired: int = 0  # zaps seen fired
    hit_me: int = 0  # its zaps that sent the agent back


@dataclass
class OpenHarvestMemory(AgentMemory[OpenHarvestSighting]):
    """Per-agent memory for one OpenHarvest episode: the shared parts and the game's records."""

    sighting_type: ClassVar[type[Sighting]] = OpenHarvestSighting

    ledger: HarvestLedger = field(default_factory=HarvestLedger)  # episode-long
    seen: TreesSeen = field(default_factory=TreesSeen)  # trees episode-long, looks this trial
    stats: TrialStats = field(default_factory=TrialStats)  # this trial

    def clear_trial(self) -> None:
        self.stats = TrialStats()
        self.ledger.end_trial()
        self.seen.last_seen = {}


def eaten_phrase(eaten: collections.Counter[tuple[int, int]]) -> str:
    """``red unripe 2, green ripe 1`` for counts of (colour, stage)."""
    return ", ".join(
        f"{c.COLOUR_NAMES[col]} {c.STAGE_NAMES[st]} {v}" for (col, st), v in sorted(eaten.items())
    )
