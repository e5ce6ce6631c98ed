"""Who acts in which seat of a training run: learners and their scripted partners.

The learning seats play the trained policy, possibly through a ``learner_transform`` (a policy
transformer that scripts some of the learner's steps, say the moral-hazard follow-up); the other
seats play the partner policy its seat spec names (a scripted name, ``trained:<run>`` or
``zoo:<game>/<population>``: any seat that acts inside JAX). The
trainer asks :meth:`Seats.actions` for every seat's action of a step and learns nothing else
about the seats.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from dilemmax.agents.transforms import resolve_learner_transform
from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.rollout import Observation, is_carried
from dilemmax.envs.seat_spec import resolve_seat
from dilemmax.errors import UsageError
from dilemmax.train.config import TrainConfig


def resolve_policy(env: MultiAgentEnv, spec: str) -> Callable:
    """The partners' policy from its seat spec (:mod:`dilemmax.envs.seat_spec`): a scripted
    name, ``trained:<run>`` or ``zoo:<game>/<population>``, loaded against ``env``. A seat that
    cannot act inside the jitted update (a model) or that keeps a memory the trainer does not
    carry (a recurrent run) is refused in one line."""
    policy = resolve_seat(spec, env, where="training partners")
    if is_carried(policy):
        raise UsageError(
            f"partner_policy {spec!r}: a recurrent policy keeps a memory that training partners "
            "do not carry; seat a feed-forward run"
        )
    return policy


def _batched(policy: Callable, seat: int, key, obs, mask, env_states) -> jax.Array:
    """int32[E]: ``policy`` for ``seat`` in every env, one key per env."""

    def one(k, o, m, s):
        return policy(k, Observation(o, m, jnp.int32(seat), s)).astype(jnp.int32)

    keys = jax.random.split(key, obs.shape[0])
    return jax.vmap(one)(keys, obs, mask, env_states)


class Seats:
    """The seats of ``env`` under ``config``.

    Attributes:
        learners: the learning seats (``config.learners``, default every seat).
        partners: the other seats, which play ``partner_fn``.
        transform: the learner transform, or None.
    """

    def __init__(self, env: MultiAgentEnv, config: TrainConfig):
        self.agents = list(env.agents)
        learners = config.learners if config.learners is not None else range(env.num_agents)
        self.learners = [int(i) for i in learners]
        if not self.learners or any(i < 0 or i >= env.num_agents for i in self.learners):
            raise ValueError(f"learners {self.learners} must be seats of 0..{env.num_agents - 1}")
        self.partners = [i for i in range(env.num_agents) if i not in self.learners]
        self.partner_fn = resolve_policy(env, config.partner_policy) if self.partners else None
        self.transform = resolve_learner_transform(config.learner_transform)
        first = env.observation_space(self.agents[self.learners[0]])
        for i in self.learners:
            if tuple(env.observation_space(self.agents[i]).shape) != tuple(first.shape):
                raise ValueError("learning seats must share one observation shape")

    @property
    def learner_agents(self) -> list[str]:
        return [self.agents[i] for i in self.learners]

    def stack(self, per_agent: dict) -> jax.Array:
        """[L, E, ...]: the learners' entries of an agent -> [E, ...] dict."""
        return jnp.stack([per_agent[a] for a in self.learner_agents])

    def actions(self, key, action, obs: dict, masks: dict, env_states) -> tuple[dict, jax.Array]:
        """(agent -> int32[E] for every seat, acted float32[L, E]).

        ``action`` int32[L, E] is what the learners sampled; ``acted`` is 1 where that action is
        played and 0 where the learner transform scripted the step (no policy gradient there).
        """
        acted = jnp.ones(action.shape, jnp.float32)
        if self.transform is not None:
            action, acted = self._transformed(key, action, obs, masks, env_states)
        actions = {a: action[j] for j, a in enumerate(self.learner_agents)}
        keys = jax.random.split(key, max(1, len(self.partners)))
        for k, seat in zip(keys, self.partners, strict=False):
            agent = self.agents[seat]
            partner = self.partner_fn
            actions[agent] = _batched(partner, seat, k, obs[agent], masks[agent], env_states)
        return actions, acted

    def _transformed(self, key, action, obs, masks, env_states):
        """Learner actions after the transform: a scripted step replaces the sampled action."""
        scripted = self.transform(lambda k, o: jnp.int32(-1))  # -1: "the learner chooses"
        out, acted = [], []
        for j, seat in enumerate(self.learners):
            agent = self.agents[seat]
            k = jax.random.fold_in(key, seat)
            chosen = _batched(scripted, seat, k, obs[agent], masks[agent], env_states)
            own = chosen == -1
            out.append(jnp.where(own, action[j], chosen))
            acted.append(own.astype(jnp.float32))
        return jnp.stack(out), jnp.stack(acted)
