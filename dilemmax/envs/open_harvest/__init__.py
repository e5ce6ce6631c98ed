"""OpenHarvest (OpenSocialJax): a common-pool orchard with hidden ripeness rules.

``dilemmax.make("open_harvest")`` builds :class:`~dilemmax.envs.open_harvest.env.OpenHarvestEnv`.
Modules as in every game folder: ``constants``, ``types`` (state, configuration, layout, rule),
``generator`` (layout and rule pools, configurations), ``dynamics``, ``observation``,
``metrics``, ``policies``, ``rendering``; the text protocol: ``text`` (the
:class:`~dilemmax.envs.osj.protocol.OSJProtocol` subclass), ``view_text`` (state -> text),
``ledger`` (the typed per-agent memory) and ``prompts/`` (the system prompt files).
"""

from dilemmax.envs.open_harvest.env import OpenHarvestEnv
from dilemmax.envs.open_harvest.policies import SCRIPTED_POLICIES
from dilemmax.envs.open_harvest.text import OpenHarvestText
from dilemmax.envs.open_harvest.types import OpenHarvestConfig, OpenHarvestState

# Every game folder exports the same five names (tests/test_game_layout.py); everything else is
# imported from its module (generator, metrics, policies, ...).
__all__ = [
    "SCRIPTED_POLICIES",
    "OpenHarvestConfig",
    "OpenHarvestEnv",
    "OpenHarvestState",
    "OpenHarvestText",
]
