"""Language models in the games: clients, the model as a policy, batched play (``llm`` extra).

From Python (what ``dilemmax play`` runs)::

    from dilemmax.llm import GenerateConfig, play_session
    run = play_session("moral_hazard", default_seat="openai:my-model", episodes=20,
                       generate=GenerateConfig(base_url="http://localhost:8000/v1"))

The names below are loaded on first use, so importing a submodule (``dilemmax.llm.sampling``)
does not pull in the play harness and its JAX programs.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "GenerateConfig": "dilemmax.llm.config",
    "play_session": "dilemmax.llm.api",
    "merge_play_shards": "dilemmax.llm.api",
    "PlayRun": "dilemmax.llm.api",
    "SessionOptions": "dilemmax.llm.session",
    "Shard": "dilemmax.llm.session",
}


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(_NAMES)
