"""Trained policies: a learned actor network behind the policy protocol.

:class:`TrainedPolicy` is a jittable ``policy(key, observation) -> action`` that reads only
``observation.array``, ``.mask`` and ``.agent_index``, so the arena seats it beside scripted and
language-model agents. Load one from a training run (``dilemmax train``) with
:meth:`TrainedPolicy.load`; it rebuilds the actor from the run's ``config.json`` and reads the
parameters out of the checkpoint without needing the trainer.

A recurrent (RL^2) run loads as a :class:`RecurrentPolicy`: it keeps a memory between steps, so
it follows the carried-policy protocol of :mod:`dilemmax.envs.rollout` (``initial_carry``,
``step``, ``record``); the rollout and the arena carry that memory for it, within an episode and
across its trials.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import dilemmax
from dilemmax.agents import carry as rl2
from dilemmax.agents.checkpoint import CONFIG_FILE, find_checkpoint, read_raw
from dilemmax.agents.networks import NetworkSpec, make_policy_net, masked_categorical
from dilemmax.envs.rollout import Observation


def make_policy_fn(
    actor, params, learners: Sequence[int], shared: bool, num_agents: int, greedy: bool = False
):
    """A jittable policy over ``actor``.

    Args:
        params: the actor's parameters; if not ``shared``, stacked per learner on a leading axis
            in the order of ``learners``.
        learners: the seats the parameters were trained for (a seat outside them uses the
            first learner's parameters, and its own agent index as the id input).
        greedy: play the most likely legal action instead of sampling.
    """
    slot = _slot_of(learners, num_agents)

    def policy(key: jax.Array, observation: Observation) -> jax.Array:
        agent_index = jnp.asarray(observation.agent_index, jnp.int32)
        p = params
        if not shared:
            p = jax.tree.map(lambda x: x[slot[agent_index]], params)
        logits = actor.apply(p, observation.array, agent_index)
        dist = masked_categorical(logits, observation.mask)
        if greedy:
            return dist.mode().astype(jnp.int32)
        return dist.sample(seed=key).astype(jnp.int32)

    return policy


def _slot_of(learners: Sequence[int], num_agents: int) -> jax.Array:
    """int32[num_agents]: the parameter slot of every seat (seats outside ``learners``: 0)."""
    slot = np.zeros((num_agents,), np.int32)
    for j, seat in enumerate(learners):
        slot[seat] = j
    return jnp.asarray(slot)


class RecurrentPolicy:
    """A learned recurrent actor behind the carried-policy protocol (jittable).

    The carry of one seat (a dict of arrays): ``memory`` float32[M], ``prev_action`` int32[]
    (-1 before the first step), ``prev_reward`` float32[], ``trial_done`` bool[] and ``start``
    bool[]. ``initial_carry()`` is the carry at an episode start; ``step(carry, key, observation)
    -> (action, carry)`` acts; ``record(carry, seat, action, rewards, trial_done) -> carry``
    stores what the step brought (``rewards`` float32[A] of all seats: the policy turns them into
    the reward it was trained on, its own or the team mean, times ``reward_scale``).

    Attributes:
        config: the training config (dict) the parameters come from; env_id: its env.
    """

    jittable = True
    recurrent = True

    def __init__(
        self,
        net,
        params: Any,
        learners,
        shared: bool,
        num_agents: int,
        num_actions: int,
        greedy: bool = False,
        reward: str = "individual",
        reward_scale: float = 1.0,
    ):
        self.net = net
        self.params = params
        self.learners = list(learners)
        self.shared = bool(shared)
        self.num_actions = int(num_actions)
        self.greedy = bool(greedy)
        self.reward = reward
        self.reward_scale = float(reward_scale)
        self.config: dict = {}
        self.env_id: str = ""
        self._slot = _slot_of(self.learners, num_agents)

    def initial_carry(self) -> dict:
        return {"memory": self.net.initial_memory(), **rl2.initial_inputs()}

    def step(self, carry: dict, key: jax.Array, observation: Observation):
        agent_index = jnp.asarray(observation.agent_index, jnp.int32)
        p = self.params
        if not self.shared:
            p = jax.tree.map(lambda x: x[self._slot[agent_index]], p)
        extras, start = rl2.step_inputs(carry, self.num_actions)
        memory, logits = self.net.apply(
            p, carry["memory"], observation.array, extras, start, agent_index
        )
        dist = masked_categorical(logits, observation.mask)
        action = dist.mode() if self.greedy else dist.sample(seed=key)
        return action.astype(jnp.int32), {**carry, "memory": memory, "start": jnp.bool_(False)}

    def record(self, carry: dict, seat, action, rewards, trial_done) -> dict:
        own = rl2.reward_signal(rewards, self.reward, self.reward_scale)[seat]
        # Within an episode (the driver starts the next one from initial_carry).
        return {**carry, **rl2.next_inputs(action, own, trial_done, jnp.bool_(False))}

    def __call__(self, key: jax.Array, observation: Observation) -> jax.Array:
        raise TypeError(
            "a RecurrentPolicy keeps a memory: play it through dilemmax.envs.rollout "
            "(run_episodes) or the Arena, which carry it, not as a stateless policy"
        )

    def __repr__(self) -> str:
        return f"RecurrentPolicy(env={self.env_id!r}, greedy={self.greedy})"


class TrainedPolicy:
    """A learned policy: ``policy(key, observation) -> int32 action`` (jittable).

    Attributes:
        config: the training config (dict) the parameters come from.
        env_id: the env the policy was trained on.
    """

    jittable = True

    def __init__(self, actor, params: Any, learners, shared: bool, num_agents: int, greedy=False):
        self.actor = actor
        self.params = params
        self.learners = list(learners)
        self.shared = bool(shared)
        self.greedy = bool(greedy)
        self.config: dict = {}
        self.env_id: str = ""
        self._fn = make_policy_fn(actor, params, self.learners, self.shared, num_agents, greedy)

    def __call__(self, key: jax.Array, observation: Observation) -> jax.Array:
        return self._fn(key, observation)

    @classmethod
    def load(
        cls, path: str | Path, seed: int = 0, greedy: bool = False
    ) -> TrainedPolicy | RecurrentPolicy:
        """The policy of training seed ``seed`` from a run folder or one of its checkpoints
        (a :class:`RecurrentPolicy` when the run trained a recurrent actor)."""
        ckpt, run_dir = find_checkpoint(path)
        config = json.loads((run_dir / CONFIG_FILE).read_text())
        env = dilemmax.make(config["env"], **config.get("env_kwargs", {}))
        learners = config.get("learners")
        learners = list(range(env.num_agents)) if learners is None else learners
        first = env.agents[learners[0]]
        space = env.observation_space(first)
        num_actions = int(env.action_space(first).n)
        recurrent = bool(config.get("recurrent", False))
        actor = make_policy_net(
            NetworkSpec.from_dict(config),
            space,
            num_actions,
            env.num_agents,
            recurrent,
            config.get("gru_hidden", 64),
        )
        raw = read_raw(ckpt)  # checksum verified, the file named if bad
        stacked = raw["runner_state"]["params"]["actor"]  # leaves [seeds, ...]
        num_seeds = jax.tree.leaves(stacked)[0].shape[0]
        if not 0 <= seed < num_seeds:
            raise ValueError(f"seed {seed} not in this run's {num_seeds} seed(s)")
        params = jax.tree.map(lambda x: jnp.asarray(x[seed]), stacked)
        if recurrent:
            policy = RecurrentPolicy(
                actor,
                params,
                learners,
                config["shared_params"],
                env.num_agents,
                num_actions,
                greedy,
                config.get("reward", "individual"),
                config.get("reward_scale", 1.0),
            )
        else:
            policy = cls(actor, params, learners, config["shared_params"], env.num_agents, greedy)
        policy.config = config
        policy.env_id = config["env"]
        return policy

    def __repr__(self) -> str:
        return f"TrainedPolicy(env={self.env_id!r}, greedy={self.greedy})"
