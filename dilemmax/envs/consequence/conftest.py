"""Shared fixtures of the consequence-game tests: one sorted env and its compiled step."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from dilemmax.envs.consequence.env import ConsequenceEnv
from dilemmax.envs.consequence.generator import make_config


class Player:
    """Drives one env through hand-chosen joint actions with a compiled step."""

    def __init__(self, env: ConsequenceEnv):
        self.env = env
        self.step = jax.jit(env.step_env)
        self.reset = jax.jit(env.reset_to)
        # One key per trial: the same state stepped under many keys (tie-breaks, RE draws).
        self.step_keys = jax.jit(jax.vmap(env.step_env, in_axes=(0, None, None)))

    def start(self, resources=(1, 5, 6), threshold=10, rule="RP", seed=0):
        _, state = self.reset(jax.random.key(seed), make_config(resources, threshold, rule))
        return state

    def actions(self, *values):
        return {a: jnp.int32(v) for a, v in zip(self.env.agents, values, strict=True)}

    def play(self, state, *joint_actions, seed=0):
        """Steps each joint action in turn; returns the last (obs, state, rewards, dones, infos)."""
        out = None
        for t, values in enumerate(joint_actions):
            out = self.step(jax.random.key(seed * 1000 + t), state, self.actions(*values))
            state = out[1]
        return out


@pytest.fixture(scope="session")
def player() -> Player:
    return Player(ConsequenceEnv(sorted_agents=True))
