"""A tiny env used only by the tests of the generic machinery (wrappers, arena, rollouts).

Each agent starts with a budget drawn from the config and spends ``action`` units per step
(legal: 0 .. remaining budget). Reward: the amount spent. An agent is done when its budget is
empty; the episode ends when all are done or after ``horizon`` steps.
"""

import jax
import jax.numpy as jnp
from flax import struct

from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.spaces import Box, Discrete

MAX_BUDGET = 3


@struct.dataclass
class ToyConfig:
    budgets: jax.Array  # int32[A]


@struct.dataclass
class ToyState:
    config: ToyConfig
    remaining: jax.Array  # int32[A]
    t: jax.Array  # int32[]


class ToyEnv(MultiAgentEnv):
    def __init__(self, num_agents: int = 2, horizon: int = 4):
        super().__init__(num_agents)
        self.horizon = horizon
        self.max_steps = horizon

    def sample_config(self, key):
        return ToyConfig(jax.random.randint(key, (self.num_agents,), 1, MAX_BUDGET + 1))

    def reset_to(self, key, config):
        state = ToyState(config, config.budgets, jnp.int32(0))
        return self.get_obs(state), state

    def get_obs(self, state):
        return {
            a: jnp.stack([state.remaining[i], state.t]).astype(jnp.int32)
            for i, a in enumerate(self.agents)
        }

    def action_mask(self, state):
        return {
            a: jnp.arange(MAX_BUDGET + 1) <= state.remaining[i] for i, a in enumerate(self.agents)
        }

    def step_env(self, key, state, actions):
        spend = jnp.stack([actions[a] for a in self.agents]).astype(jnp.int32)
        spend = jnp.where(spend <= state.remaining, spend, 0)  # illegal: spend nothing
        remaining = state.remaining - spend
        t = state.t + 1
        state = state.replace(remaining=remaining, t=t)
        done_all = jnp.all(remaining == 0) | (t >= self.horizon)
        dones = {a: (remaining[i] == 0) | done_all for i, a in enumerate(self.agents)}
        dones["__all__"] = done_all
        rewards = {a: spend[i].astype(jnp.float32) for i, a in enumerate(self.agents)}
        infos = {"spent": spend}
        return self.get_obs(state), state, rewards, dones, infos

    def observation_space(self, agent):
        return Box(0, max(MAX_BUDGET, self.horizon), (2,), jnp.int32)

    def action_space(self, agent):
        return Discrete(MAX_BUDGET + 1)

    def render_ansi(self, state):
        return f"t={int(state.t)} remaining={state.remaining.tolist()}"
