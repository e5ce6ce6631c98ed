"""A single seat of a dilemmax game as a Gymnasium env (and a JAX-batched vector env).

For single-agent RL code (Stable-Baselines3 and the like): the learner controls ``agent``, every
other seat is filled by a jittable policy (scripted or trained) following the policy protocol, or
by its seat spec: a scripted name (``"random"``, ``"first_legal"`` or one of the game's
``scripted_policies()``, or ``"scripted:<name>"``), ``"trained:<run folder>[,seed=k][,greedy]"`` or
``"zoo:<game>/<population>"``.

The legal-action mask is in ``info["action_mask"]`` (``np.int8``) and from ``action_masks()``
(the method name sb3-contrib's MaskablePPO calls). Illegal actions follow ``illegal_action``:
``"raise"`` (``ValueError`` naming the agent, the action and the legal set; nothing stepped),
``"noop"`` (the JAX env plays its documented no-op, ``info["illegal_action"]`` is True) or
``"terminate"`` (the episode ends with reward ``illegal_reward``; nothing stepped).

Registered ids: ``gymnasium.make("dilemmax/<env_id>-v0")`` for every game (the learner in the
first seat, every other seat playing uniformly at random among its legal actions; keyword
arguments override), after ``import dilemmax``. :class:`SingleSeatVectorEnv` steps ``num_envs``
copies as one compiled, vmapped JAX call (``gymnasium.make_vec("dilemmax/<env_id>-v0",
num_envs=N, vectorization_mode="vector_entry_point")`` builds it).
"""

from __future__ import annotations

import functools

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from gymnasium.vector.vector_env import AutoresetMode

from dilemmax.envs.option_spec import INT32_MAX
from dilemmax.envs.registry import make
from dilemmax.envs.rollout import act, is_carried, seat_policies, step_parts
from dilemmax.envs.seat_spec import SeatSpecError, seat_policy
from dilemmax.wrappers.legal import (
    MAX_NUM_ENVS,
    LegalDiscrete,
    check_action,
    check_count,
    check_mode,
    check_reward,
    is_legal,
    jax_action,
    parse_action,
)


def resolve_policies(env, others, agent: str):
    """Policies for every seat: a policy as it is, or a seat spec (:mod:`dilemmax.envs.seat_spec`:
    ``scripted:<name>`` or a bare scripted name, ``trained:<run>``, ``zoo:<game>/<population>``)
    resolved against ``env``; a seat that cannot play inside JAX (a model) is refused."""

    def lookup(given):
        policy = seat_policy(given, env, where="the Gymnasium view's other seats")
        if is_carried(policy):  # its memory would have to live in the Gymnasium env's state
            raise SeatSpecError(
                f"{str(given)[:200]!r} keeps a memory (a recurrent run), which the Gymnasium "
                "view's other seats do not carry; seat a feed-forward run or a scripted policy"
            )
        return policy

    if isinstance(others, dict):
        others = {a: lookup(p) for a, p in others.items()}
        others = {**others, agent: others.get(agent, _placeholder)}
    else:
        others = lookup(others)
    return seat_policies(env, others)


