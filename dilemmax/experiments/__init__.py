"""The papers' language-model experiments as named designs (``dilemmax experiment``).

From Python::

    from dilemmax.experiments import run
    result = run("moral_hazard/isolation", seats="openai:my-model", out="runs/iso",
                 replicates=1, episodes=2)

:func:`run`, :func:`combine` and :func:`merge` are :mod:`dilemmax.experiments.runner`'s, loaded
on first use: ``dilemmax experiment --list`` imports this package for its catalogue only, and
the runner pulls in the designs and the model stack.
"""

from __future__ import annotations

import importlib
from typing import Any

_RUNNER_NAMES = ("run", "combine", "merge", "RunOptions", "ExperimentResult")


def __getattr__(name: str) -> Any:
    if name in _RUNNER_NAMES:
        return getattr(importlib.import_module("dilemmax.experiments.runner"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_RUNNER_NAMES)
