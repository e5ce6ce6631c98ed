"""The networks of one training run, the variant chosen once: an actor-critic adapter.

The trainer calls the same five functions whatever it trains: ``init``, ``initial_memory``,
``step`` (one rollout step of every learner), ``sequence`` (the rollout again, for the loss) and
``next_memory``. Which networks stand behind them is decided here, at construction:

- the actor is feed-forward or recurrent (RL^2, :mod:`dilemmax.agents.carry`);
- the critic reads the learner's observation (IPPO; recurrent too when the actor is) or the
  env's global state (MAPPO, feed-forward: the state is the whole game).

Each network is a :class:`_Head` applied for every learner at once (``jax.vmap`` over the
learner axis ``L``; over its parameters too unless they are shared). Shapes: ``L`` learners,
``E`` envs (``e`` in a minibatch), ``T`` rollout steps, ``N`` actions, ``M`` memory.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax

from dilemmax.agents import carry as rl2
from dilemmax.agents.networks import (
    NetworkSpec,
    make_critic,
    make_policy_net,
    make_recurrent,
    num_codes_of,
    recurrent_extras_size,
    unroll,
)
from dilemmax.envs.base import MultiAgentEnv


class _Head:
    """One network (actor or critic) for every learner.

    ``step(params, memory, x, extras, start, ids) -> (memory, out)`` with ``x`` [L, E, ...] (or
    the global state [E, D], shared by the learners); ``sequence(params, memory0, xs, extras,
    start, ids) -> out`` over a rollout ``xs`` [L, T, e, ...]. A feed-forward head ignores
    memory, extras and start (its memory is None).
    """

    def __init__(self, net, recurrent, shared, per_learner_input=True, squeeze=False):
        self.net = net
        self.recurrent = recurrent
        self.param_axis = None if shared else 0
        self.x_axis = 0 if per_learner_input else None
        # A recurrent critic is a RecurrentNet with one output: float32[..., 1] -> [...].
        self.squeeze = squeeze

    def init(self, key, x, extras, start, agent_id):
        if self.recurrent:
            return self.net.init(key, self.net.initial_memory(), x, extras, start, agent_id)
        return self.net.init(key, x, agent_id)

    def initial_memory(self, lane: tuple[int, ...]):
        return self.net.initial_memory(lane) if self.recurrent else None

    def step(self, params, memory, x, extras, start, ids):
        if not self.recurrent:
            if self.param_axis is None and self.x_axis == 0:
                # Shared parameters: one application over [L, B..., ...] (the layers take any
                # leading axes), so the gradient is one matmul, not one per learner summed.
                return None, self.net.apply(params, x, ids)
            out = jax.vmap(self.net.apply, in_axes=(self.param_axis, self.x_axis, 0))
            return None, out(params, x, ids)
        axes = (self.param_axis, 0, self.x_axis, 0, 0, 0)
        memory, out = jax.vmap(self.net.apply, in_axes=axes)(params, memory, x, extras, start, ids)
        return memory, out[..., 0] if self.squeeze else out

    def sequence(self, params, memory0, xs, extras, start, ids):
        if not self.recurrent:
            return self.step(params, None, xs, extras, start, ids)[1]
        fn = lambda p, m, o, ex, s, i: unroll(self.net, p, m, o, ex, s, i)[1]
        axes = (self.param_axis, 0, self.x_axis, 0, 0, 0)
        out = jax.vmap(fn, in_axes=axes)(params, memory0, xs, extras, start, ids)
        return out[..., 0] if self.squeeze else out


class ActorCritic:
    """Actor and critic of a run over ``env``'s learning seats (see the module docstring).

    Attributes:
        actor: the actor network (what ``TrainedPolicy.load`` rebuilds, via
            :func:`~dilemmax.agents.networks.make_policy_net`).
        recurrent: the actor keeps a memory (RL^2).
        centralised: the critic reads ``env.global_state`` (MAPPO).
    """

    def __init__(
        self,
        env: MultiAgentEnv,
        learners: list[int],
        spec: NetworkSpec,
        algo: str,
        shared: bool,
        recurrent: bool,
        gru_hidden: int,
    ):
        self.env = env
        self.learners = list(learners)
        self.num_agents = env.num_agents
        first = env.agents[self.learners[0]]
        self.obs_space = env.observation_space(first)
        self.num_actions = int(env.action_space(first).n)
        self.shared = shared
        self.recurrent = recurrent
        self.centralised = algo == "mappo"
        self.actor = make_policy_net(
            spec, self.obs_space, self.num_actions, self.num_agents, recurrent, gru_hidden
        )
        self._actor = _Head(self.actor, recurrent, shared)
        self._critic, self._critic_example = self._make_critic(spec, gru_hidden)

    def _make_critic(self, spec: NetworkSpec, gru_hidden: int):
        """(critic head, an input example) for this variant."""
        obs = self.obs_space
        if self.centralised:
            # Shapes only: an eager reset would run the env's reset op by op, compiling each
            # op as a program of its own (some 170 for open_harvest, at every MAPPO start).
            gs = jax.eval_shape(
                lambda key: self.env.global_state(self.env.reset(key)[1]), jax.random.PRNGKey(0)
            )
            codes = 256 if jnp.issubdtype(gs.dtype, jnp.integer) else 0
            if type(self.env).global_state is MultiAgentEnv.global_state:
                # The default global state concatenates the observations: scale them alike.
                codes = num_codes_of(obs)
            net = make_critic(spec, gs.shape, gs.dtype, self.num_agents, codes)
            return _Head(net, False, self.shared, False), jnp.zeros(gs.shape, gs.dtype)
        example = jnp.zeros(obs.shape, obs.dtype)
        if self.recurrent:
            net = make_recurrent(
                spec, obs.shape, obs.dtype, 1, self.num_agents, num_codes_of(obs), gru_hidden,
                output_scale=1.0,
            )  # fmt: skip
            return _Head(net, True, self.shared, squeeze=True), example
        net = make_critic(spec, obs.shape, obs.dtype, self.num_agents, num_codes_of(obs))
        return _Head(net, False, self.shared), example

    # ------------------------------------------------------------------ parameters, memory
    def init(self, key: jax.Array) -> dict:
        """{"actor": ..., "critic": ...}; leaves stacked on a leading L axis unless shared."""
        obs = jnp.zeros(self.obs_space.shape, self.obs_space.dtype)
        aid = jnp.int32(self.learners[0])
        extras = jnp.zeros((recurrent_extras_size(self.num_actions),), jnp.float32)
        start = jnp.bool_(True)

        def one(k):
            ka, kc = jax.random.split(k)
            return {
                "actor": self._actor.init(ka, obs, extras, start, aid),
                "critic": self._critic.init(kc, self._critic_example, extras, start, aid),
            }

        if self.shared:
            return one(key)
        # One learner after another, not vmapped: a vmapped orthogonal initialiser is a batched
        # QR, which can deadlock jaxlib 0.10's CPU runtime (dilemmax/xla_defaults.py).
        return jax.lax.map(one, jax.random.split(key, len(self.learners)))

    def initial_memory(self, num_envs: int) -> dict:
        """The recurrent carry of ``num_envs`` envs at their first episode start: network
        memories ``actor`` (and a recurrent critic's ``critic``) float32[L, E, M] and the step
        inputs of :mod:`dilemmax.agents.carry`. Empty for a feed-forward actor."""
        if not self.recurrent:
            return {}
        lane = (len(self.learners), num_envs)
        memory = {"actor": self._actor.initial_memory(lane)}
        if self._critic.recurrent:
            memory["critic"] = self._critic.initial_memory(lane)
        return {**memory, **rl2.initial_inputs(lane, lane[1:])}

    def learner_ids(self, batch_shape: tuple[int, ...]) -> jax.Array:
        """int32[L, *batch_shape]: every learner's agent index (the networks' id input)."""
        ids = jnp.asarray(self.learners, jnp.int32).reshape((-1,) + (1,) * len(batch_shape))
        return jnp.broadcast_to(ids, (len(self.learners), *batch_shape))

    def critic_input(self, env_states: Any, obs: jax.Array) -> jax.Array | None:
        """The global state [E, D] a centralised critic reads (None: the observations)."""
        if not self.centralised:
            return None
        return jax.vmap(self.env.global_state)(env_states)

    # ------------------------------------------------------------------ acting, learning
    def step(self, params, memory: dict, obs: jax.Array, critic_in):
        """One step of every learner in every env.

        Args:
            memory: the carry of :meth:`initial_memory`; obs: [L, E, *obs_shape];
            critic_in: the global state [E, D], or None (the critic reads ``obs``).

        Returns:
            (logits float32[L, E, N], value float32[L, E], the network memories after the step
            {"actor": ..., "critic": ...} ({} feed-forward), extras float32[L, E, N + 2] or
            float32[L, E, 0], start bool[L, E]).
        """
        ids = self.learner_ids(obs.shape[1:2])
        if self.recurrent:
            extras, start = rl2.step_inputs(memory, self.num_actions)
        else:
            extras = jnp.zeros((*obs.shape[:2], 0), jnp.float32)
            start = jnp.zeros(obs.shape[:2], bool)
        new_actor, logits = self._actor.step(
            params["actor"], memory.get("actor"), obs, extras, start, ids
        )
        x = obs if critic_in is None else critic_in
        new_critic, value = self._critic.step(
            params["critic"], memory.get("critic"), x, extras, start, ids
        )
        nets = {k: v for k, v in (("actor", new_actor), ("critic", new_critic)) if v is not None}
        return logits, value, nets, extras, start

    def sequence(self, params, memory0: dict, obs, critic_in, extras, start):
        """The rollout again, for the loss: (logits float32[L, T, e, N], value [L, T, e]).

        ``obs``, ``extras``, ``start``: [L, T, e, ...]; ``critic_in`` the global states
        [T, e, D] or None; ``memory0`` the network memories the rollout started from."""
        ids = self.learner_ids(obs.shape[1:3])
        logits = self._actor.sequence(
            params["actor"], memory0.get("actor"), obs, extras, start, ids
        )
        x = obs if critic_in is None else critic_in
        value = self._critic.sequence(
            params["critic"], memory0.get("critic"), x, extras, start, ids
        )
        return logits, value

    def next_memory(self, memory: dict, nets: dict, action, reward, trial_done, ended) -> dict:
        """The carry after a step; an episode that ended here restarts from a blank carry."""
        if not self.recurrent:
            return memory
        return {**nets, **rl2.next_inputs(action, reward, trial_done, ended)}


def optimiser(config) -> optax.GradientTransformation:
    """Clipped Adam, its rate annealed linearly to 0 over every minibatch step if asked."""
    lr = config.lr
    if config.anneal_lr:
        steps = config.num_updates * config.update_epochs * config.num_minibatches
        lr = optax.linear_schedule(config.lr, 0.0, steps)
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(lr, eps=1e-5))