class SingleSeatEnv(gymnasium.Env):
    """Seat ``agent`` of ``env_id`` as a Gymnasium env.

    Args:
        env_id: a registered env id.
        others: a policy (or seat spec) for every other seat, or a dict of them by agent name.
        agent: the seat the learner plays (default: the first agent).
        render_mode: ``"ansi"``, ``"human"`` (prints the text view) or ``"rgb_array"`` where the
            game supports it.
        illegal_action, illegal_reward: see the module docstring.
        **options: the env's static options.
    """

    def __init__(
        self,
        env_id: str,
        others="random",
        agent: str | None = None,
        render_mode=None,
        *,
        illegal_action: str = "raise",
        illegal_reward: float = -1.0,
        **options,
    ):
        self.env = make(env_id, **options)
        self.agent = agent or self.env.agents[0]
        if self.agent not in self.env.agents:
            raise ValueError(f"unknown agent {self.agent!r}; agents: {self.env.agents}")
        render_modes = [*self.env.render_modes, "human"]
        if render_mode is not None and render_mode not in render_modes:
            raise ValueError(f"render_mode {render_mode!r} is not one of {render_modes}")
        self.render_mode = render_mode
        self.illegal_action = check_mode(illegal_action)
        self.illegal_reward = check_reward("illegal_reward", illegal_reward)
        self.metadata = {"render_modes": render_modes}
        self.observation_space = self.env.observation_space(self.agent).to_gymnasium()
        self.action_space = LegalDiscrete(self.env.action_space(self.agent).n, self._legal_mask)
        seats = resolve_policies(self.env, others, self.agent)
        self._reset = jax.jit(self.env.reset)
        self._step = jax.jit(functools.partial(_step_with_others, self.env, self.agent, seats))
        self._mask = jax.jit(self.env.action_mask)
        self._state = None
        self._over = False
        self._seeds = np.random.default_rng()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self._seeds = np.random.default_rng(seed)
        self._key, key_reset = jax.random.split(jax.random.key(self._seeds.integers(INT32_MAX)))
        self._obs, self._state = self._reset(key_reset)
        self._over = False
        return self._observation(), self._info()

    def step(self, action):
        if self._state is None:
            raise ValueError("call reset() before step()")
        if self._over:
            raise ValueError("the episode is over; call reset()")
        parsed = parse_action(action)
        legal = is_legal(parsed, self.action_masks().astype(bool))
        if not legal and self.illegal_action == "raise":
            check_action(self.agent, action, self.action_masks().astype(bool))
        if not legal and self.illegal_action == "terminate":
            self._over = True
            info = {**self._info(), "illegal_action": True}
            return self._observation(), self.illegal_reward, True, False, info
        self._key, key = jax.random.split(self._key)
        self._obs, self._state, rewards, dones, _ = self._step(
            key, self._state, self._obs, jax_action(parsed, self.action_space.n)
        )
        terminated = bool(dones[self.agent]) or bool(dones["__all__"])
        self._over = terminated
        info = self._info()
        if not legal:
            info["illegal_action"] = True
        return self._observation(), float(rewards[self.agent]), terminated, False, info

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
        if self.render_mode == "human":
            print(self.env.render(self._state, "ansi"))
            return None
        frame = self.env.render(self._state, self.render_mode)
        return frame if self.render_mode == "ansi" else np.asarray(frame, dtype=np.uint8)


def _step_with_others(env, agent, seats, key, state, obs, action):
    """One ``step_env`` with the learner's ``action`` and the other seats' policies."""
    key_act, key_step = step_parts(key)
    actions = act(env, seats, key_act, obs, state)
    actions[agent] = jnp.asarray(action, jnp.int32)
    return env.step_env(key_step, state, actions)


def _placeholder(key, observation):
    """Stands in the learner's seat; its action is always replaced by the learner's."""
    del key
    return jnp.argmax(observation.mask).astype(jnp.int32)


