"""Environments: the shared contract, spaces, registry and one folder per game."""

from dilemmax.envs.base import MultiAgentEnv, Rollout
from dilemmax.envs.registry import make, register, registered_envs
from dilemmax.envs.rollout import Observation, run_episode, run_episodes
from dilemmax.envs.spaces import Box, Discrete

__all__ = [
    "Box",
    "Observation",
    "run_episode",
    "run_episodes",
    "Discrete",
    "MultiAgentEnv",
    "Rollout",
    "make",
    "register",
    "registered_envs",
]
