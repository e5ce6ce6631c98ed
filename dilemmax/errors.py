"""The exception every user mistake raises, so that every command reports it the same way.

:class:`UsageError` marks an error in what the user asked for (an option value, a run folder, a
file): the ``dilemmax`` command prints its message on one line and exits with status 2, with no
traceback. Library code raises subclasses that are also the natural builtin (an option error is
a ``ValueError``), so callers catching the builtin keep working.
"""

from __future__ import annotations

import sys


class UsageError(Exception):
    """A mistake in the user's request; the message names what was wrong and what is allowed."""


class EnvVersionError(UsageError, ValueError):
    """Something made under one version of a game (a trained agent, a transcript, a scenario
    score) met another version of it; the message names both versions."""


_SAID: set[str] = set()


def deprecated(message: str) -> None:
    """Says once per process, on one stderr line, that an old spelling was used and what replaces
    it (``dilemmax: deprecated: ...``). The old spelling keeps working, so a user's script or a
    saved run folder does not break; the line tells them what to write instead."""
    if message in _SAID:
        return
    _SAID.add(message)
    print(f"dilemmax: deprecated: {message}", file=sys.stderr)