class SingleSeatVectorEnv(gymnasium.vector.VectorEnv):
    """``num_envs`` copies of a :class:`SingleSeatEnv` stepped as one vmapped JAX call.

    Autoreset is Gymnasium's same-step mode: when a copy's episode ends, the returned observation
    is the first of its next episode, and ``info["final_obs"]`` / ``info["final_info"]`` (with
    ``info["_final_obs"]`` marking the copies) hold the end of the one that finished. Masks are in
    ``info["action_mask"]`` (int8 [num_envs, n]) and ``action_masks()``.

    Args: as :class:`SingleSeatEnv`, plus ``num_envs``. ``illegal_action="raise"`` checks the
    whole batch before stepping anything.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(
        self,
        env_id: str,
        num_envs: int = 1,
        others="random",
        agent: str | None = None,
        *,
        illegal_action: str = "raise",
        illegal_reward: float = -1.0,
        **options,
    ):
        num_envs = check_count("num_envs", num_envs, high=MAX_NUM_ENVS)
        self.env = make(env_id, **options)
        self.agent = agent or self.env.agents[0]
        if self.agent not in self.env.agents:
            raise ValueError(f"unknown agent {self.agent!r}; agents: {self.env.agents}")
        self.num_envs = int(num_envs)
        self.illegal_action = check_mode(illegal_action)
        self.illegal_reward = check_reward("illegal_reward", illegal_reward)
        self.single_observation_space = self.env.observation_space(self.agent).to_gymnasium()
        self.single_action_space = gymnasium.spaces.Discrete(self.env.action_space(self.agent).n)
        self.observation_space = gymnasium.vector.utils.batch_space(
            self.single_observation_space, self.num_envs
        )
        self.action_space = gymnasium.vector.utils.batch_space(
            self.single_action_space, self.num_envs
        )
        seats = resolve_policies(self.env, others, self.agent)
        one_step = functools.partial(_step_with_others, self.env, self.agent, seats)
        self._reset = jax.jit(jax.vmap(self.env.reset))
        self._step = jax.jit(functools.partial(self._batch_step, jax.vmap(one_step)))
        self._mask = jax.jit(jax.vmap(self.env.action_mask))
        self._state = None
        self._seeds = np.random.default_rng()

    def _batch_step(self, vstep, key, state, obs, actions, forced_end):
        """vmapped step; copies that ended (or were ``forced_end``) restart from a fresh reset,
        computed only on steps where some copy ended."""
        key_step, key_reset = jax.random.split(key)
        keys = jax.random.split(key_step, self.num_envs)
        next_obs, next_state, rewards, dones, _ = vstep(keys, state, obs, actions)
        reward = jnp.where(forced_end, self.illegal_reward, rewards[self.agent])
        done = dones[self.agent] | dones["__all__"] | forced_end

        def restart():
            fresh_obs, fresh_state = jax.vmap(self.env.reset)(
                jax.random.split(key_reset, self.num_envs)
            )
            pick = lambda f, n: jnp.where(done.reshape((-1,) + (1,) * (n.ndim - 1)), f, n)
            return jax.tree.map(pick, (fresh_obs, fresh_state), (next_obs, next_state))

        new_obs, new_state = jax.lax.cond(jnp.any(done), restart, lambda: (next_obs, next_state))
        return new_obs, new_state, next_obs[self.agent], reward, done

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._seeds = np.random.default_rng(seed)
        key = jax.random.key(self._seeds.integers(INT32_MAX))
        self._key, key_reset = jax.random.split(key)
        self._obs, self._state = self._reset(jax.random.split(key_reset, self.num_envs))
        self._masks = np.asarray(self._mask(self._state)[self.agent], dtype=bool)
        return self._observation(self._obs[self.agent]), {"action_mask": self.action_masks()}

    def step(self, actions):
        if self._state is None:
            raise ValueError("call reset() before step()")
        actions = np.asarray(actions).reshape(-1)
        if actions.shape != (self.num_envs,):
            raise ValueError(f"expected {self.num_envs} actions, got shape {np.shape(actions)}")
        parsed = [parse_action(a) for a in actions]
        legal = np.array([is_legal(p, m) for p, m in zip(parsed, self._masks, strict=True)])
        if not legal.all() and self.illegal_action == "raise":
            i = int(np.argmin(legal))
            check_action(f"{self.agent} (env {i})", actions[i], self._masks[i])
        forced = ~legal if self.illegal_action == "terminate" else np.zeros(self.num_envs, bool)
        n = self.single_action_space.n
        jax_actions = np.array([jax_action(p, n) for p in parsed], np.int32)
        self._key, key = jax.random.split(self._key)
        self._obs, self._state, final_obs, reward, done = self._step(
            key, self._state, self._obs, jax_actions, forced
        )
        done = np.asarray(done)
        self._masks = np.asarray(self._mask(self._state)[self.agent], dtype=bool)
        info = {"action_mask": self.action_masks(), "illegal_action": ~legal}
        if done.any():
            info["final_obs"] = np.where(
                done.reshape((-1,) + (1,) * (np.ndim(final_obs) - 1)),
                self._observation(final_obs),
                0,
            ).astype(self.single_observation_space.dtype)
            info["_final_obs"] = done
            info["final_info"] = {"illegal_action": ~legal}
            info["_final_info"] = done
        truncated = np.zeros(self.num_envs, bool)
        return (
            self._observation(self._obs[self.agent]),
            np.asarray(reward, np.float64),
            done,
            truncated,
            info,
        )

    def action_masks(self) -> np.ndarray:
        return self._masks.astype(np.int8)

    def _observation(self, obs) -> np.ndarray:
        return np.asarray(obs, dtype=self.single_observation_space.dtype)
