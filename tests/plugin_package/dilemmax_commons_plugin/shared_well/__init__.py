"""The Shared Well (env id ``shared_well``): a common pool with a hidden regrowth.

Two to four agents draw from one well that regrows by at most a hidden amount a round and never
once empty. See :mod:`.env` for the rules, :mod:`.policies` for the scripts and :mod:`.text` for
the protocol a language model plays.
"""

from dilemmax_commons_plugin.shared_well.env import SharedWellEnv
from dilemmax_commons_plugin.shared_well.policies import SCRIPTED_POLICIES
from dilemmax_commons_plugin.shared_well.text import SharedWellText
from dilemmax_commons_plugin.shared_well.types import SharedWellConfig, SharedWellState

__all__ = [
    "SCRIPTED_POLICIES",
    "SharedWellConfig",
    "SharedWellEnv",
    "SharedWellState",
    "SharedWellText",
]
