"""The exception every user mistake raises, so that every command reports it the same way.

:class:`UsageError` marks an error in what the user asked for (an option value, a run folder, a
file): the ``dilemmax`` command prints its message on one line and exits with status 2, with no
traceback. Library code raises subclasses that are also the natural builtin (an option error is
a ``ValueError``), so callers catching the builtin keep working.
"""

from __future__ import annotations


class UsageError(Exception):
    """A mistake in the user's request; the message names what was wrong and what is allowed."""


class EnvVersionError(UsageError, ValueError):
    """Something made under one version of a game (a trained agent, a transcript, a scenario
    score) met another version of it; the message names both versions."""
