"""PettingZoo ``ParallelEnv`` and ``AECEnv`` views of every registered dilemmax env.

What a PettingZoo user gets:
- observations: numpy arrays of the dtype and shape of ``observation_space(agent)``;
- rewards: Python floats; terminations / truncations: Python bools (an episode that ends at the
  game's fixed horizon is a termination: the horizon is part of the game, not a time limit);
- legal actions: ``infos[agent]["action_mask"]``, an ``np.int8`` array of length
  ``action_space(agent).n`` (the form ``gymnasium.spaces.Discrete.sample(mask=...)`` takes),
  also from ``env.action_mask(agent)``. ``action_space(agent).sample()`` with no mask draws from
  the agent's currently legal actions, so random-play loops never send an illegal move;
- agents are removed from ``env.agents`` when they are done (an eliminated player, say);
- ``render()``: ``"ansi"`` returns the text view, ``"rgb_array"`` an ``uint8[H, W, 3]`` frame
  (grid games).

An illegal or out-of-range action raises ``ValueError`` naming the agent, the action and the legal
set; nothing is stepped, so the episode is left as it was.

The JAX functions are compiled once per (env id, options) and shared by all wrapper instances.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium
import jax
import numpy as np
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils.conversions import parallel_to_aec_wrapper

from dilemmax.envs.registry import make
from dilemmax.wrappers.legal import LegalDiscrete, check_action

_MAX_SEED = 2**31 - 1


@functools.cache
def _compiled(env_id: str, options: tuple) -> tuple:
    """(env, jitted reset, jitted step_env, jitted action_mask) for one env configuration."""
    env = make(env_id, **dict(options))
    return env, jax.jit(env.reset), jax.jit(env.step_env), jax.jit(env.action_mask)


class DilemmaxParallelEnv(ParallelEnv):
    """A registered dilemmax env as a PettingZoo ``ParallelEnv`` (see the module docstring)."""

    def __init__(self, env_id: str, render_mode: str | None = None, **options):
        self.env, self._reset, self._step, self._mask = _compiled(
            env_id, tuple(sorted(options.items()))
        )
        if render_mode is not None and render_mode not in self.env.render_modes:
            raise ValueError(
                f"render_mode {render_mode!r} is not one of {self.env.render_modes} for {env_id}"
            )
        self.render_mode = render_mode
        self.metadata = {
            "name": f"dilemmax/{env_id}",
            "render_modes": list(self.env.render_modes),
            "is_parallelizable": True,
        }
        self.possible_agents = list(self.env.agents)
        self.agents: list[str] = []
        self._observation_spaces = {
            a: self.env.observation_space(a).to_gymnasium() for a in self.possible_agents
        }
        self._action_spaces = {
            a: LegalDiscrete(self.env.action_space(a).n, functools.partial(self._int8_mask, a))
            for a in self.possible_agents
        }
        self._state = None
        self._masks: dict[str, np.ndarray] = {}
        self._key = jax.random.key(0)
        self._seeds = np.random.default_rng()

    # -- spaces -------------------------------------------------------------------------------
    def observation_space(self, agent: str) -> gymnasium.Space:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> gymnasium.spaces.Discrete:
        return self._action_spaces[agent]

    def action_mask(self, agent: str) -> np.ndarray:
        """np.int8[n]: 1 where the action is legal for ``agent`` now."""
        return self._int8_mask(agent)

    def _int8_mask(self, agent: str) -> np.ndarray | None:
        mask = self._masks.get(agent)
        return None if mask is None else mask.astype(np.int8)

    # -- episode ------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None):
        # As in Gymnasium: a seed restarts the stream of episodes; no seed continues it.
        if seed is not None:
            self._seeds = np.random.default_rng(seed)
        episode_seed = int(self._seeds.integers(_MAX_SEED))
        self._key, key_reset = jax.random.split(jax.random.key(episode_seed))
        obs, self._state = self._reset(key_reset)
        self.agents = list(self.possible_agents)
        self._refresh_masks()
        return self._numpy_obs(obs), self._infos()

    def step(self, actions: dict[str, Any]):
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        unknown = sorted(set(actions) - set(self.agents))
        if unknown:
            raise ValueError(f"actions for agent(s) {unknown} who are not playing: {self.agents}")
        checked = {a: check_action(a, actions[a], self._masks[a]) for a in actions}
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ValueError(f"no action for agent(s) {missing}; every agent in env.agents acts")
        # Agents already removed still occupy a seat in the JAX game: they play their first legal
        # action (for an eliminated player, the only one).
        full = {a: checked.get(a, int(np.argmax(self._masks[a]))) for a in self.possible_agents}
        self._key, key_step = jax.random.split(self._key)
        jax_actions = {a: np.int32(v) for a, v in full.items()}
        obs, self._state, rewards, dones, _ = self._step(key_step, self._state, jax_actions)

        acting = list(self.agents)
        obs = self._numpy_obs(obs)
        rewards = {a: float(rewards[a]) for a in acting}
        terminations = {a: bool(dones[a]) or bool(dones["__all__"]) for a in acting}
        truncations = dict.fromkeys(acting, False)
        self._refresh_masks()
        infos = self._infos()
        self.agents = [a for a in acting if not terminations[a]]
        return {a: obs[a] for a in acting}, rewards, terminations, truncations, infos

    def _refresh_masks(self) -> None:
        masks = self._mask(self._state)
        self._masks = {a: np.asarray(masks[a], dtype=bool) for a in self.possible_agents}

    def _infos(self) -> dict[str, dict]:
        return {a: {"action_mask": self._masks[a].astype(np.int8)} for a in self.agents}

    def _numpy_obs(self, obs) -> dict[str, np.ndarray]:
        return {
            a: np.asarray(obs[a], dtype=self._observation_spaces[a].dtype)
            for a in self.possible_agents
        }

    # -- extras -------------------------------------------------------------------------------
    def state(self) -> np.ndarray:
        """The global state the env gives a centralised critic (float32, flat)."""
        return np.asarray(self.env.global_state(self._state), dtype=np.float32)

    @property
    def jax_state(self):
        """The underlying JAX env state (read it, do not mutate it)."""
        return self._state

    def render(self):
        if self.render_mode is None:
            gymnasium.logger.warn("render() called without a render_mode; nothing rendered")
            return None
        if self._state is None:
            raise RuntimeError("call reset() before render()")
        frame = self.env.render(self._state, self.render_mode)
        return frame if self.render_mode == "ansi" else np.asarray(frame, dtype=np.uint8)

    def close(self) -> None:
        pass


class DilemmaxAECEnv(parallel_to_aec_wrapper):
    """The AEC view: agents act in turn on the same simultaneous-move game.

    PettingZoo's own ``parallel_to_aec`` conversion does the turn-taking; this subclass checks each
    action when it is given (not only when the last agent of the cycle moves), so a bad action
    raises at once and leaves the cycle as it was.
    """

    def step(self, action):
        agent = self.agent_selection
        if not (self.terminations.get(agent) or self.truncations.get(agent)):
            action = check_action(agent, action, self.env._masks[agent])
        super().step(action)


def parallel_env(env_id: str, render_mode: str | None = None, **options) -> ParallelEnv:
    """The registered env ``env_id`` (with its static ``options``) as a PettingZoo ParallelEnv."""
    return DilemmaxParallelEnv(env_id, render_mode=render_mode, **options)


def aec_env(env_id: str, render_mode: str | None = None, **options) -> AECEnv:
    """The registered env ``env_id`` as a PettingZoo AECEnv."""
    return DilemmaxAECEnv(parallel_env(env_id, render_mode=render_mode, **options))
