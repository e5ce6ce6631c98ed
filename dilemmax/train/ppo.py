"""IPPO and MAPPO for every dilemmax env, in one jitted program (PureJaxRL / JaxMARL style).

One :class:`Trainer` serves both algorithms; they differ only in the critic's input: the
learner's own observation (IPPO) or ``env.global_state(state)`` (MAPPO, a centralised critic).

Layout of the arrays (``L`` learning seats, ``E`` envs, ``T`` rollout steps, ``N`` actions):

- a rollout is a :class:`Transition` with leaves ``[T, L, E, ...]`` (``done`` and the global
  state have no ``L`` axis);
- parameters are one set shared by all learners (``shared_params``; the agent id is an input)
  or one set per learner, stacked on a leading ``L`` axis;
- minibatches split the env axis, so every minibatch keeps whole rollouts.

With ``recurrent=True`` (RL^2) the actor, and for IPPO the critic, are
:class:`~dilemmax.agents.networks.RecurrentNet` s. Their GRU memories live in the runner state
(``RunnerState.memory``), persist across trial boundaries and are zeroed at episode starts; each
step also feeds the previous action, the previous reward (as trained on) and the trial-done flag.
The PPO loss re-runs the memory over the whole rollout from the memory the rollout started
with (truncated backpropagation through time over ``num_steps``); a minibatch of envs carries
its envs' initial memories.

The whole runner state (parameters, optimiser, envs, key, and the env-configuration overrides
of this run) is one pytree, :class:`RunnerState`; ``jax.vmap`` over it trains several seeds, or
several configurations of a sweep, in one program, and checkpoints are that pytree serialised.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from dilemmax.agents.networks import (
    make_actor,
    make_critic,
    make_recurrent,
    masked_categorical,
    num_codes_of,
    recurrent_extras,
    recurrent_extras_size,
    unroll,
)
from dilemmax.agents.policy import GENERIC_POLICIES
from dilemmax.agents.trained import RecurrentPolicy, make_policy_fn
from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.rollout import Observation, run_episodes
from dilemmax.train.config import TrainConfig, resolve_learner_transform
from dilemmax.train.envs import (
    ConfiguredEnv,
    apply_config_overrides,
    config_grid,
    make_env,
    overrides_as_arrays,
)
from dilemmax.wrappers.log import LogWrapper
from dilemmax.wrappers.vec import VecEnv


@struct.dataclass
class RunnerState:
    """Everything one training run carries from update to update.

    Attributes:
        params: {"actor": ..., "critic": ...}; with separate parameters every leaf has a leading
            L axis.
        opt_state: the optax state of ``params``.
        env_state: the :class:`~dilemmax.wrappers.vec.VecState` of E envs.
        obs: agent -> observation [E, ...] of the current step.
        key: uint32[2], the run's PRNG key.
        update: int32[], updates done so far.
        env_config: {field: array}, the configuration overrides this run trains on.
        memory: recurrent runs: ``actor`` (and IPPO ``critic``) float32[L, E, M] GRU memories,
            ``prev_action`` int32[L, E] (-1 at an episode start), ``prev_reward`` float32[L, E],
            ``trial_done`` bool[E] (the last step ended a trial) and ``start`` bool[E] (the next
            step starts an episode). Empty for feed-forward runs.
    """

    params: Any
    opt_state: Any
    env_state: Any
    obs: dict
    key: jax.Array
    update: jax.Array
    env_config: dict
    memory: dict


class Transition(NamedTuple):
    """One rollout step of the learning seats (leaves [L, E, ...] before stacking over T)."""

    obs: jax.Array  # [L, E, *obs_shape]
    mask: jax.Array  # bool[L, E, N]
    action: jax.Array  # int32[L, E]
    log_prob: jax.Array  # float32[L, E]
    value: jax.Array  # float32[L, E]
    reward: jax.Array  # float32[L, E]
    done: jax.Array  # bool[E], the episode ended on this step
    critic_in: jax.Array  # global state float32[E, D] (MAPPO) or a dummy float32[E, 0] (IPPO)
    episode_return: jax.Array  # float32[E, A], return of the episode that ended here
    episode_done: jax.Array  # bool[E]
    acted: jax.Array  # float32[L, E], 1 where the learner chose (not a scripted transform)
    extras: jax.Array  # float32[L, E, N + 2] recurrent inputs (float32[L, E, 0] feed-forward)
    start: jax.Array  # bool[E], this step starts an episode (recurrent memory zeroed before it)


def _stack(d: dict, agents: list[str]) -> jax.Array:
    return jnp.stack([d[a] for a in agents])


def resolve_policy(env, name: str) -> Callable:
    """A partner policy by name: the env's scripted policies first, then the generic ones."""
    policies = {**GENERIC_POLICIES, **env.scripted_policies()}
    if name not in policies:
        raise ValueError(f"unknown partner policy {name!r}; available: {sorted(policies)}")
    return policies[name]


