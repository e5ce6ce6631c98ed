"""What an OpenCleanup agent remembers: its shots (RULES YOU KNOW), the map it has seen, the
counts of the trial and what it saw the others do; with the text of each.

Everything here is the agent's own observation: the ledger keeps what its own shots with a full
window did to each waste colour (never the hidden recipes), the sightings what it watched the
others' beams do inside its view.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from dilemmax.envs.open_cleanup import constants as C
from dilemmax.envs.open_cleanup.dynamics import CLEARED, LIGHTENED, OUTCOME
from dilemmax.envs.open_cleanup.rendering import waste_name
from dilemmax.envs.osj.memory import AgentMemory, Sighting


def pair_text(pair: int) -> str:
    """``[2, 0]`` for a pick-up pair index (first pick-up, then second)."""
    return f"[{pair // C.NUM_TOOLS}, {pair % C.NUM_TOOLS}]"


def own_beam_after(pair_effect, shot_pair: int, before) -> list[int]:
    """What one agent's OWN shot did to each of its beam cells: the codes they would have after
    it alone (``before`` codes of the beam, ``shot_pair`` -1 without a full window).

    The env's ``beam_after`` is the grid after every shot of the step, so a cell another agent's
    beam changed in the same step would show that agent's work. A cell code can be changed by
    one effect only (a hue's cleaner for light waste, "mid -> light", "dark -> mid"), so the
    shooter's own outcome is its effect's entry in the env's outcome table; these are exactly the
    cells the env credits to it (``infos["cleared"]`` / ``infos["lightened"]``).
    """
    effect = C.NO_EFFECT if shot_pair < 0 else int(np.asarray(pair_effect)[shot_pair])
    after = []
    for code in (int(b) for b in before):
        outcome = int(OUTCOME[effect, code])
        after.append(C.WATER if outcome == CLEARED else code - 1 if outcome == LIGHTENED else code)
    return after


@dataclass
class ShotLedger:
    """RULES YOU KNOW: what the agent's own shots with a full window did (episode-long)."""

    # pair index -> waste code before the shot -> Counter(code after the shot)
    effects: dict[int, dict[int, collections.Counter[int]]] = field(default_factory=dict)

    def record(self, pair: int, before: int, after: int) -> None:
        by_code = self.effects.setdefault(pair, {})
        by_code.setdefault(before, collections.Counter())[after] += 1

    def block(self) -> str:
        lines = ["RULES YOU KNOW"]
        if not self.effects:
            lines.append("You have not fired at waste with a full window yet.")
            return "\n".join(lines)
        lines.append("Orders you have fired with so far (what you watched them do):")
        for pair in sorted(self.effects):
            changed, unchanged = [], []
            for before in sorted(self.effects[pair]):
                for after, count in sorted(self.effects[pair][before].items()):
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
            lines.append(f"{pair_text(pair)} -> " + "; ".join(parts))
        return "\n".join(lines)


@dataclass
class MapSeen:
    """The fixed places the agent has seen (the same every trial of the episode)."""

    stations: dict[tuple[int, int], int] = field(default_factory=dict)  # (row, col) -> tool
    river: set[tuple[int, int]] = field(default_factory=set)  # water or waste cells
    orchard: set[tuple[int, int]] = field(default_factory=set)  # orchard soil or apple cells


@dataclass
class TrialStats:
    """The agent's counts of the trial being played (EARLIER TRIALS, OTHER AGENTS)."""

    cleared: int = 0  # waste cells the agent's own shots cleared
    ate: int = 0  # apples it ate
    fired: int = 0  # shots it fired
    river_steps: int = 0  # steps it started in or next to the river
    first_tool: int | None = None  # step count when it first held a working tool
    cleared_by_others: int = 0  # river cells in its view cleared by the others' beams


@dataclass
class OpenCleanupSighting(Sighting):
    """What the agent saw of one other agent this trial, with what it saw that agent's beam do."""

    fired: int = 0  # shots seen fired
    effects: collections.Counter[tuple[int, int]] = field(
        default_factory=collections.Counter
    )  # (waste code before, code after) -> hits seen in view
    empty_shots: int = 0  # shots with no waste under the beam in view
    no_effect_shots: int = 0  # shots that hit waste and changed none of it


@dataclass
class OpenCleanupMemory(AgentMemory[OpenCleanupSighting]):
    """Per-agent memory for one OpenCleanup episode: the shared parts and the game's records."""

    sighting_type: ClassVar[type[Sighting]] = OpenCleanupSighting

    ledger: ShotLedger = field(default_factory=ShotLedger)  # episode-long
    seen: MapSeen = field(default_factory=MapSeen)  # episode-long
    stats: TrialStats = field(default_factory=TrialStats)  # this trial

    def clear_trial(self) -> None:
        self.stats = TrialStats()


# ----------------------------------------------------------------------------- text
def effect_phrases(s: OpenCleanupSighting) -> list[str]:
    """What the agent saw another agent's beam do, effect by effect."""
    phrases = []
    for (before, after), count in sorted(s.effects.items()):
        if before == after:
            continue
        if after == C.WATER:
            phrases.append(f"cleared {count} {waste_name(before)}")
        else:
            phrases.append(f"turned {count} {waste_name(before)} into {waste_name(after)}")
    if s.no_effect_shots:
        phrases.append(f"{s.no_effect_shots} shot(s) hit waste with no effect")
    if s.empty_shots:
        phrases.append(f"{s.empty_shots} shot(s) with no waste under the beam in your view")
    return phrases


def trial_summary(stats: TrialStats, number: int) -> str:
    """EARLIER TRIALS: what the agent did in trial ``number`` (1-based)."""
    first = stats.first_tool
    return (
        f"Trial {number}: you cleared {stats.cleared} waste cells, ate {stats.ate} "
        f"apples, fired {stats.fired} times, spent {stats.river_steps} steps in or next "
        "to the river; "
        + (
            f"first working tool in hand at step {first}."
            if first
            else "you never made a working tool."
        )
    )
