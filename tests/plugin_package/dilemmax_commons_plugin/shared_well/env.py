"""The Shared Well as a dilemmax environment: a common pool that dries up when over-drawn.

``A`` agents (2 to 4) draw water from one well for ``num_rounds`` rounds. Each round every agent
asks for ``a_i`` units (action ``a_i`` in 0..3; legal while ``a_i <= stock``, so 0 always is).
If the requests fit (``sum a <= stock``) everyone gets what it asked for; otherwise the stock is
rationed, agent i getting ``floor(a_i * stock / sum a)``. What is left, ``r``, regrows by
``min(r, g)`` up to the capacity: a well regrows in proportion to what remains, at most ``g``
units a round, and an empty one never again. The regrowth ``g`` is the hidden state: drawn per
episode from ``growth_low .. growth_high`` and never shown, only each round's regrowth is. The
episode ends after ``num_rounds`` rounds or when the well is empty.

The dilemma: each unit taken is one unit of reward now, but a well drawn below ``g`` regrows
less, so restraint by all (taking about ``g`` in total a round) beats greed by all over a few
rounds, while a greedy agent among restrained ones earns most.

Rewards: agent i's reward is what it received this round (float32). An illegal action (asking
for more than the well holds, or outside 0..3) is a move not made: it asks for 0, and
``infos["valid"]`` records it.

Observation, float32[5] in [0, 1]: stock / capacity; rounds played / num_rounds; the agent's
own take last round / 3; the other agents' mean take last round / 3; last regrowth / capacity.

``infos`` of a step (agent axis A):

==============  ==========  ==================================================
key             shape       meaning
==============  ==========  ==================================================
demand          int32[A]    what each agent asked for (0 where invalid)
take            int32[A]    what each agent received
valid           bool[A]     its action was legal
rationed        bool[]      the requests exceeded the stock
growth          int32[]     the well's regrowth after this round
stock           int32[]     the stock after regrowth
dry             bool[]      the well is empty (the episode ends)
==============  ==========  ==================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import jax
import jax.numpy as jnp

from dilemmax.envs import Box, Discrete, MultiAgentEnv, Rollout
from dilemmax.envs.base import SweepPart
from dilemmax.envs.option_declaration import Option
from dilemmax.envs.options import check_env_options
from dilemmax_commons_plugin.shared_well import constants as c
from dilemmax_commons_plugin.shared_well import generator, policies, rendering
from dilemmax_commons_plugin.shared_well.metrics import METRIC_AXES, episode_metrics
from dilemmax_commons_plugin.shared_well.text import SharedWellText
from dilemmax_commons_plugin.shared_well.types import SharedWellConfig, SharedWellState

GROWTH = {"low": 0, "high": 16}


class SharedWellEnv(MultiAgentEnv):
    """The Shared Well (env id ``shared_well``): see the module docstring for the rules."""

    obs_from_state = True
    metric_axes = METRIC_AXES

    def __init__(
        self,
        num_agents: Annotated[
            int, Option("A, the agents sharing the well", low=c.MIN_AGENTS, high=c.MAX_AGENTS)
        ] = 2,
        num_rounds: Annotated[int, Option("rounds in an episode", low=1, high=32)] = 10,
        capacity: Annotated[int, Option("units a full well holds", low=4, high=64)] = 12,
        growth_low: Annotated[int, Option("the least hidden regrowth g drawn", **GROWTH)] = 1,
        growth_high: Annotated[int, Option("the most hidden regrowth g drawn", **GROWTH)] = 4,
    ):
        check_env_options(type(self), locals())
        super().__init__(num_agents)
        self.max_steps = self.num_rounds = num_rounds
        self.capacity, self.growth_low, self.growth_high = capacity, growth_low, growth_high

    @classmethod
    def check_options_together(cls, values: Mapping[str, Any]) -> None:
        low, high = values.get("growth_low"), values.get("growth_high")
        if low is not None and high is not None and low > high:
            raise ValueError(f"growth_low ({low}) must not exceed growth_high ({high})")

    # ------------------------------------------------------------------ configuration
    def sample_config(self, key: jax.Array) -> SharedWellConfig:
        return generator.draw_well(key, self.capacity, self.growth_low, self.growth_high)

    def growth_grid(self) -> SharedWellConfig:
        """One full well per hidden regrowth the env allows."""
        return generator.growth_grid(self.capacity, self.growth_low, self.growth_high)

    def config_grids(self):
        return {"growth_grid": self.growth_grid}

    def sweep(self) -> list[SweepPart]:
        grid = self.growth_grid()
        names = [f"g={int(g)}" for g in grid.growth]
        return [SweepPart("growth", self.num_agents, grid, names)]

    training_defaults = {  # a few thousand steps: enough to see greed pay on a laptop
        "total_timesteps": 20_000,
        "num_envs": 16,
        "num_steps": 12,
        "gamma": 0.99,
        "train_grid": growth_grid,
        "eval_grid": growth_grid,
    }

    def reset_to(self, key: jax.Array, config: SharedWellConfig):
        none = jnp.zeros(self.num_agents, jnp.int32)
        state = SharedWellState(config, config.stock, jnp.int32(0), none, jnp.int32(0))
        return self.get_obs(state), state

    # ------------------------------------------------------------------ dynamics
    def step_env(self, key: jax.Array, state: SharedWellState, actions):
        del key  # the well is deterministic given the requests
        asked = jnp.stack([jnp.asarray(actions[a], jnp.int32) for a in self.agents])
        valid = (asked >= 0) & (asked <= c.MAX_TAKE) & (asked <= state.stock)
        demand = jnp.where(valid, asked, 0)
        total = jnp.sum(demand)
        rationed = total > state.stock
        take = jnp.where(rationed, demand * state.stock // jnp.maximum(total, 1), demand)
        remaining = state.stock - jnp.sum(take)
        growth = jnp.minimum(remaining, state.config.growth)
        stock = jnp.minimum(state.config.capacity, remaining + growth)
        next_state = state.replace(
            stock=stock, round=state.round + 1, last_take=take, last_growth=growth
        )
        done = (next_state.round >= self.num_rounds) | (stock == 0)
        dones = {a: done for a in self.agents} | {"__all__": done}
        rewards = {a: take[i].astype(jnp.float32) for i, a in enumerate(self.agents)}
        infos = {
            "demand": demand,
            "take": take,
            "valid": valid,
            "rationed": rationed,
            "growth": growth,
            "stock": stock,
            "dry": stock == 0,
        }
        return self.get_obs(next_state), next_state, rewards, dones, infos

    # ------------------------------------------------------------------ views
    def get_obs(self, state: SharedWellState) -> dict[str, jax.Array]:
        capacity = state.config.capacity.astype(jnp.float32)
        takes = state.last_take.astype(jnp.float32) / c.MAX_TAKE
        others = (jnp.sum(takes) - takes) / (self.num_agents - 1)
        shared = [state.stock / capacity, state.round / self.num_rounds]
        return {
            a: jnp.stack([*shared, takes[i], others[i], state.last_growth / capacity]).astype(
                jnp.float32
            )
            for i, a in enumerate(self.agents)
        }

    def action_mask(self, state: SharedWellState) -> dict[str, jax.Array]:
        legal = jnp.arange(c.NUM_ACTIONS) <= state.stock
        return {a: legal for a in self.agents}

    def observation_space(self, agent: str) -> Box:
        return Box(0.0, 1.0, (c.OBS_SIZE,), jnp.float32)

    def action_space(self, agent: str) -> Discrete:
        return Discrete(c.NUM_ACTIONS)

    # ------------------------------------------------------------------ extras
    def episode_metrics(self, rollout: Rollout) -> dict[str, jax.Array]:
        return episode_metrics(rollout, self.agents)

    def scripted_policies(self) -> dict:
        return dict(policies.SCRIPTED_POLICIES)

    def text_protocol(self, **options):
        return SharedWellText(self, **options)

    def render_ansi(self, state: SharedWellState) -> str:
        return rendering.render_ansi(state)
