"""Every paper design ``dilemmax experiment`` can run, by name (``<game>/<design>``).

Each paper subpackage exports ``DESIGNS: tuple[Design, ...]`` from its ``__init__``; this module
collects them in the order of :data:`PAPERS` and checks their names once (well formed, unique).
"""

from __future__ import annotations

import re
from types import ModuleType

from dilemmax.errors import UsageError
from dilemmax.experiments import consequence, moral_hazard, open_grid
from dilemmax.experiments.design import Design

PAPERS: tuple[ModuleType, ...] = (moral_hazard, consequence, open_grid)
NAME = re.compile(r"[a-z][a-z0-9_]*/[a-z][a-z0-9_]*")


def designs() -> dict[str, Design]:
    """name -> design, every paper's, in the papers' order."""
    found: dict[str, Design] = {}
    for paper in PAPERS:
        for design in getattr(paper, "DESIGNS", ()):
            if not isinstance(design, Design) or not NAME.fullmatch(design.name):
                raise TypeError(f"{paper.__name__}.DESIGNS holds {design!r}: not a named Design")
            if design.name in found:
                raise TypeError(f"two designs are named {design.name!r}")
            found[design.name] = design
    return found


def find(name: str, known: dict[str, Design] | None = None) -> Design:
    """The design ``name`` (a one-line error naming the known ones otherwise)."""
    known = designs() if known is None else known
    if name not in known:
        raise UsageError(f"no experiment design {name!r}; designs: {', '.join(known) or 'none'}")
    return known[name]
