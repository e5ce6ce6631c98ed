"""The consequence-allocation threshold game (IABench-CA): env id ``consequence``."""

from dilemmax.envs.consequence.constants import RULE_NAMES
from dilemmax.envs.consequence.generator import (
    context_grid,
    context_table,
    cross_rules,
    make_config,
    resource_splits,
)
from dilemmax.envs.consequence.types import ConsequenceConfig, ConsequenceState

__all__ = [
    "RULE_NAMES",
    "ConsequenceConfig",
    "ConsequenceState",
    "context_grid",
    "context_table",
    "cross_rules",
    "make_config",
    "resource_splits",
]
