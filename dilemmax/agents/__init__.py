"""Agents: the policy protocol, scripted and learned policies, language-model agents, the arena."""

from dilemmax.agents.policy import GENERIC_POLICIES, Observation, Policy, random_policy

__all__ = ["GENERIC_POLICIES", "Observation", "Policy", "random_policy"]
