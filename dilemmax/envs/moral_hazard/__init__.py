"""The Dialogue Moral Hazard Game (env id ``moral_hazard``).

Costly, other-benefiting information acquisition in a ring of n agents: pay a query cost to
learn the hidden unsafe option of your successor's case, warn it on a public board, and let
every owner use the warnings in its final choice. See :mod:`.env` for the mechanics,
:mod:`.constants` for the action encoding and :mod:`.observation` for the observation layout.
"""

from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.moral_hazard.policies import SCRIPTED_POLICIES
from dilemmax.envs.moral_hazard.text import MoralHazardText
from dilemmax.envs.moral_hazard.types import MoralHazardConfig, MoralHazardState

# Every game folder exports the same five names (tests/test_game_layout.py); everything else is
# imported from its module (generator, metrics, policies, ...).
__all__ = [
    "SCRIPTED_POLICIES",
    "MoralHazardConfig",
    "MoralHazardEnv",
    "MoralHazardState",
    "MoralHazardText",
]
