"""The step-rationale reply format: three labelled reasoning lines, then the move line.

The paper's SFT data use a "step-rationale output format" and its RLOO reward pays 0.10 for the
"required rationale structure", without printing either. The moral-hazard text protocol defines
it (``rationale="steps"`` asks for it in the prompt): non-empty ``FACTS: ...``,
``ACCOUNTING: ...`` and ``DECISION: ...`` lines, in that order, each on a line of its own::

    FACTS: I own Case 1; only my query reveals which option of Case 2 is unsafe.
    ACCOUNTING: QUERY costs 0.10 and gives up my local point; team success pays 0.50.
    DECISION: I query so that I can warn Agent 2.
    ACTION QUERY

This module writes replies in that structure (the teacher's completions) and checks them (the
reward). The check is the protocol's own ``rationale_check`` when its class declares one, so the
reward and the prompt cannot drift apart; :func:`labelled_lines_ok` is the same rule for
a protocol without it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

LABELS = ("FACTS", "ACCOUNTING", "DECISION")


def labelled_lines_ok(reply: Any, labels: Sequence[str] = LABELS) -> bool:
    """Whether ``reply`` has a non-empty ``<label>: text`` line for every label, the first of each
    in the order of ``labels``. Total (non-strings are False) and linear in the reply."""
    if not isinstance(reply, str):
        return False
    first: dict[str, int] = {}
    for number, line in enumerate(reply.split("\n")):
        head, sep, rest = line.strip().partition(":")
        key = head.strip("*# ").upper()
        if sep and key in labels and rest.strip() and key not in first:
            first[key] = number
    if len(first) != len(labels):
        return False
    positions = [first[label] for label in labels]
    return positions == sorted(positions)


@dataclass(frozen=True)
class LabelledRationale:
    """Writes and checks replies of labelled reasoning lines followed by a move line.

    Attributes:
        labels: the line labels, in order.
        checker: ``reply -> bool``; by default :func:`labelled_lines_ok` with ``labels``.
    """

    labels: tuple[str, ...] = LABELS
    checker: Callable[[Any], bool] | None = None

    def write(self, steps: Sequence[str], move_line: str) -> str:
        """The reply with one labelled line per step (whitespace collapsed) and the move last."""
        if len(steps) != len(self.labels):
            raise ValueError(f"expected {len(self.labels)} steps, got {len(steps)}")
        lines = [
            f"{label}: {' '.join(step.split())}"
            for label, step in zip(self.labels, steps, strict=True)
        ]
        return "\n".join([*lines, move_line])

    def check(self, reply: Any) -> bool:
        """Whether ``reply`` has the structure (never raises)."""
        try:
            if self.checker is not None:
                return bool(self.checker(reply))
            return labelled_lines_ok(reply, self.labels)
        except Exception:  # noqa: BLE001 - a reward must be total over any reply
            return False


DEFAULT_STRUCTURE = LabelledRationale()


def structure_for(protocol) -> LabelledRationale:
    """The rationale structure of ``protocol``: checked by its ``rationale_check`` (labels from its
    ``rationale_labels``) when the protocol declares them, else the default."""
    checker = getattr(protocol, "rationale_check", None)
    labels = tuple(getattr(protocol, "rationale_labels", LABELS))
    if checker is None and labels == LABELS:
        return DEFAULT_STRUCTURE
    return LabelledRationale(labels, checker)
