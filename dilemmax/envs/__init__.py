"""Environments: the shared contract, spaces, registry and one folder per game."""

from dilemmax.envs.base import MultiAgentEnv, Rollout
from dilemmax.envs.registry import make, register, registered_envs
from dilemmax.envs.spaces import Box, Discrete

__all__ = ["Box", "Discrete", "MultiAgentEnv", "Rollout", "make", "register", "registered_envs"]
