"""IPPO and MAPPO for every dilemmax env, in one jitted program (PureJaxRL / JaxMARL shape).

One :class:`Trainer` serves every variant. What differs between them (a feed-forward or a
recurrent RL^2 actor; a critic on the learner's observation, IPPO, or on
``env.global_state(state)``, MAPPO) is chosen once, at construction, in the
:class:`~dilemmax.train.actor_critic.ActorCritic` adapter; who plays which seat is
:class:`~dilemmax.train.learners.Seats`. :meth:`Trainer.update` then reads top to bottom:
collect a rollout, compute advantages, run the PPO epochs.

Layout of the arrays (``L`` learning seats, ``E`` envs, ``T`` rollout steps, ``A`` agents):

- a rollout is a :class:`Transition` of a per-learner part (leaves ``[T, L, E, ...]``) and a
  per-env part (``[T, E, ...]``);
- parameters are one set shared by all learners (``shared_params``; the agent id is an input)
  or one set per learner, stacked on a leading ``L`` axis;
- minibatches split the env axis, so every minibatch keeps whole rollouts (and, for a recurrent
  actor, re-runs its envs' memories from where the rollout started: truncated backpropagation
  through time over ``num_steps``).

The envs step as ``jax.vmap(env.step)``: the auto-reset inside ``MultiAgentEnv.step`` is a
:func:`~dilemmax.envs.rare.rare_cond`, paid only on steps where some env ends an episode.

The whole runner state (parameters, optimiser, envs, key, and the env-configuration overrides
of this run) is one pytree, :class:`RunnerState`; ``jax.vmap`` over it trains several seeds, or
several configurations of a sweep, in one program, and checkpoints are that pytree serialised.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from dilemmax.agents.carry import reward_signal
from dilemmax.agents.networks import masked_categorical
from dilemmax.agents.trained import RecurrentPolicy, make_policy_fn
from dilemmax.envs.rollout import run_episodes
from dilemmax.train.actor_critic import ActorCritic, optimiser
from dilemmax.train.config import TrainConfig
from dilemmax.train.envs import (
    ConfiguredEnv,
    apply_config_overrides,
    config_grid,
    make_env,
    overrides_as_arrays,
)
from dilemmax.train.learners import Seats
from dilemmax.wrappers.log import LogWrapper


@struct.dataclass
class RunnerState:
    """Everything one training run carries from update to update.

    Attributes:
        params: {"actor": ..., "critic": ...}; with separate parameters every leaf has a leading
            L axis.
        opt_state: the optax state of ``params``.
        env_state: the :class:`~dilemmax.wrappers.log.LogState` of E envs (leaves [E, ...]).
        obs: agent -> observation [E, ...] of the current step.
        key: uint32[2], the run's PRNG key.
        update: int32[], updates done so far.
        env_config: {field: array}, the configuration overrides this run trains on.
        memory: recurrent runs: ``actor`` (and IPPO ``critic``) float32[L, E, M] GRU memories,
            ``prev_action`` int32[L, E] (-1 at an episode start), ``prev_reward`` float32[L, E],
            ``trial_done`` bool[E] (the last step ended a trial) and ``start`` bool[E] (the next
            step starts an episode); see :mod:`dilemmax.agents.carry`. Empty feed-forward.
    """

    params: Any
    opt_state: Any
    env_state: Any
    obs: dict
    key: jax.Array
    update: jax.Array
    env_config: dict
    memory: dict


class LearnerStep(NamedTuple):
    """One rollout step of the learning seats."""

    obs: jax.Array  # [L, E, *obs_shape]
    mask: jax.Array  # bool[L, E, N]
    action: jax.Array  # int32[L, E]
    log_prob: jax.Array  # float32[L, E]
    value: jax.Array  # float32[L, E]
    reward: jax.Array  # float32[L, E], as trained on (reward mode and scale applied)
    acted: jax.Array  # float32[L, E], 1 where the learner chose (not a scripted transform)
    extras: jax.Array  # float32[L, E, N + 2] recurrent inputs (float32[L, E, 0] feed-forward)
    start: jax.Array  # bool[L, E], this step starts an episode (recurrent memory zeroed)


class EnvStep(NamedTuple):
    """One rollout step of the envs."""

    done: jax.Array  # bool[E], the episode ended on this step
    critic_in: jax.Array | None  # the global state [E, D] (MAPPO); None (IPPO)
    episode_return: jax.Array  # float32[E, A], return of the episode that ended here


class Transition(NamedTuple):
    """One rollout step (leaves get a leading T axis when the scan stacks them)."""

    learner: LearnerStep
    env: EnvStep


def _stack(d: dict, agents: list[str]) -> jax.Array:
    return jnp.stack([d[a] for a in agents])


def _take_envs(tree, envs: jax.Array, env_axis: int):
    """Every leaf's entries of the envs ``envs`` (int32[e]) along ``env_axis``: a minibatch.

    Gathering each minibatch where it is used never writes out a shuffled copy of the whole
    rollout (nor a transposed one to put the minibatch axis first)."""
    return jax.tree.map(lambda x: jnp.take(x, envs, axis=env_axis), tree)


def gae(traj: Transition, last_value: jax.Array, gamma: float, lam: float):
    """(advantages, value targets) float32[T, L, E]; an episode end on step t cuts the
    bootstrap from step t + 1."""

    def backward(carry, t: Transition):
        advantage, next_value = carry
        not_done = 1.0 - t.env.done.astype(jnp.float32)[None, :]
        delta = t.learner.reward + gamma * next_value * not_done - t.learner.value
        advantage = delta + gamma * lam * not_done * advantage
        return (advantage, t.learner.value), advantage

    init = (jnp.zeros_like(last_value), last_value)
    _, advantages = jax.lax.scan(backward, init, traj, reverse=True)
    return advantages, advantages + traj.learner.value


def ppo_loss(config: TrainConfig, nets: ActorCritic, params, learner, env, memory0):
    """The PPO loss of one minibatch and its statistics.

    Args:
        learner: (LearnerStep, advantages, targets), leaves [L, T, e, ...].
        env: the EnvStep, leaves [T, e, ...].
        memory0: the recurrent memories the rollout started from, {"actor": float32[L, e, M],
            ...} ({} feed-forward).
    """
    c = config
    batch, adv, targets = learner
    logits, value = nets.sequence(
        params, memory0, batch.obs, env.critic_in, batch.extras, batch.start
    )
    dist = masked_categorical(logits, batch.mask)
    log_prob = dist.log_prob(batch.action)

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
    surrogate = jnp.minimum(ratio * adv, jnp.clip(ratio, 1.0 - c.clip_eps, 1.0 + c.clip_eps) * adv)
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
        self.seats = Seats(self.env, config)
        self.learners, self.partners = self.seats.learners, self.seats.partners
        self.partner_fn, self.transform = self.seats.partner_fn, self.seats.transform
        self.nets = ActorCritic(
            self.env,
            self.learners,
            config.network_spec(),
            config.algo,
            config.shared_params,
            bool(config.recurrent),
            config.gru_hidden,
        )
        self.recurrent = self.nets.recurrent
        self.actor = self.nets.actor
        self.num_actions = self.nets.num_actions
        self.train_grid = config_grid(self.env, config.train_grid)
        self.tx = optimiser(config)
        # Shapes and dtypes only (traced, not run: an eager draw compiles each op on its own).
        self.template_config = jax.eval_shape(self.env.sample_config, jax.random.PRNGKey(0))

    # ------------------------------------------------------------------ envs, init
    def training_env(self, env_config: dict) -> LogWrapper:
        """The env on this run's configurations (built inside the traced program), logged."""
        return LogWrapper(ConfiguredEnv(self.env, env_config, self.train_grid))

    def default_env_config(self) -> dict:
        """The config's ``env_config`` overrides as arrays."""
        return overrides_as_arrays(self.config.env_config, self.template_config)

    def init(self, key: jax.Array, env_config: dict | None = None) -> RunnerState:
        """A fresh run: parameters, optimiser and E reset envs."""
        env_config = self.default_env_config() if env_config is None else env_config
        key, key_params, key_env = jax.random.split(key, 3)
        params = self.nets.init(key_params)
        env = self.training_env(env_config)
        obs, env_state = jax.vmap(env.reset)(jax.random.split(key_env, self.config.num_envs))
        memory = self.nets.initial_memory(self.config.num_envs)
        return RunnerState(
            params, self.tx.init(params), env_state, obs, key, jnp.int32(0), env_config, memory
        )

    # ------------------------------------------------------------------ one update
    def update(self, state: RunnerState) -> tuple[RunnerState, dict]:
        """One rollout of ``num_steps`` in E envs and ``update_epochs`` PPO epochs on it."""
        c, nets, seats = self.config, self.nets, self.seats
        env = self.training_env(state.env_config)
        env_step = jax.vmap(functools.partial(env.step, full_infos=True))
        action_mask = jax.vmap(env.action_mask)

        # COLLECT TRAJECTORIES
        def step(carry, _):
            env_state, obs, key, memory = carry
            key, key_act, key_seats, key_step = jax.random.split(key, 4)
            base = env_state.env_state  # the game's states under the LogWrapper
            masks = action_mask(base)
            obs_l, mask_l = seats.stack(obs), seats.stack(masks)
            critic_in = nets.critic_input(base, obs_l)
            logits, value, nets_memory, extras, start = nets.step(
                state.params, memory, obs_l, critic_in
            )
            dist = masked_categorical(logits, mask_l)
            action = dist.sample(seed=key_act).astype(jnp.int32)
            log_prob = dist.log_prob(action)
            actions, acted = seats.actions(key_seats, action, obs, masks, base)

            keys = jax.random.split(key_step, c.num_envs)
            obs, env_state, rewards, dones, infos = env_step(keys, env_state, actions)
            signal = reward_signal(_stack(rewards, self.agents), c.reward, c.reward_scale)
            reward = signal[jnp.asarray(self.learners)]
            ended = dones["__all__"]
            trial_done = infos.get("trial_done", ended)
            memory = nets.next_memory(memory, nets_memory, action, reward, trial_done, ended)
            transition = Transition(
                LearnerStep(obs_l, mask_l, action, log_prob, value, reward, acted, extras, start),
                EnvStep(ended, critic_in, infos["returned_episode_returns"]),
            )
            return (env_state, obs, key, memory), transition

        carry = (state.env_state, state.obs, state.key, state.memory)
        (env_state, obs, key, memory), traj = jax.lax.scan(step, carry, None, c.num_steps)

        # CALCULATE ADVANTAGE
        obs_l = seats.stack(obs)
        critic_in = nets.critic_input(env_state.env_state, obs_l)
        _, last_value, *_ = nets.step(state.params, memory, obs_l, critic_in)
        adv, targets = gae(traj, last_value, c.gamma, c.gae_lambda)

        # UPDATE NETWORK
        # Two groups by where their env axis is: per-learner leaves [L, T, E, ...] (axis 2) and
        # per-env leaves [T, E, ...] with the rollout's starting memories [L, E, M] (axis 1).
        learner_first = lambda x: jnp.swapaxes(x, 0, 1)  # once, not once per epoch
        per_learner = jax.tree.map(learner_first, (traj.learner, adv, targets))
        memory0 = {k: state.memory[k] for k in ("actor", "critic") if k in state.memory}
        per_env = (traj.env, memory0)
        loss = functools.partial(ppo_loss, c, nets)

        def update_minibatch(carry, envs):
            params, opt_state = carry
            minibatch = (_take_envs(per_learner, envs, 2), *_take_envs(per_env, envs, 1))
            grads, stats = jax.grad(loss, has_aux=True)(params, *minibatch)
            updates, opt_state = self.tx.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), stats

        def update_epoch(carry, key):
            # Minibatches of whole envs: a shuffle of the envs cut into num_minibatches rows.
            envs = jax.random.permutation(key, c.num_envs).reshape(c.num_minibatches, -1)
            return jax.lax.scan(update_minibatch, carry, envs)

        key, key_epochs = jax.random.split(key)
        (params, opt_state), stats = jax.lax.scan(
            update_epoch,
            (state.params, state.opt_state),
            jax.random.split(key_epochs, c.update_epochs),
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
        done = traj.env.done.astype(jnp.float32)  # [T, E]
        count = done.sum()
        returns = traj.env.episode_return * done[..., None]
        per_agent = returns.sum((0, 1)) / jnp.maximum(count, 1.0)
        return {
            "episodes": count,
            "return/per_agent": per_agent,
            "return/mean": per_agent.mean(),
            "return/learners": per_agent[jnp.asarray(self.learners)].mean(),
            "reward/step": traj.learner.reward.mean(),
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
        c = self.config
        if self.recurrent:
            return RecurrentPolicy(
                self.actor,
                params["actor"],
                self.learners,
                c.shared_params,
                self.num_agents,
                self.num_actions,
                greedy,
                c.reward,
                c.reward_scale,
            )
        return make_policy_fn(
            self.actor, params["actor"], self.learners, c.shared_params, self.num_agents, greedy
        )

    def eval_env(self) -> ConfiguredEnv:
        if self._given_env is not None:
            return ConfiguredEnv(self._given_env)
        kwargs = {**self.config.env_kwargs, **self.config.eval_env_kwargs}
        return ConfiguredEnv(make_env(self.config.env, kwargs))

    def evaluate(self, params, env_config: dict, key: jax.Array, greedy: bool = False, mesh=None):
        """The env's metrics of the current policy on the evaluation configurations.

        Learning seats play the trained policy, the other seats their partner policy. Returns
        the env's ``episode_metrics`` with leading axes [C, episodes] (eval_grid) or [episodes].
        Not jitted here (``run_episodes`` runs with ``jit=False``): jit the caller. ``mesh``:
        the episodes spread over its devices (the same episodes; see ``run_episodes``).
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
            env, seats, key, self.config.eval_episodes, configs=grid, jit=False, mesh=mesh
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
