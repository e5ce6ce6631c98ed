"""The Dialogue Moral Hazard Game (env id ``moral_hazard``).

Costly, other-benefiting information acquisition in a ring of n agents: pay a query cost to
learn the hidden unsafe option of your successor's case, warn it on a public board, and let
every owner use the warnings in its final choice. See :mod:`.env` for the mechanics,
:mod:`.constants` for the action encoding and :mod:`.observation` for the observation layout.
"""

from dilemmax.envs.moral_hazard import policies, theory
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.moral_hazard.evaluate import Estimate, evaluate, format_table
from dilemmax.envs.moral_hazard.generator import (
    ConditionSet,
    condition_grid,
    incentive_grid,
    make_config,
    stack_configs,
)
from dilemmax.envs.moral_hazard.metrics import SCALAR_OUTCOMES, random_control_moments
from dilemmax.envs.moral_hazard.text import MoralHazardText
from dilemmax.envs.moral_hazard.types import MoralHazardConfig, MoralHazardState

__all__ = [
    "SCALAR_OUTCOMES",
    "ConditionSet",
    "Estimate",
    "MoralHazardConfig",
    "MoralHazardEnv",
    "MoralHazardState",
    "MoralHazardText",
    "condition_grid",
    "evaluate",
    "format_table",
    "incentive_grid",
    "make_config",
    "policies",
    "random_control_moments",
    "stack_configs",
    "theory",
]
