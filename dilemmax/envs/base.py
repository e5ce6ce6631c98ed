"""The environment contract shared by every dilemmax game.

The API is JaxMARL's (``reset``/``step`` with dicts keyed by agent name, ``dones["__all__"]``,
per-agent spaces), extended with what the papers' sweeps need: a configuration pytree carried in
the state (``sample_config`` / ``reset_to``), legal-action masks, and per-episode metrics computed
in JAX from a rollout.

Shapes below use ``A`` for the number of agents and ``T`` for the number of time steps.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from dilemmax.envs.rare import rare_cond
from dilemmax.envs.spaces import Space

PyTree = Any
AgentDict = dict[str, jax.Array]


@struct.dataclass
class Rollout:
    """One episode, stacked over time, as the metrics read it.

    Every leaf has a leading time axis of length ``T`` (``env.max_steps`` in the JAX fast path, the
    played length in the Python arena).

    Attributes:
        actions: agent -> int32[T], the actions passed to ``step_env``.
        rewards: agent -> float32[T].
        dones: agent -> bool[T], plus ``"__all__"``.
        infos: the env's ``infos`` dict, each leaf with a leading ``T`` axis.
        valid: bool[T], True for the steps that were played (up to and including the terminal
            one); steps after the end are padding and must be ignored.
        final_state: the env state right after the terminal step (no auto-reset), unbatched.
    """

    actions: AgentDict
    rewards: AgentDict
    dones: AgentDict
    infos: dict[str, Any]
    valid: jax.Array
    final_state: PyTree


class MultiAgentEnv(abc.ABC):
    """Base class of every environment.

    Subclasses implement ``sample_config``, ``reset_to``, ``step_env``, ``get_obs``,
    ``action_mask``, ``observation_space`` and ``action_space``; everything else has a default.

    Static options (number of agents, map size, reward mode) are constructor keyword arguments
    and may change shapes; everything a paper sweeps lives in the configuration pytree, so a grid
    of configurations runs as one ``jax.vmap``.

    Class attributes:
        max_steps: an upper bound on the number of ``step_env`` calls in one episode; the JAX fast
            path scans this many steps.
        render_modes: the modes ``render`` accepts.
    """

    max_steps: int = 1
    render_modes: tuple[str, ...] = ("ansi",)

    def __init__(self, num_agents: int, agents: list[str] | None = None):
        self.num_agents = int(num_agents)
        self.agents = (
            list(agents) if agents is not None else [f"agent_{i}" for i in range(num_agents)]
        )
        if len(self.agents) != self.num_agents:
            raise ValueError(f"got {len(self.agents)} agent names for {self.num_agents} agents")
        self.agent_index = {name: i for i, name in enumerate(self.agents)}

    # ------------------------------------------------------------------ to implement
    @abc.abstractmethod
    def sample_config(self, key: jax.Array) -> PyTree:
        """Draws the latent configuration (context, rule, layout, payoff weights) of an episode."""

    @abc.abstractmethod
    def reset_to(self, key: jax.Array, config: PyTree) -> tuple[AgentDict, PyTree]:
        """Starts an episode on ``config``; returns ``(obs, state)``."""

    @abc.abstractmethod
    def step_env(
        self, key: jax.Array, state: PyTree, actions: Mapping[str, jax.Array]
    ) -> tuple[AgentDict, PyTree, AgentDict, AgentDict, dict]:
        """One transition without auto-reset: ``(obs, state, rewards, dones, infos)``."""

    @abc.abstractmethod
    def get_obs(self, state: PyTree) -> AgentDict:
        """Each agent's observation of ``state``."""

    @abc.abstractmethod
    def action_mask(self, state: PyTree) -> AgentDict:
        """agent -> bool[num_actions]: the actions that are legal in ``state``."""

    @abc.abstractmethod
    def observation_space(self, agent: str) -> Space: ...

    @abc.abstractmethod
    def action_space(self, agent: str) -> Space: ...

    # ------------------------------------------------------------------ provided
    def reset(self, key: jax.Array) -> tuple[AgentDict, PyTree]:
        """Samples a configuration and starts an episode on it."""
        key_config, key_reset = jax.random.split(key)
        return self.reset_to(key_reset, self.sample_config(key_config))

    def step(
        self,
        key: jax.Array,
        state: PyTree,
        actions: Mapping[str, jax.Array],
        reset_state: tuple[AgentDict, PyTree] | None = None,
    ) -> tuple[AgentDict, PyTree, AgentDict, AgentDict, dict]:
        """``step_env`` followed by a reset when ``dones["__all__"]``.

        The reset sits behind :func:`dilemmax.envs.rare.rare_cond`, so an unbatched step pays for
        it only at the end of an episode, and ``jax.vmap(env.step)`` only on the steps where some
        env of the batch ends one (a plain ``lax.cond`` would become a select there and reset
        every env on every step). ``reset_state`` (JaxMARL's option) supplies a precomputed
        ``(obs, state)`` to restart from instead.

        The returned rewards, dones and infos are those of the terminal transition; the returned
        observation and state are the first of the next episode.
        """
        key_step, key_reset = jax.random.split(key)
        obs, state, rewards, dones, infos = self.step_env(key_step, state, actions)

        if reset_state is not None:
            obs, state = jax.tree.map(
                lambda r, s: jnp.where(dones["__all__"], r, s), reset_state, (obs, state)
            )
        else:
            # A branch, not a select, even under vmap: see dilemmax.envs.rare.
            obs, state = rare_cond(
                dones["__all__"],
                lambda k, o, s: self.reset(k),
                lambda k, o, s: (o, s),
                key_reset,
                obs,
                state,
            )
        return obs, state, rewards, dones, infos

    def global_state(self, state: PyTree) -> jax.Array:
        """float32[D]: the centralised critic's input (MAPPO). Default: all observations, flat."""
        obs = self.get_obs(state)
        return jnp.concatenate([obs[a].reshape(-1).astype(jnp.float32) for a in self.agents])

    def episode_metrics(self, rollout: Rollout) -> dict[str, jax.Array]:
        """Per-episode metrics computed from a rollout. Default: per-agent return and length."""
        returns = jnp.stack(
            [jnp.sum(jnp.where(rollout.valid, rollout.rewards[a], 0.0)) for a in self.agents]
        )
        return {"return": returns, "length": jnp.sum(rollout.valid).astype(jnp.int32)}

    def scripted_policies(self) -> dict[str, Any]:
        """name -> jittable scripted policy (see :mod:`dilemmax.agents.policy`) for this env."""
        return {}

    def text_protocol(self, **options) -> Any:
        """The game's text renderer and reply parser (:class:`dilemmax.envs.text.TextProtocol`)."""
        raise NotImplementedError(f"{type(self).__name__} has no text protocol")

    def render(self, state: PyTree, mode: str = "ansi"):
        """``"ansi"`` -> str; ``"rgb_array"`` -> uint8[H, W, 3] where the env supports it."""
        if mode not in self.render_modes:
            raise ValueError(f"render mode {mode!r} is not one of {self.render_modes}")
        if mode == "ansi":
            return self.render_ansi(state)
        return self.render_rgb(state)

    def render_ansi(self, state: PyTree) -> str:
        return repr(state)

    def render_rgb(self, state: PyTree):
        raise NotImplementedError(f"{type(self).__name__} has no rgb_array rendering")

    @property
    def name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        return f"{self.name}(num_agents={self.num_agents})"
