"""Where dilemmax keeps what it can compute again: one folder per kind of entry under
``$XDG_CACHE_HOME/dilemmax`` (default ``~/.cache/dilemmax``): ``jax`` for the commands' compiled
programs, ``responses`` for the language-model reply cache, ``pools`` for the grid games' built
layout and rule pools."""

from __future__ import annotations

import os
from pathlib import Path


def cache_home() -> Path:
    """``$XDG_CACHE_HOME/dilemmax``; ``~/.cache/dilemmax`` when the variable is unset or empty."""
    home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(home) / "dilemmax"
