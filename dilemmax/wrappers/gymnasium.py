"""A single seat of a dilemmax game as a Gymnasium env; the other seats play given policies.

For single-agent RL code (Stable-Baselines3 and the like): the learner controls ``agent``, every
other seat is filled by a jittable policy (scripted or trained) following the policy protocol.
The legal-action mask is in ``info["action_mask"]`` (``np.int8``) and from ``action_masks()``
(the method name sb3-contrib's MaskablePPO calls).
"""

from __future__ import annotations

import functools

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.envs.registry import make
from dilemmax.envs.rollout import act, seat_policies
from dilemmax.wrappers.legal import LegalDiscrete, check_action

_MAX_SEED = 2**31 - 1


class SingleSeatEnv(gymnasium.Env):
    """Seat ``agent`` of ``env_id`` as a Gymnasium env.

    Args:
        env_id: a registered env id.
        agent: the seat the learner plays (default: the first agent).
        others: a policy for every other seat (one for all, or a dict by agent name).
        render_mode: ``"ansi"`` or ``"rgb_array"`` where the game supports it.
        **options: the env's static options.

    An illegal action raises ``ValueError`` naming the agent, the action and the legal set.
    """

    def __init__(self, env_id: str, others, agent: str | None = None, render_mode=None, **options):
        self.env = make(env_id, **options)
        self.agent = agent or self.env.agents[0]
        if self.agent not in self.env.agents:
            raise ValueError(f"unknown agent {self.agent!r}; agents: {self.env.agents}")
        self.render_mode = render_mode
        self.metadata = {"render_modes": list(self.env.render_modes)}
        self.observation_space = self.env.observation_space(self.agent).to_gymnasium()
        self.action_space = LegalDiscrete(self.env.action_space(self.agent).n, self._legal_mask)
        if isinstance(others, dict):
            others = {**others, self.agent: others.get(self.agent, _placeholder)}
        seats = seat_policies(self.env, others)
        self._index = self.env.agents.index(self.agent)
        self._reset = jax.jit(self.env.reset)
        self._step = jax.jit(functools.partial(self._step_with_others, seats))
        self._mask = jax.jit(self.env.action_mask)
        self._state = None
        self._seeds = np.random.default_rng()

    def _step_with_others(self, seats, key, state, obs, action):
        key_act, key_step = jax.random.split(key)
        actions = act(self.env, seats, key_act, obs, state)
        actions[self.agent] = jnp.asarray(action, jnp.int32)
        return self.env.step_env(key_step, state, actions)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self._seeds = np.random.default_rng(seed)
        self._key, key_reset = jax.random.split(jax.random.key(self._seeds.integers(_MAX_SEED)))
        self._obs, self._state = self._reset(key_reset)
        return self._observation(), self._info()

    def step(self, action):
        action = check_action(self.agent, action, self.action_masks().astype(bool))
        self._key, key = jax.random.split(self._key)
        self._obs, self._state, rewards, dones, _ = self._step(
            key, self._state, self._obs, np.int32(action)
        )
        terminated = bool(dones[self.agent]) or bool(dones["__all__"])
        return self._observation(), float(rewards[self.agent]), terminated, False, self._info()

    def _legal_mask(self) -> np.ndarray | None:
        return None if self._state is None else self.action_masks()

    def action_masks(self) -> np.ndarray:
        return np.asarray(self._mask(self._state)[self.agent], dtype=np.int8)

    def _observation(self) -> np.ndarray:
        return np.asarray(self._obs[self.agent], dtype=self.observation_space.dtype)

    def _info(self) -> dict:
        return {"action_mask": self.action_masks()}

    def render(self):
        if self.render_mode is None:
            return None
        frame = self.env.render(self._state, self.render_mode)
        return frame if self.render_mode == "ansi" else np.asarray(frame, dtype=np.uint8)


def _placeholder(key, observation):
    """Stands in the learner's seat; its action is always replaced by the learner's."""
    del key
    return jnp.argmax(observation.mask).astype(jnp.int32)
