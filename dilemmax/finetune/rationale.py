"""The step-rationale reply format: numbered reasoning lines, then the move line.

The paper's SFT data use a "step-rationale output format" and its RLOO reward pays 0.10 for the
"required rationale structure". This module is the one place that structure is defined, so the
teacher's completions (:mod:`~dilemmax.finetune.datasets`) and the reward
(:mod:`~dilemmax.finetune.rewards`) cannot drift apart. A game's text protocol may define its own
by exposing a ``rationale_structure`` attribute with the same two methods (``write`` and
``check``); :func:`structure_for` prefers it.

The default structure: exactly the lines ``STEP 1: ...``, ``STEP 2: ...``, ``STEP 3: ...`` (each
with some text after the colon), in that order, all before the move line::

    STEP 1: I own Case 1; my successor Agent 2 owns Case 2.
    STEP 2: Only my query can reveal which option of Case 2 is unsafe.
    STEP 3: I query so that I can warn Agent 2.
    ACTION QUERY
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_STEP = re.compile(r"^[ \t]*STEP[ \t]+(\d{1,3})[ \t]*:[ \t]*(\S.*)?$", re.I | re.M)


@dataclass(frozen=True)
class StepRationale:
    """Numbered reasoning steps before a move line.

    Attributes:
        num_steps: how many steps a reply must give (numbered 1..num_steps).
    """

    num_steps: int = 3

    def write(self, steps: Sequence[str], move_line: str) -> str:
        """The reply with ``steps`` as numbered lines and ``move_line`` last."""
        if len(steps) != self.num_steps:
            raise ValueError(f"expected {self.num_steps} steps, got {len(steps)}")
        lines = [f"STEP {i + 1}: {' '.join(step.split())}" for i, step in enumerate(steps)]
        return "\n".join([*lines, move_line])

    def check(self, reply: str, move_pattern: re.Pattern | None = None) -> bool:
        """Whether ``reply`` has steps 1..num_steps in order, each non-empty, and, when
        ``move_pattern`` is given, all of them before the first line it matches.

        Total: never raises; linear in the reply's length.
        """
        if not isinstance(reply, str):
            return False
        found = [(int(m.group(1)), bool(m.group(2)), m.start()) for m in _STEP.finditer(reply)]
        numbers = [number for number, _, _ in found]
        if numbers != list(range(1, self.num_steps + 1)):
            return False
        if not all(has_text for _, has_text, _ in found):
            return False
        if move_pattern is None:
            return True
        move = move_pattern.search(reply)
        return move is not None and found[-1][2] < move.start()


DEFAULT_STRUCTURE = StepRationale()


def structure_for(protocol) -> StepRationale:
    """The rationale structure of ``protocol`` (its ``rationale_structure``), else the default."""
    return getattr(protocol, "rationale_structure", None) or DEFAULT_STRUCTURE
