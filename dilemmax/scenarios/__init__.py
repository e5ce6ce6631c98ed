"""Held-out scenarios: focal agents against background populations they never trained with.

A scenario is a JAX env exposing only the focal seats (:class:`ScenarioEnv`); the registry holds
a train and a test set per game (:data:`SETS`), each scenario hashed by its content.
"""

from dilemmax.scenarios.env import ScenarioConfig, ScenarioEnv, ScenarioState
from dilemmax.scenarios.registry import SCENARIOS, SETS, scenario_set
from dilemmax.scenarios.spec import Scenario, ScenarioSet

__all__ = [
    "SCENARIOS",
    "SETS",
    "Scenario",
    "ScenarioConfig",
    "ScenarioEnv",
    "ScenarioSet",
    "ScenarioState",
    "scenario_set",
]