def _load_transform(path: str | None):
    """The policy transformer named ``path``, from the allow-list of
    :func:`dilemmax.train.config.resolve_learner_transform` (never an arbitrary import)."""
    return resolve_learner_transform(path)


class Trainer:
    """IPPO / MAPPO on one env id; builds the static parts (networks, optimiser) once.

    Methods are pure functions of a :class:`RunnerState`: ``init(key, env_config)``,
    ``update(state)`` (one rollout + PPO epochs), ``chunk(state)`` (``log_every`` updates),
    and ``evaluate(params, env_config, key)`` (the env's own metrics on evaluation
    configurations). None of them is jitted here; callers jit/vmap them.
    """

    def __init__(self, config: TrainConfig, env=None):
        """``env``: an env instance to use instead of ``make(config.env, **env_kwargs)`` (tests,
        unregistered envs); it then also serves evaluation."""
        config.validate()
        self.config = config
        self._given_env = env
        self.env = env if env is not None else make_env(config.env, config.env_kwargs)
        self.agents = list(self.env.agents)
        self.num_agents = self.env.num_agents
        learners = config.learners if config.learners is not None else range(self.num_agents)
        self.learners = [int(i) for i in learners]
        if not self.learners or any(i < 0 or i >= self.num_agents for i in self.learners):
            raise ValueError(f"learners {self.learners} must be seats of 0..{self.num_agents - 1}")
        self.partners = [i for i in range(self.num_agents) if i not in self.learners]
        self.partner_fn = resolve_policy(self.env, config.partner_policy) if self.partners else None

        self.transform = _load_transform(config.learner_transform)
        first = self.agents[self.learners[0]]
        self.obs_space = self.env.observation_space(first)
        self.num_actions = int(self.env.action_space(first).n)
        for i in self.learners:
            space = self.env.observation_space(self.agents[i])
            if tuple(space.shape) != tuple(self.obs_space.shape):
                raise ValueError("learning seats must share one observation shape")
        self.train_grid = config_grid(self.env, config.train_grid)

        spec = config.network_spec()
        self.recurrent = bool(config.recurrent)
        obs_codes = num_codes_of(self.obs_space)
        if self.recurrent:
            self.actor = make_recurrent(
                spec,
                self.obs_space.shape,
                self.obs_space.dtype,
                self.num_actions,
                self.num_agents,
                obs_codes,
                config.gru_hidden,
            )
        else:
            self.actor = make_actor(spec, self.obs_space, self.num_actions, self.num_agents)
        # A recurrent IPPO critic has its own memory; a MAPPO critic reads the global state.
        self.recurrent_critic = self.recurrent and config.algo != "mappo"
        if config.algo == "mappo":
            _, state = self.env.reset(jax.random.PRNGKey(0))
            gs = jax.eval_shape(self.env.global_state, state)
            codes = 256 if jnp.issubdtype(gs.dtype, jnp.integer) else 0
            if type(self.env).global_state is MultiAgentEnv.global_state:
                # The default global state concatenates the observations: scale them alike.
                codes = num_codes_of(self.obs_space)
            self.critic = make_critic(spec, gs.shape, gs.dtype, self.num_agents, codes)
            self.critic_shape = tuple(gs.shape)
            self.critic_dtype = gs.dtype
        elif self.recurrent_critic:
            self.critic = make_recurrent(
                spec,
                self.obs_space.shape,
                self.obs_space.dtype,
                1,
                self.num_agents,
                obs_codes,
                config.gru_hidden,
                output_scale=1.0,
            )
        else:
            self.critic = make_critic(
                spec,
                self.obs_space.shape,
                self.obs_space.dtype,
                self.num_agents,
                num_codes_of(self.obs_space),
            )
        self.tx = optax.chain(
            optax.clip_by_global_norm(config.max_grad_norm),
            optax.adam(self._learning_rate(), eps=1e-5),
        )
        self.template_config = self.env.sample_config(jax.random.PRNGKey(0))

    # ------------------------------------------------------------------ pieces
    def _learning_rate(self):
        c = self.config
        if not c.anneal_lr:
            return c.lr
        steps = c.num_updates * c.update_epochs * c.num_minibatches
        return optax.linear_schedule(c.lr, 0.0, steps)

    def vec_env(self, env_config: dict) -> VecEnv:
        """E copies of the env on this run's configurations (built inside the traced program)."""
        env = ConfiguredEnv(self.env, env_config, self.train_grid)
        return VecEnv(LogWrapper(env), self.config.num_envs)

    def default_env_config(self) -> dict:
        """The config's ``env_config`` overrides as arrays."""
        return overrides_as_arrays(self.config.env_config, self.template_config)

    def _apply(self, module, params, x, ids, x_axis=0):
        """``module`` for every learner: x [L, B..., *] (or shared: x_axis None), ids [L, B...]."""
        param_axis = None if self.config.shared_params else 0
        return jax.vmap(module.apply, in_axes=(param_axis, x_axis, 0))(params, x, ids)

    def _learner_ids(self, batch_shape: tuple[int, ...]) -> jax.Array:
        ids = jnp.asarray(self.learners, jnp.int32)
        return jnp.broadcast_to(
            ids.reshape((-1,) + (1,) * len(batch_shape)), (len(ids), *batch_shape)
        )

    def _critic_input(self, vec: VecEnv, env_state, obs_l: jax.Array):
        """(input, axis) of the critic: the learners' observations or the global state [E, D]."""
        if self.config.algo == "mappo":
            base = env_state.env_states.env_state
            return jax.vmap(vec.unwrapped.global_state)(base), None
        return obs_l, 0

    def init_params(self, key: jax.Array):
        obs = jnp.zeros(self.obs_space.shape, self.obs_space.dtype)
        aid = jnp.int32(self.learners[0])
        if self.config.algo == "mappo":
            critic_x = jnp.zeros(self.critic_shape, self.critic_dtype)
        else:
            critic_x = obs

        def one(k):
            ka, kc = jax.random.split(k)
            if not self.recurrent:
                return {
                    "actor": self.actor.init(ka, obs, aid),
                    "critic": self.critic.init(kc, critic_x, aid),
                }
            memory = self.actor.initial_memory()
            extras = jnp.zeros((recurrent_extras_size(self.num_actions),), jnp.float32)
            start = jnp.bool_(True)
            if self.recurrent_critic:
                critic = self.critic.init(kc, memory, obs, extras, start, aid)
            else:
                critic = self.critic.init(kc, critic_x, aid)
            return {"actor": self.actor.init(ka, memory, obs, extras, start, aid), "critic": critic}

        if self.config.shared_params:
            return one(key)
        return jax.vmap(one)(jax.random.split(key, len(self.learners)))

    def init(self, key: jax.Array, env_config: dict | None = None) -> RunnerState:
        """A fresh run: parameters, optimiser and E reset envs."""
        env_config = self.default_env_config() if env_config is None else env_config
        key, key_params, key_env = jax.random.split(key, 3)
        params = self.init_params(key_params)
        obs, env_state = self.vec_env(env_config).reset(key_env)
        return RunnerState(
            params,
            self.tx.init(params),
            env_state,
            obs,
            key,
            jnp.int32(0),
            env_config,
            self.initial_memory(),
        )

    def initial_memory(self) -> dict:
        """The recurrent carry of E envs at their first episode start ({} feed-forward)."""
        if not self.recurrent:
            return {}
        lane = (len(self.learners), self.config.num_envs)
        memory = {
            "actor": self.actor.initial_memory(lane),
            "prev_action": jnp.full(lane, -1, jnp.int32),
            "prev_reward": jnp.zeros(lane, jnp.float32),
            "trial_done": jnp.zeros(lane[1:], bool),
            "start": jnp.ones(lane[1:], bool),
        }
        if self.recurrent_critic:
            memory["critic"] = self.critic.initial_memory(lane)
        return memory

    def _step_inputs(self, memory: dict) -> tuple[jax.Array, jax.Array]:
        """(extras float32[L, E, N + 2], start bool[L, E]) of the next step."""
        lane = memory["prev_action"].shape
        trial_done = jnp.broadcast_to(memory["trial_done"], lane)
        extras = recurrent_extras(
            memory["prev_action"], memory["prev_reward"], trial_done, self.num_actions
        )
        return extras, jnp.broadcast_to(memory["start"], lane)

    def _apply_step(self, module, params, memory, x, extras, start, ids):
        """One recurrent step for every learner: leaves [L, E, ...] -> (memory, out)."""
        param_axis = None if self.config.shared_params else 0
        return jax.vmap(module.apply, in_axes=(param_axis, 0, 0, 0, 0, 0))(
            params, memory, x, extras, start, ids
        )

    def _apply_unroll(self, module, params, memory, x, extras, start, ids):
        """``unroll`` for every learner: memory [L, e, M], sequences [L, T, e, ...]."""
        param_axis = None if self.config.shared_params else 0
        fn = lambda p, m, o, ex, s, i: unroll(module, p, m, o, ex, s, i)
        return jax.vmap(fn, in_axes=(param_axis, 0, 0, 0, 0, 0))(
            params, memory, x, extras, start, ids
        )

    def _next_memory(self, memory, new_actor, new_critic, action, reward, infos, dones):
        """The carry after a step; an episode that ended here restarts from a blank carry."""
        ended = dones["__all__"]  # [E]
        trial_done = infos.get("trial_done", ended)
        out = {
            "actor": new_actor,
            "prev_action": jnp.where(ended[None], -1, action),
            "prev_reward": jnp.where(ended[None], 0.0, reward),
            "trial_done": trial_done & ~ended,
            "start": ended,
        }
        if self.recurrent_critic:
            out["critic"] = new_critic
        return out

    # ------------------------------------------------------------------ rollout
    def _partner_actions(self, key, obs, masks, base_states) -> dict:
        actions = {}
        keys = jax.random.split(key, max(1, len(self.partners)))
        for k, seat in zip(keys, self.partners, strict=False):
            agent = self.agents[seat]

            def one(kk, o, m, s, seat=seat):
                return self.partner_fn(kk, Observation(o, m, jnp.int32(seat), s))

            env_keys = jax.random.split(k, self.config.num_envs)
            actions[agent] = jax.vmap(one)(env_keys, obs[agent], masks[agent], base_states)
            actions[agent] = actions[agent].astype(jnp.int32)
        return actions

    def _transformed(self, key, obs, masks, env_state, action):
        """Learner actions after ``learner_transform``: (int32[L, E], acted float32[L, E])."""
        scripted = self.transform(lambda k, o: jnp.int32(-1))
        base = env_state.env_states.env_state
        out, acted = [], []
        for j, seat in enumerate(self.learners):
            agent = self.agents[seat]

            def one(k, o, m, st, seat=seat):
                return scripted(k, Observation(o, m, jnp.int32(seat), st)).astype(jnp.int32)

            keys = jax.random.split(jax.random.fold_in(key, seat), self.config.num_envs)
            chosen = jax.vmap(one)(keys, obs[agent], masks[agent], base)
            own = chosen == -1
            out.append(jnp.where(own, action[j], chosen))
            acted.append(own.astype(jnp.float32))
        return jnp.stack(out), jnp.stack(acted)

    def _env_step(self, vec: VecEnv, params, carry, _):
        env_state, obs, key, memory = carry
        key, key_act, key_partner, key_step = jax.random.split(key, 4)
        masks = vec.action_mask(env_state)
        learner_agents = [self.agents[i] for i in self.learners]
        obs_l = _stack(obs, learner_agents)
        mask_l = _stack(masks, learner_agents)
        ids = self._learner_ids((self.config.num_envs,))

        critic_x, critic_axis = self._critic_input(vec, env_state, obs_l)
        new_actor = new_critic = None
        if self.recurrent:
            extras, start = self._step_inputs(memory)
            new_actor, logits = self._apply_step(
                self.actor, params["actor"], memory["actor"], obs_l, extras, start, ids
            )
        else:
            extras = jnp.zeros((*obs_l.shape[:2], 0), jnp.float32)
            start = jnp.zeros((self.config.num_envs,), bool)
            logits = self._apply(self.actor, params["actor"], obs_l, ids)
        dist = masked_categorical(logits, mask_l)
        action = dist.sample(seed=key_act).astype(jnp.int32)
        log_prob = dist.log_prob(action)
        if self.recurrent_critic:
            new_critic, value = self._apply_step(
                self.critic, params["critic"], memory["critic"], obs_l, extras, start, ids
            )
            value = value[..., 0]
        else:
            value = self._apply(self.critic, params["critic"], critic_x, ids, critic_axis)

        acted = jnp.ones(action.shape, jnp.float32)
        if self.transform is not None:
            action, acted = self._transformed(key_partner, obs, masks, env_state, action)
        actions = {a: action[j] for j, a in enumerate(learner_agents)}
        if self.partners:
            base = env_state.env_states.env_state
            actions.update(self._partner_actions(key_partner, obs, masks, base))
        # full_infos: the recurrent carry reads the game's own infos["trial_done"] (bool[E]).
        next_obs, next_state, rewards, dones, infos = vec.step(
            key_step, env_state, actions, full_infos=True
        )

        rewards_all = _stack(rewards, self.agents).astype(jnp.float32)  # [A, E]
        if self.config.reward == "team":
            rewards_all = jnp.broadcast_to(rewards_all.mean(0), rewards_all.shape)
        rewards_all = rewards_all * self.config.reward_scale
        reward_l = rewards_all[jnp.asarray(self.learners)]
        if self.recurrent:
            next_memory = self._next_memory(
                memory, new_actor, new_critic, action, reward_l, infos, dones
            )
            start = memory["start"]
        else:
            next_memory = memory
        if critic_axis is None:
            stored_critic_in = critic_x.astype(jnp.float32)
        else:
            stored_critic_in = jnp.zeros((self.config.num_envs, 0), jnp.float32)
        transition = Transition(
            obs_l,
            mask_l,
            action,
            log_prob,
            value,
            reward_l,
            dones["__all__"],
            stored_critic_in,
            infos["returned_episode_returns"],
            dones["__all__"],
            acted,
            extras,
            start,
        )
        return (next_state, next_obs, key, next_memory), transition

    # ------------------------------------------------------------------ learning
    def _advantages(self, traj: Transition, last_value: jax.Array):
        """GAE over [T, L, E]; an episode end on step t cuts the bootstrap from step t + 1."""
        c = self.config

        def backward(carry, t):
            gae, next_value = carry
            not_done = 1.0 - t.done.astype(jnp.float32)[None, :]
            delta = t.reward + c.gamma * next_value * not_done - t.value
            gae = delta + c.gamma * c.gae_lambda * not_done * gae
            return (gae, t.value), gae

        _, adv = jax.lax.scan(
            backward, (jnp.zeros_like(last_value), last_value), traj, reverse=True
        )
        return adv, adv + traj.value

    def _loss(self, params, batch, adv, targets, memory0=None):
        """PPO loss on a minibatch with leaves [L, T, e, ...] (critic input [T, e, D] for MAPPO).

        ``memory0`` (recurrent): the minibatch envs' memories at the rollout start,
        {"actor": float32[L, e, M], "critic": ...}; the memories are re-run over the T steps.
        """
        c = self.config
        ids = self._learner_ids(batch.action.shape[1:])
        if self.recurrent:
            start = jnp.broadcast_to(batch.start, batch.action.shape)
            _, logits = self._apply_unroll(
                self.actor, params["actor"], memory0["actor"], batch.obs, batch.extras, start, ids
            )
        else:
            logits = self._apply(self.actor, params["actor"], batch.obs, ids)
        dist = masked_categorical(logits, batch.mask)
        log_prob = dist.log_prob(batch.action)
        if c.algo == "mappo":
            value = self._apply(self.critic, params["critic"], batch.critic_in, ids, None)
        elif self.recurrent_critic:
            _, value = self._apply_unroll(
                self.critic,
                params["critic"],
                memory0["critic"],
                batch.obs,
                batch.extras,
                start,
                ids,
            )
            value = value[..., 0]
        else:
            value = self._apply(self.critic, params["critic"], batch.obs, ids)

        clipped = batch.value + jnp.clip(value - batch.value, -c.clip_eps, c.clip_eps)
        value_loss = 0.5 * jnp.maximum((value - targets) ** 2, (clipped - targets) ** 2).mean()

        # Steps a learner_transform scripted carry no policy gradient (weight 0).
        w = batch.acted
        mean = lambda x: (x * w).sum() / jnp.maximum(w.sum(), 1.0)
        if c.normalize_advantages:
            adv_mean = mean(adv)
            adv = (adv - adv_mean) / (jnp.sqrt(mean((adv - adv_mean) ** 2)) + 1e-8)
        log_ratio = log_prob - batch.log_prob
        ratio = jnp.exp(log_ratio)
        surrogate = jnp.minimum(
            ratio * adv, jnp.clip(ratio, 1.0 - c.clip_eps, 1.0 + c.clip_eps) * adv
        )
        actor_loss = -mean(surrogate)
        entropy = mean(dist.entropy())
        total = actor_loss + c.vf_coef * value_loss - c.ent_coef * entropy
        stats = {
            "loss/total": total,
            "loss/actor": actor_loss,
            "loss/value": value_loss,
            "loss/entropy": entropy,
            "loss/approx_kl": mean((ratio - 1.0) - log_ratio),
            "loss/clip_frac": mean((jnp.abs(ratio - 1.0) > c.clip_eps).astype(jnp.float32)),
        }
        return total, stats

    @staticmethod
    def _learner_first(traj: Transition, adv, targets):
        """[T, L, E, ...] -> [L, T, E, ...] for the per-learner leaves; the MAPPO critic input
        and the per-env leaves stay [T, E, ...]."""
        to_lte = lambda x: jnp.swapaxes(x, 0, 1)
        batch = (
            traj._replace(obs=to_lte(traj.obs), mask=to_lte(traj.mask), action=to_lte(traj.action))
            ._replace(log_prob=to_lte(traj.log_prob), value=to_lte(traj.value))
            ._replace(reward=to_lte(traj.reward), acted=to_lte(traj.acted))
            ._replace(extras=to_lte(traj.extras))
        )
        return batch, to_lte(adv), to_lte(targets)

    def _epoch(self, params, opt_state, key, data, memory0):
        """One pass over the rollout (``_learner_first`` layout) in ``num_minibatches``
        minibatches of envs; ``memory0`` {name: float32[L, E, M]} are the recurrent memories at
        the rollout start ({} feed-forward), split with their envs."""
        c = self.config
        perm = jax.random.permutation(key, c.num_envs)

        def split(x, env_axis):
            x = jnp.take(x, perm, axis=env_axis)
            shape = x.shape
            m = c.num_minibatches
            x = x.reshape(*shape[:env_axis], m, shape[env_axis] // m, *shape[env_axis + 1 :])
            return jnp.moveaxis(x, env_axis, 0)

        batch, adv_l, targets_l = data
        mb = Transition(
            obs=split(batch.obs, 2),
            mask=split(batch.mask, 2),
            action=split(batch.action, 2),
            log_prob=split(batch.log_prob, 2),
            value=split(batch.value, 2),
            reward=split(batch.reward, 2),
            done=split(batch.done, 1),
            critic_in=split(batch.critic_in, 1),
            episode_return=split(batch.episode_return, 1),
            episode_done=split(batch.episode_done, 1),
            acted=split(batch.acted, 2),
            extras=split(batch.extras, 2),
            start=split(batch.start, 1),
        )
        mem = {name: split(m, 1) for name, m in memory0.items()}
        minibatches = (mb, split(adv_l, 2), split(targets_l, 2), mem)

        def step(carry, minibatch):
            params, opt_state = carry
            b, a, t, m = minibatch
            grads, stats = jax.grad(self._loss, has_aux=True)(params, b, a, t, m)
            updates, opt_state = self.tx.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
            return (params, opt_state), stats

        (params, opt_state), stats = jax.lax.scan(step, (params, opt_state), minibatches)
        return params, opt_state, stats

    def update(self, state: RunnerState) -> tuple[RunnerState, dict]:
        """One rollout of ``num_steps`` in E envs and ``update_epochs`` PPO epochs on it."""
        c = self.config
        vec = self.vec_env(state.env_config)
        (env_state, obs, key, memory), traj = jax.lax.scan(
            lambda carry, x: self._env_step(vec, state.params, carry, x),
            (state.env_state, state.obs, state.key, state.memory),
            None,
            c.num_steps,
        )
        learner_agents = [self.agents[i] for i in self.learners]
        obs_l = _stack(obs, learner_agents)
        critic_x, critic_axis = self._critic_input(vec, env_state, obs_l)
        ids = self._learner_ids((c.num_envs,))
        if self.recurrent_critic:
            extras, start = self._step_inputs(memory)
            _, last_value = self._apply_step(
                self.critic, state.params["critic"], memory["critic"], obs_l, extras, start, ids
            )
            last_value = last_value[..., 0]
        else:
            last_value = self._apply(
                self.critic, state.params["critic"], critic_x, ids, critic_axis
            )
        adv, targets = self._advantages(traj, last_value)
        # Memories the rollout started from: each minibatch re-runs its envs' sequences.
        memory0 = {k: state.memory[k] for k in ("actor", "critic") if k in state.memory}

        key, key_epochs = jax.random.split(key)
        data = self._learner_first(traj, adv, targets)  # once, not once per epoch

        def epoch(carry, k):
            params, opt_state = carry
            params, opt_state, stats = self._epoch(params, opt_state, k, data, memory0)
            return (params, opt_state), stats

        (params, opt_state), stats = jax.lax.scan(
            epoch, (state.params, state.opt_state), jax.random.split(key_epochs, c.update_epochs)
        )
        metrics = {k: v.mean() for k, v in stats.items()}
        metrics.update(self._episode_stats(traj))
        new_state = state.replace(
            params=params,
            opt_state=opt_state,
            env_state=env_state,
            obs=obs,
            key=key,
            update=state.update + 1,
            memory=memory,
        )
        return new_state, metrics

    def _episode_stats(self, traj: Transition) -> dict:
        """Mean return per agent of the episodes that ended in this rollout, and their count."""
        done = traj.episode_done.astype(jnp.float32)  # [T, E]
        count = done.sum()
        per_agent = (traj.episode_return * done[..., None]).sum((0, 1)) / jnp.maximum(count, 1.0)
        return {
            "episodes": count,
            "return/per_agent": per_agent,
            "return/mean": per_agent.mean(),
            "return/learners": per_agent[jnp.asarray(self.learners)].mean(),
            "reward/step": traj.reward.mean(),
        }

    def chunk(self, state: RunnerState) -> tuple[RunnerState, dict]:
        """``log_every`` updates; metrics averaged over updates that saw finished episodes."""
        state, metrics = jax.lax.scan(
            lambda s, _: self.update(s), state, None, self.config.log_every
        )
        weights = metrics["episodes"]
        out = {}
        for name, values in metrics.items():
            if name.startswith("return/"):
                w = weights.reshape((-1,) + (1,) * (values.ndim - 1))
                out[name] = (values * w).sum(0) / jnp.maximum(weights.sum(), 1.0)
            elif name == "episodes":
                out[name] = values.sum()
            else:
                out[name] = values.mean(0)
        return state, out

    # ------------------------------------------------------------------ evaluation
    def policy_fn(self, params, greedy: bool = False) -> Callable:
        """The learned policy as a jittable ``policy(key, observation) -> action`` (recurrent:
        a :class:`~dilemmax.agents.trained.RecurrentPolicy`, which the rollout carries)."""
        if self.recurrent:
            return RecurrentPolicy(
                self.actor,
                params["actor"],
                self.learners,
                self.config.shared_params,
                self.num_agents,
                self.num_actions,
                greedy,
                self.config.reward,
                self.config.reward_scale,
            )
        return make_policy_fn(
            self.actor,
            params["actor"],
            self.learners,
            self.config.shared_params,
            self.num_agents,
            greedy,
        )

    def eval_env(self) -> ConfiguredEnv:
        if self._given_env is not None:
            return ConfiguredEnv(self._given_env)
        kwargs = {**self.config.env_kwargs, **self.config.eval_env_kwargs}
        return ConfiguredEnv(make_env(self.config.env, kwargs))

    def evaluate(self, params, env_config: dict, key: jax.Array, greedy: bool = False):
        """The env's metrics of the current policy on the evaluation configurations.

        Learning seats play the trained policy, the other seats their partner policy. Returns
        the env's ``episode_metrics`` with leading axes [C, episodes] (eval_grid) or [episodes].
        Not jitted here (``run_episodes`` runs with ``jit=False``): jit the caller.
        """
        env = self.eval_env()
        env.overrides = dict(env_config)
        policy = self.policy_fn(params, greedy)
        if self.transform is not None:
            policy = self.transform(policy)
        seats = [policy if i in self.learners else self.partner_fn for i in range(self.num_agents)]
        grid = config_grid(env.inner, self.config.eval_grid)
        if grid is not None:
            grid = jax.vmap(lambda cfg: apply_config_overrides(cfg, env_config))(grid)
        _, metrics = run_episodes(
            env, seats, key, self.config.eval_episodes, configs=grid, jit=False
        )
        return metrics


def make_train(config: TrainConfig, env=None) -> Callable:
    """PureJaxRL's entry point: ``train(key, env_config=None) -> (runner_state, metrics)``.

    Runs all ``config.num_updates`` updates in one scan (metrics per update); jit it, and
    ``jax.vmap`` it over keys (seeds) and/or over ``env_config`` arrays (a sweep).
    """
    trainer = Trainer(config, env=env)

    def train(key: jax.Array, env_config: dict | None = None):
        state = trainer.init(key, env_config)
        return jax.lax.scan(lambda s, _: trainer.update(s), state, None, config.num_updates)

    train.trainer = trainer
    return train
