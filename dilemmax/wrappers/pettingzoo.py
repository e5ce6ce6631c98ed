"""PettingZoo ``ParallelEnv`` and ``AECEnv`` views of every registered dilemmax env.

What a PettingZoo user gets:
- observations: numpy arrays of the dtype and shape of ``observation_space(agent)``; with
  ``mask_in_obs=True`` a dict ``{"observation": array, "action_mask": np.int8[n]}`` instead (the
  form Tianshou and PettingZoo's classic games use);
- rewards: Python floats; terminations / truncations: Python bools (an episode that ends at the
  game's fixed horizon is a termination: the horizon is part of the game, not a time limit;
  ``max_cycles`` adds a time limit, reported as truncation);
- legal actions: ``infos[agent]["action_mask"]``, an ``np.int8`` array of length
  ``action_space(agent).n`` (the form ``gymnasium.spaces.Discrete.sample(mask=...)`` takes),
  also from ``env.action_mask(agent)``. ``action_space(agent).sample()`` with no mask draws from
  the agent's currently legal actions, so random-play loops never send an illegal move;
- agents are removed from ``env.agents`` when they are done (an eliminated player, say);
- ``state()`` / ``state_space``: the centralised critic's input (``env.global_state``);
- ``render()``: ``"ansi"`` returns the text view, ``"human"`` prints it, ``"rgb_array"`` returns
  an ``uint8[H, W, 3]`` frame (grid games).

Illegal actions (masked, out of range, not an integer: a float, NaN, inf, a string) follow
``illegal_action``:
- ``"raise"`` (default): ``ValueError`` naming the agent, the action and the legal set; nothing
  is stepped, so the episode is left as it was and play can go on;
- ``"noop"``: the move is handed to the JAX env, which plays its documented no-op for it (an
  invalid reply in the papers' terms) and flags it in its infos; ``infos[agent]["illegal_action"]``
  says so too;
- ``"terminate"``: as PettingZoo's classic games do, the episode ends for everyone (terminated)
  and the offender receives ``illegal_reward``, the others 0; nothing is stepped.

Calls that are wrong whatever the mode (stepping before ``reset()`` or after the episode ended,
an action for an agent who is not playing, a missing action) raise ``ValueError`` and change
nothing.

The JAX functions are compiled once per (env id, options) and shared by all wrapper instances.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium
import jax
import numpy as np
from pettingzoo import AECEnv, ParallelEnv
from pettingzoo.utils.agent_selector import AgentSelector

from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.option_spec import INT32_MAX
from dilemmax.envs.registry import make
from dilemmax.wrappers.legal import (
    LegalDiscrete,
    check_action,
    check_count,
    check_mode,
    check_reward,
    is_legal,
    jax_action,
    parse_action,
)


@functools.cache
def _compiled(env_id: str, options: tuple) -> tuple:
    """(env, jitted reset, jitted step, jitted action_mask, jitted global_state).

    Reset and step also return the next action masks, so one Python step is one compiled call;
    the wrapper then copies the whole output to host memory at once.
    """
    env = make(env_id, **dict(options))

    def reset(key):
        obs, state = env.reset(key)
        return obs, state, env.action_mask(state)

    def step(key, state, actions):
        obs, state, rewards, dones, _ = env.step_env(key, state, actions)
        return obs, state, rewards, dones, env.action_mask(state)

    return env, jax.jit(reset), jax.jit(step), jax.jit(env.action_mask), jax.jit(env.global_state)


def state_space_of(env: MultiAgentEnv, state) -> gymnasium.spaces.Box:
    """A Box holding ``env.global_state``: the observation bounds when the env keeps the default
    (all observations, flat), unbounded float32 when it defines its own."""
    shape = jax.eval_shape(env.global_state, state).shape
    if type(env).global_state is MultiAgentEnv.global_state:
        spaces = [env.observation_space(a) for a in env.agents]
        low = np.concatenate([np.full(int(np.prod(s.shape)), s.low, np.float32) for s in spaces])
        high = np.concatenate([np.full(int(np.prod(s.shape)), s.high, np.float32) for s in spaces])
        return gymnasium.spaces.Box(low=low, high=high, shape=shape, dtype=np.float32)
    return gymnasium.spaces.Box(low=-np.inf, high=np.inf, shape=shape, dtype=np.float32)


class DilemmaxParallelEnv(ParallelEnv):
    """A registered dilemmax env as a PettingZoo ``ParallelEnv`` (see the module docstring).

    Args:
        env_id: a registered env id.
        render_mode: None, ``"human"``, or one of the game's render modes.
        illegal_action: ``"raise"``, ``"noop"`` or ``"terminate"`` (see the module docstring).
        illegal_reward: the offender's reward under ``"terminate"``.
        mask_in_obs: observations as ``{"observation", "action_mask"}`` dicts.
        max_cycles: truncate the episode after this many steps (None: the game's own end only).
        keep_done_agents: keep agents who are done (an eliminated player) in ``env.agents``
            until the episode ends, as vectorising code that needs a fixed set of agents
            (SuperSuit's ``pettingzoo_env_to_vec_env_v1``, hence Stable-Baselines3) wants: they
            go on acting in their seat, where the JAX game ignores their moves (an eliminated
            player has one legal action), and receive the game's rewards (0 once eliminated);
            terminations and truncations are then those of the whole episode.
        **options: the env's static options.
    """

    def __init__(
        self,
        env_id: str,
        render_mode: str | None = None,
        *,
        illegal_action: str = "raise",
        illegal_reward: float = -1.0,
        mask_in_obs: bool = False,
        max_cycles: int | None = None,
        keep_done_agents: bool = False,
        **options,
    ):
        self.env, self._reset, self._step, self._mask, self._global_state = _compiled(
            env_id, tuple(sorted(options.items()))
        )
        render_modes = [*self.env.render_modes, "human"]
        if render_mode is not None and render_mode not in render_modes:
            raise ValueError(f"render_mode {render_mode!r} is not one of {render_modes}")
        self.render_mode = render_mode
        self.illegal_action = check_mode(illegal_action)
        self.illegal_reward = check_reward("illegal_reward", illegal_reward)
        self.mask_in_obs = bool(mask_in_obs)
        self.max_cycles = check_count("max_cycles", max_cycles, allow_none=True)
        self.keep_done_agents = bool(keep_done_agents)
        self.metadata = {
            "name": f"dilemmax/{env_id}",
            "render_modes": render_modes,
            "is_parallelizable": True,
        }
        self.possible_agents = list(self.env.agents)
        self.agents: list[str] = []
        self._observation_spaces = {
            a: self._wrap_space(self.env.observation_space(a).to_gymnasium(), a)
            for a in self.possible_agents
        }
        self._action_spaces = {
            a: LegalDiscrete(self.env.action_space(a).n, functools.partial(self._int8_mask, a))
            for a in self.possible_agents
        }
        self.state_space = state_space_of(self.env, jax.eval_shape(self._reset, _key(0))[1])
        self._state = None
        self._over = False
        self._cycles = 0
        self._masks: dict[str, np.ndarray] = {}
        self._key = jax.random.key(0)
        self._seeds = np.random.default_rng()

    def _wrap_space(self, space: gymnasium.Space, agent: str) -> gymnasium.Space:
        if not self.mask_in_obs:
            return space
        n = self.env.action_space(agent).n
        mask = gymnasium.spaces.Box(low=0, high=1, shape=(n,), dtype=np.int8)
        return gymnasium.spaces.Dict({"observation": space, "action_mask": mask})

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
        episode_seed = int(self._seeds.integers(INT32_MAX))
        self._key, key_reset = jax.random.split(jax.random.key(episode_seed))
        obs, self._state, masks = self._reset(key_reset)
        obs, masks = jax.device_get((obs, masks))
        self.agents = list(self.possible_agents)
        self._over = False
        self._cycles = 0
        self._set_masks(masks)
        self._last_obs = self._numpy_obs(obs)
        return self._observations(self.agents), self._infos(self.agents)

    def step(self, actions: dict[str, Any]):
        self._check_call(actions)
        parsed = {a: parse_action(actions[a]) for a in actions}
        illegal = [a for a in actions if not is_legal(parsed[a], self._masks[a])]
        if illegal and self.illegal_action == "raise":
            check_action(illegal[0], actions[illegal[0]], self._masks[illegal[0]])
        if illegal and self.illegal_action == "terminate":
            return self._terminate(illegal)

        # Agents already removed still occupy a seat in the JAX game: they play their first legal
        # action (for an eliminated player, the only one).
        full = {
            a: jax_action(parsed[a], self._masks[a].shape[0])
            if a in parsed
            else np.int32(np.argmax(self._masks[a]))
            for a in self.possible_agents
        }
        self._key, key_step = jax.random.split(self._key)
        obs, self._state, rewards, dones, masks = self._step(key_step, self._state, full)
        obs, rewards, dones, masks = jax.device_get((obs, rewards, dones, masks))
        self._cycles += 1

        acting = list(self.agents)
        self._last_obs = self._numpy_obs(obs)
        rewards = {a: float(rewards[a]) for a in acting}
        if self.keep_done_agents:
            terminations = dict.fromkeys(acting, bool(dones["__all__"]))
        else:
            terminations = {a: bool(dones[a]) or bool(dones["__all__"]) for a in acting}
        time_up = self.max_cycles is not None and self._cycles >= self.max_cycles
        truncations = {a: time_up and not terminations[a] for a in acting}
        self._set_masks(masks)
        infos = self._infos(acting)
        for a in illegal:
            infos[a]["illegal_action"] = True
        self.agents = [a for a in acting if not (terminations[a] or truncations[a])]
        self._over = not self.agents
        return self._observations(acting), rewards, terminations, truncations, infos

    def _check_call(self, actions) -> None:
        """ValueError for a call that is wrong whatever ``illegal_action`` says."""
        if self._state is None:
            raise ValueError("call reset() before step()")
        if self._over:
            raise ValueError("the episode is over (every agent is done); call reset()")
        if not isinstance(actions, dict):
            raise ValueError(f"actions must be a dict agent -> action, got {type(actions)}")
        unknown = sorted(str(a) for a in actions if a not in self.agents)
        if unknown:
            raise ValueError(f"actions for agent(s) {unknown} who are not playing: {self.agents}")
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ValueError(f"no action for agent(s) {missing}; every agent in env.agents acts")

    def _terminate(self, offenders: list[str]):
        """``illegal_action="terminate"``: the episode ends; offenders get the penalty."""
        acting = list(self.agents)
        rewards = {a: self.illegal_reward if a in offenders else 0.0 for a in acting}
        terminations = dict.fromkeys(acting, True)
        truncations = dict.fromkeys(acting, False)
        infos = self._infos(acting)
        for a in offenders:
            infos[a]["illegal_action"] = True
        self.agents = []
        self._over = True
        return self._observations(acting), rewards, terminations, truncations, infos

    def _set_masks(self, masks) -> None:
        self._masks = {a: np.asarray(masks[a], dtype=bool) for a in self.possible_agents}

    def _infos(self, agents) -> dict[str, dict]:
        return {a: {"action_mask": self._masks[a].astype(np.int8)} for a in agents}

    def _numpy_obs(self, obs) -> dict[str, np.ndarray]:
        spaces = self._observation_spaces
        if self.mask_in_obs:
            spaces = {a: space["observation"] for a, space in spaces.items()}
        return {a: np.asarray(obs[a], dtype=spaces[a].dtype) for a in self.possible_agents}

    def _observations(self, agents) -> dict[str, Any]:
        if not self.mask_in_obs:
            return {a: self._last_obs[a] for a in agents}
        return {
            a: {"observation": self._last_obs[a], "action_mask": self._masks[a].astype(np.int8)}
            for a in agents
        }

    # -- extras -------------------------------------------------------------------------------
    def state(self) -> np.ndarray:
        """The global state the env gives a centralised critic (float32, flat)."""
        if self._state is None:
            raise ValueError("call reset() before state()")
        return np.asarray(self._global_state(self._state), dtype=np.float32)

    @property
    def jax_state(self):
        """The underlying JAX env state (read it, do not mutate it)."""
        return self._state

    def render(self):
        if self.render_mode is None:
            gymnasium.logger.warn("render() called without a render_mode; nothing rendered")
            return None
        if self._state is None:
            raise ValueError("call reset() before render()")
        if self.render_mode == "human":
            print(self.env.render(self._state, "ansi"))
            return None
        frame = self.env.render(self._state, self.render_mode)
        return frame if self.render_mode == "ansi" else np.asarray(frame, dtype=np.uint8)

    def close(self) -> None:
        pass


class DilemmaxAECEnv(AECEnv):
    """The AEC view: agents act in turn on the same simultaneous-move game.

    Each agent's action is checked when it is given (not only when the last agent of the cycle
    moves), so a bad call raises ``ValueError`` at once and leaves the cycle as it was; when the
    last live agent of a cycle has acted, the joint action is stepped through the parallel env.
    ``illegal_action="terminate"`` ends the episode at the offending move. The env keeps the
    attributes PettingZoo's AEC wrappers edit (``rewards``, ``_cumulative_rewards``,
    ``terminations``, ...), so ``TerminateIllegalWrapper`` and ``OrderEnforcingWrapper`` work.
    """

    def __init__(self, parallel: DilemmaxParallelEnv):
        super().__init__()
        self.parallel = parallel
        self.metadata = {**parallel.metadata, "is_parallelizable": True}
        self.render_mode = parallel.render_mode
        self.possible_agents = list(parallel.possible_agents)
        self.state_space = parallel.state_space
        self.agents = []

    def observation_space(self, agent: str) -> gymnasium.Space:
        return self.parallel.observation_space(agent)

    def action_space(self, agent: str) -> gymnasium.spaces.Discrete:
        return self.parallel.action_space(agent)

    def action_mask(self, agent: str) -> np.ndarray:
        return self.parallel.action_mask(agent)

    @property
    def jax_state(self):
        return self.parallel.jax_state

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self._observations, self.infos = self.parallel.reset(seed=seed, options=options)
        self.agents = list(self.parallel.agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self._pending: dict[str, Any] = {}
        self._selector = AgentSelector(self.agents)
        self.agent_selection = self._selector.reset()

    def observe(self, agent: str):
        return self._observations[agent]

    def state(self) -> np.ndarray:
        return self.parallel.state()

    def step(self, action) -> None:
        if self.parallel.jax_state is None:
            raise ValueError("call reset() before step()")
        if not self.agents:
            raise ValueError("the episode is over (every agent is done); call reset()")
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            if action is not None:
                raise ValueError(f"agent {agent!r} is done: step(None) removes it, got {action!r}")
            self._was_dead_step(None)
            return
        mask = self.parallel._masks[agent]
        if not is_legal(parse_action(action), mask):
            if self.parallel.illegal_action == "raise":
                check_action(agent, action, mask)
            if self.parallel.illegal_action == "terminate":
                self._terminate(agent)
                return
        self._cumulative_rewards[agent] = 0.0
        self._pending[agent] = action
        if self._selector.is_last():
            self._end_cycle()
        else:
            if self._selector.is_first():
                self._clear_rewards()
            self.agent_selection = self._selector.next()

    def _end_cycle(self) -> None:
        obs, rewards, terminations, truncations, infos = self.parallel.step(self._pending)
        self._pending = {}
        self._observations.update(obs)
        self.rewards, self.infos = rewards, infos
        self.terminations, self.truncations = terminations, truncations
        self._accumulate_rewards()
        if self.parallel.agents:
            self._selector = AgentSelector(list(self.parallel.agents))
            self.agent_selection = self._selector.reset()
        self._deads_step_first()

    def _terminate(self, offender: str) -> None:
        obs, rewards, terminations, truncations, infos = self.parallel._terminate([offender])
        self._pending = {}
        self._observations.update(obs)
        self.rewards, self.infos = rewards, infos
        self.terminations, self.truncations = terminations, truncations
        self._accumulate_rewards()
        self._deads_step_first()

    def render(self):
        return self.parallel.render()

    def close(self) -> None:
        self.parallel.close()

    def __str__(self) -> str:
        return self.parallel.metadata["name"]


def _key(seed: int) -> jax.Array:
    return jax.random.key(seed)


def parallel_env(env_id: str, render_mode: str | None = None, **options) -> ParallelEnv:
    """The registered env ``env_id`` as a PettingZoo ParallelEnv.

    Keyword options are the wrapper's (``illegal_action``, ``illegal_reward``, ``mask_in_obs``,
    ``max_cycles``) and the env's static options.
    """
    return DilemmaxParallelEnv(env_id, render_mode=render_mode, **options)


def aec_env(env_id: str, render_mode: str | None = None, **options) -> AECEnv:
    """The registered env ``env_id`` as a PettingZoo AECEnv (same options as ``parallel_env``)."""
    return DilemmaxAECEnv(parallel_env(env_id, render_mode=render_mode, **options))
