"""The Shared Well (env id ``shared_well``): a common pool with a hidden regrowth.

Two to four agents draw from one well that regrows by at most a hidden amount a round and never
once empty. See :mod:`.env` for the rules, :mod:`.policies` for the scripts, :mod:`.text` for
the protocol a language model plays and :mod:`.declaration` for what dilemmax reads without
importing the game. The five names below are imported on first use, so reading the declaration
imports no JAX code.
"""

from dilemmax.envs.game_declaration import lazy_exports

__all__ = [
    "SCRIPTED_POLICIES",
    "SharedWellConfig",
    "SharedWellEnv",
    "SharedWellState",
    "SharedWellText",
]
__getattr__ = lazy_exports(
    __name__,
    {
        "SCRIPTED_POLICIES": "policies",
        "SharedWellConfig": "types",
        "SharedWellEnv": "env",
        "SharedWellState": "types",
        "SharedWellText": "text",
    },
)
