"""A scenario as a JAX env: only the focal agents are exposed; the background plays inside.

Melting Pot's test of cooperation, in JAX: a game, the seats of the focal agents, and in every
other seat a background policy the focal agents never trained with. :class:`ScenarioEnv` is a
:class:`~dilemmax.envs.base.MultiAgentEnv` whose agents are the focal seats, so any training or
evaluation code (``dilemmax train``, JaxMARL's loops, :func:`dilemmax.envs.rollout.run_episodes`)
uses it unchanged. Several scenarios of one game with the same focal seats form one env: the
scenario an episode plays is data (``ScenarioConfig.scenario``), so every scenario of a set runs
in one vmapped program.

Inside ``step_env`` the background acts through the episode driver's own seat loop
(:func:`~dilemmax.envs.rollout.act_carried`, focal seats as placeholders) and its carried memories
(recurrent policies) record the step through :func:`~dilemmax.envs.rollout.record_step`. The key
``step_env`` gets is the full game's step key: :func:`~dilemmax.envs.rollout.step_parts` splits it
into the seats' key (background seat ``i`` acts with ``seat_keys(key_act, A)[i]``) and the game's
key. So a scenario step is exactly the full game's step with the background seated, the step
``dilemmax/scenarios/test_env.py`` replays through ``rollout.act_seats`` / ``rollout.advance``.

The background sees what a seat of the full game sees (its own observation, its mask and, for
oracle scripts, the game state); it never sees the focal agents' policies or anything the
wrapper adds. Each background policy is computed for every scenario of the set and the one the
episode plays is selected, which is what ``vmap`` of a ``lax.switch`` costs anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import jax
import jax.numpy as jnp
from flax import struct

from dilemmax.envs import metrics as M
from dilemmax.envs.base import MultiAgentEnv, Rollout
from dilemmax.envs.option_declaration import Option
from dilemmax.envs.rollout import act_carried, initial_carries, record_step, step_parts
from dilemmax.envs.spaces import Space


@struct.dataclass
class ScenarioConfig:
    """Which scenario of the set an episode plays.

    Attributes:
        scenario: int32[], an index into the env's scenarios. The game's own configuration
            (layout, rules, context) is sampled at reset from the game's split.
    """

    scenario: jax.Array


@struct.dataclass
class ScenarioState:
    """The full game between steps, with the background's memories.

    Attributes:
        game: the full game's state.
        obs: agent -> the full game's last observation of every seat (the background acts on it).
        carries: per scenario, per seat, the carried policy's memory (``()`` for stateless
            background seats and for focal seats).
        scenario: int32[], the scenario this episode plays.
    """

    game: Any
    obs: dict
    carries: tuple
    scenario: jax.Array


class ScenarioEnv(MultiAgentEnv):
    """The focal seats of ``game`` against background populations."""

    # The id under which runs trained on a scenario env record it (make("scenarios", ...)):
    # agents.trained checks a run against this rather than the class a set happens to build.
    registered_as = "scenarios"
    # The axes of each metric episode_metrics returns (return is per focal seat).
    metric_axes = {
        "return": M.PER_AGENT,
        "per_capita": M.SCALAR,
        "background_return": M.PER_BACKGROUND,
        "length": M.SCALAR,
    }

    def __init__(
        self,
        game: Annotated[
            MultiAgentEnv,
            Option("the full game (a dilemmax env, built with the scenario's options and split)"),
        ],
        focal: Annotated[
            Sequence[int],
            Option("indices of the focal seats into ``game.agents``; the same for every scenario"),
        ],
        backgrounds: Annotated[
            Sequence[Sequence[Any]],
            Option(
                "one entry per scenario: a sequence of ``game.num_agents`` policies with "
                "``None`` at the focal seats (jittable, optionally carried, as the arena takes "
                "them)"
            ),
        ],
        names: Annotated[
            Sequence[str] | None, Option("one name per scenario (reported with its results)")
        ] = None,
    ):
        self.game = game
        self.focal = tuple(int(i) for i in focal)
        self.backgrounds = tuple(tuple(seats) for seats in backgrounds)
        self.names = tuple(names) if names is not None else tuple(map(str, range(len(backgrounds))))
        _check_seating(game, self.focal, self.backgrounds, self.names)
        super().__init__(len(self.focal), [game.agents[i] for i in self.focal])
        self.max_steps = game.max_steps
        self.obs_from_state = False  # the observations live in the state (ScenarioState.obs)
        self.gathered_resets = game.gathered_resets

    @property
    def num_scenarios(self) -> int:
        return len(self.backgrounds)

    # ------------------------------------------------------------------ episodes
    def sample_config(self, key: jax.Array) -> ScenarioConfig:
        """A scenario of the set, uniformly."""
        return ScenarioConfig(jax.random.randint(key, (), 0, self.num_scenarios, jnp.int32))

    def scenario_configs(self) -> ScenarioConfig:
        """Every scenario once (leading axis S): the grid ``run_episodes`` evaluates."""
        return ScenarioConfig(jnp.arange(self.num_scenarios, dtype=jnp.int32))

    def config_grids(self) -> dict:
        return {"scenarios": self.scenario_configs}

    def reset_to(self, key: jax.Array, config: ScenarioConfig):
        key_config, key_reset = game_reset_keys(key)
        obs, game_state = self.game.reset_to(key_reset, self.game.sample_config(key_config))
        carries = tuple(tuple(initial_carries(list(seats))) for seats in self.backgrounds)
        state = ScenarioState(game_state, obs, carries, jnp.asarray(config.scenario, jnp.int32))
        return self._focal(obs), state

    def step_env(self, key: jax.Array, state: ScenarioState, actions):
        key_act, key_env = step_parts(key)
        played, acted = self._background_actions(key_act, state)
        played.update({agent: jnp.asarray(actions[agent], jnp.int32) for agent in self.agents})
        obs, game_state, rewards, dones, infos = self.game.step_env(key_env, state.game, played)
        carries = tuple(
            tuple(record_step(self.game, list(seats), list(c), played, rewards, infos, dones))
            for seats, c in zip(self.backgrounds, acted, strict=True)
        )
        infos = {**infos, "background_rewards": self._background_rewards(rewards)}
        focal_dones = {**self._focal(dones), "__all__": dones["__all__"]}
        state = ScenarioState(game_state, obs, carries, state.scenario)
        return self._focal(obs), state, self._focal(rewards), focal_dones, infos

    def _background_actions(self, key_act: jax.Array, state: ScenarioState):
        """(agent -> the action of the scenario played, each scenario's carries after acting)."""
        per_scenario, acted = [], []
        for seats, carries in zip(self.backgrounds, state.carries, strict=True):
            actions, new = act_carried(
                self.game, list(seats), key_act, state.obs, state.game, list(carries)
            )
            per_scenario.append(actions)
            acted.append(tuple(new))
        chosen = {
            agent: jnp.stack([a[agent] for a in per_scenario])[state.scenario]
            for agent in self.game.agents
        }
        return chosen, acted

    def _background_rewards(self, rewards) -> jax.Array:
        """float32[B]: the background seats' rewards of this step, in seat order."""
        seats = [a for i, a in enumerate(self.game.agents) if i not in self.focal]
        return jnp.stack([jnp.asarray(rewards[a], jnp.float32) for a in seats])

    def _focal(self, per_agent: dict) -> dict:
        return {agent: per_agent[agent] for agent in self.agents}

    # ------------------------------------------------------------------ views
    def get_obs(self, state: ScenarioState) -> dict:
        return self._focal(state.obs)

    def action_mask(self, state: ScenarioState) -> dict:
        return self._focal(self.game.action_mask(state.game))

    def observation_space(self, agent: str) -> Space:
        return self.game.observation_space(agent)

    def action_space(self, agent: str) -> Space:
        return self.game.action_space(agent)

    def episode_metrics(self, rollout: Rollout) -> dict[str, jax.Array]:
        """``return`` float32[F] per focal seat, ``per_capita`` (their mean), the
        background's per-seat return float32[B] and the length."""
        valid = rollout.valid
        focal = jnp.stack([jnp.sum(jnp.where(valid, rollout.rewards[a], 0.0)) for a in self.agents])
        background = jnp.sum(
            jnp.where(valid[:, None], rollout.infos["background_rewards"], 0.0), axis=0
        )
        return {
            "return": focal,
            "per_capita": jnp.mean(focal),
            "background_return": background,
            "length": jnp.sum(valid).astype(jnp.int32),
        }

    def __repr__(self) -> str:
        return f"ScenarioEnv({self.game!r}, focal={list(self.focal)}, scenarios={list(self.names)})"


def game_reset_keys(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(key of the game's configuration, key of its reset) of a scenario episode's reset key."""
    key_config, key_reset = jax.random.split(key)
    return key_config, key_reset


def _check_seating(game, focal: tuple, backgrounds: tuple, names: tuple) -> None:
    n = game.num_agents
    if not focal or len(set(focal)) != len(focal) or not all(0 <= i < n for i in focal):
        raise ValueError(f"focal seats {list(focal)} must be distinct indices into {n} agents")
    if len(focal) == n:
        raise ValueError("a scenario needs at least one background seat")
    if not backgrounds:
        raise ValueError("a scenario set needs at least one scenario")
    if len(names) != len(backgrounds):
        raise ValueError(f"{len(names)} names for {len(backgrounds)} scenarios")
    for name, seats in zip(names, backgrounds, strict=True):
        if len(seats) != n:
            raise ValueError(f"scenario {name!r}: {len(seats)} seats for {n} agents")
        for i, policy in enumerate(seats):
            if (i in focal) != (policy is None):
                what = (
                    "a focal seat must be None"
                    if i in focal
                    else "a background seat needs a policy"
                )
                raise ValueError(f"scenario {name!r}, seat {i}: {what}")
