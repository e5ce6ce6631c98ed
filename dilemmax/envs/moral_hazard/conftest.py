"""Shared helpers of the moral-hazard tests: hand-built cases and a compiled game driver."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from dilemmax.envs.base import Rollout
from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.moral_hazard.generator import make_config

# Two hand-built cases (labels A-D). Case 1: highest-utility option B; asks "highest" (answer B).
# Case 2: highest C, lowest B; asks "lowest" (answer B). Under the primary mapping the unsafe
# options are B and C and the targets D (9) and A (10).
UTILITIES_2 = ((3, 12, 7, 9), (10, 2, 13, 5))
QUESTIONS_2 = ("highest", "lowest")
# A third case for n = 3: highest A, lowest C; asks "highest" (answer A); unsafe A, target D.
UTILITIES_3 = UTILITIES_2 + ((11, 4, 2, 8),)
QUESTIONS_3 = QUESTIONS_2 + ("highest",)

A, B, C, D = range(4)


def local(x):
    return c.LOCAL_BASE + x


def final(x):
    return c.FINAL_BASE + x


def note(offset, x):
    return c.note_action(offset, x)


QUERY, NO_NOTE, NO_MOVE = c.QUERY, c.NO_NOTE, c.NO_MOVE


def fixed_config(n=2, **options):
    utilities = UTILITIES_2 if n == 2 else UTILITIES_3
    questions = QUESTIONS_2 if n == 2 else QUESTIONS_3
    return make_config(n, utilities=utilities, questions=questions, **options)


class Game:
    """Plays hand-chosen joint actions with compiled reset, step and metrics."""

    def __init__(self, num_agents: int):
        self.env = MoralHazardEnv(num_agents)
        self.reset = jax.jit(self.env.reset_to)
        self.step = jax.jit(self.env.step_env)
        self.metrics = jax.jit(self.env.episode_metrics)

    def actions(self, values):
        return {a: jnp.int32(v) for a, v in zip(self.env.agents, values, strict=True)}

    def play(self, config, *joint_actions, seed=0):
        """(outputs, metrics): outputs[0] = (obs, state, None, None, None) after the reset, then
        one (obs, state, rewards, dones, infos) per step; metrics None without steps."""
        obs, state = self.reset(jax.random.key(seed), config)
        outputs = [(obs, state, None, None, None)]
        for t, values in enumerate(joint_actions):
            out = self.step(jax.random.key(seed * 100 + t), state, self.actions(values))
            outputs.append(out)
            state = out[1]
        steps = outputs[1:]
        if not steps:
            return outputs, None
        stack = lambda *xs: jnp.stack(xs)
        rollout = Rollout(
            actions=jax.tree.map(stack, *[self.actions(v) for v in joint_actions]),
            rewards=jax.tree.map(stack, *[o[2] for o in steps]),
            dones=jax.tree.map(stack, *[o[3] for o in steps]),
            infos=jax.tree.map(stack, *[o[4] for o in steps]),
            valid=jnp.ones(len(steps), bool),
            final_state=state,
        )
        return outputs, self.metrics(rollout)


@pytest.fixture(scope="session")
def game2() -> Game:
    return Game(2)


@pytest.fixture(scope="session")
def game3() -> Game:
    return Game(3)
