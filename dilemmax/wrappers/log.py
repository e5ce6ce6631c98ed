"""Episode (and trial) returns and lengths, with JaxMARL's info keys.

JaxMARL's training loops read ``infos["returned_episode_returns"]``,
``infos["returned_episode_lengths"]`` and ``infos["returned_episode"]`` (each float32/int32/bool
of shape [num_agents] per env) to log returns; :class:`LogWrapper` provides exactly those, so
their loops run on dilemmax envs unchanged. For envs made of repeated trials (the OpenSocialJax
games) it adds the same three keys per trial (``returned_trial_*``), driven by
``infos["trial_done"]``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from dilemmax.envs.base import MultiAgentEnv, PyTree, agent_infos


@struct.dataclass
class LogState:
    """The wrapped env's state plus running and last completed totals.

    Attributes:
        env_state: the wrapped env's state.
        episode_returns: float32[A], return so far in the current episode.
        episode_lengths: int32[], steps so far in the current episode.
        returned_episode_returns: float32[A], return of the last finished episode.
        returned_episode_lengths: int32[], length of the last finished episode.
        trial_returns, trial_lengths, returned_trial_returns, returned_trial_lengths: the same
            per trial (they equal the episode ones for envs without trials).
    """

    env_state: PyTree
    episode_returns: jax.Array
    episode_lengths: jax.Array
    returned_episode_returns: jax.Array
    returned_episode_lengths: jax.Array
    trial_returns: jax.Array
    trial_lengths: jax.Array
    returned_trial_returns: jax.Array
    returned_trial_lengths: jax.Array


class LogWrapper:
    """Adds per-agent episode and trial statistics to ``infos``.

    Every other attribute (spaces, agents, action_mask, metrics, ...) is forwarded to the
    wrapped env; methods that take a state receive the unwrapped ``env_state``, so call them as
    ``wrapper.action_mask(log_state.env_state)``.

    Args:
        env: the env to wrap.
        replace_info: drop the env's own infos and keep only the logging keys (JaxMARL option).
    """

    def __init__(self, env: MultiAgentEnv, replace_info: bool = False):
        self._env = env
        self.replace_info = replace_info

    def __getattr__(self, name):
        return getattr(self._env, name)

    @property
    def unwrapped(self) -> MultiAgentEnv:
        return getattr(self._env, "unwrapped", self._env)

    def _stack(self, rewards) -> jax.Array:
        return jnp.stack([rewards[a] for a in self._env.agents]).astype(jnp.float32)

    def _wrap(self, env_state) -> LogState:
        zeros = jnp.zeros((self._env.num_agents,), jnp.float32)
        zero = jnp.int32(0)
        return LogState(env_state, zeros, zero, zeros, zero, zeros, zero, zeros, zero)

    def reset(self, key: jax.Array):
        obs, env_state = self._env.reset(key)
        return obs, self._wrap(env_state)

    def reset_to(self, key: jax.Array, config):
        obs, env_state = self._env.reset_to(key, config)
        return obs, self._wrap(env_state)

    def step(self, key: jax.Array, state: LogState, actions, reset_state=None, *, full_infos=False):
        """The wrapped env's step plus the logging keys (each ``[num_agents]``).

        The env's own infos come in the per-agent layout (JaxMARL's) unless ``full_infos``.
        """
        obs, env_state, rewards, dones, infos = self._env.step(
            key, state.env_state, actions, reset_state, full_infos=True
        )
        episode_done = dones["__all__"]
        trial_done = jnp.asarray(infos.get("trial_done", episode_done)) | episode_done
        step_returns = self._stack(rewards)

        def roll(running, lengths, returned, returned_lengths, done):
            running = running + step_returns
            lengths = lengths + 1
            returned = jnp.where(done, running, returned)
            returned_lengths = jnp.where(done, lengths, returned_lengths)
            return running * (1 - done), lengths * (1 - done), returned, returned_lengths

        ep = roll(
            state.episode_returns,
            state.episode_lengths,
            state.returned_episode_returns,
            state.returned_episode_lengths,
            episode_done,
        )
        tr = roll(
            state.trial_returns,
            state.trial_lengths,
            state.returned_trial_returns,
            state.returned_trial_lengths,
            trial_done,
        )
        state = LogState(env_state, *ep, *tr)

        if self.replace_info:
            infos = {}
        elif not full_infos:
            infos = agent_infos(infos, self._env.num_agents)
        else:
            infos = dict(infos)
        num_agents = self._env.num_agents
        infos["returned_episode_returns"] = state.returned_episode_returns
        infos["returned_episode_lengths"] = jnp.full((num_agents,), state.returned_episode_lengths)
        infos["returned_episode"] = jnp.full((num_agents,), episode_done)
        infos["returned_trial_returns"] = state.returned_trial_returns
        infos["returned_trial_lengths"] = jnp.full((num_agents,), state.returned_trial_lengths)
        infos["returned_trial"] = jnp.full((num_agents,), trial_done)
        return obs, state, rewards, dones, infos
