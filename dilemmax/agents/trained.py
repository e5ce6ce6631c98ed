"""Trained policies: a learned actor network behind the policy protocol.

:class:`TrainedPolicy` is a jittable ``policy(key, observation) -> action`` that reads only
``observation.array``, ``.mask`` and ``.agent_index``, so the arena seats it beside scripted and
language-model agents. Load one from a training run (``dilemmax train``) with
:meth:`TrainedPolicy.load`; it rebuilds the actor from the run's ``config.json`` and reads the
parameters out of the checkpoint without needing the trainer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import dilemmax
from dilemmax.agents.networks import NetworkSpec, make_actor, masked_categorical
from dilemmax.envs.rollout import Observation

_CHECKPOINT = re.compile(r"^ckpt_(\d+)\.msgpack$")


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
    slot = np.zeros((num_agents,), np.int32)
    for j, seat in enumerate(learners):
        slot[seat] = j
    slot = jnp.asarray(slot)

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


def find_checkpoint(path: str | Path) -> tuple[Path, Path]:
    """(checkpoint file, run folder) from a run folder (its newest checkpoint) or a file."""
    path = Path(path)
    if path.is_file():
        return path, path.parent.parent
    folder = path / "checkpoints"
    found = sorted(
        (int(m.group(1)), p)
        for p in (folder.iterdir() if folder.is_dir() else [])
        if (m := _CHECKPOINT.match(p.name))
    )
    if not found:
        raise FileNotFoundError(f"no checkpoint under {path}")
    return found[-1][1], path


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
    def load(cls, path: str | Path, seed: int = 0, greedy: bool = False) -> TrainedPolicy:
        """The policy of training seed ``seed`` from a run folder or one of its checkpoints."""
        ckpt, run_dir = find_checkpoint(path)
        config = json.loads((run_dir / "config.json").read_text())
        env = dilemmax.make(config["env"], **config.get("env_kwargs", {}))
        learners = config.get("learners")
        learners = list(range(env.num_agents)) if learners is None else learners
        first = env.agents[learners[0]]
        actor = make_actor(
            NetworkSpec.from_dict(config),
            env.observation_space(first),
            env.action_space(first).n,
            env.num_agents,
        )
        from dilemmax.train.checkpoint import read_raw  # checksum verified, file named if bad

        raw = read_raw(ckpt)
        stacked = raw["runner_state"]["params"]["actor"]  # leaves [seeds, ...]
        num_seeds = jax.tree.leaves(stacked)[0].shape[0]
        if not 0 <= seed < num_seeds:
            raise ValueError(f"seed {seed} not in this run's {num_seeds} seed(s)")
        params = jax.tree.map(lambda x: jnp.asarray(x[seed]), stacked)
        policy = cls(actor, params, learners, config["shared_params"], env.num_agents, greedy)
        policy.config = config
        policy.env_id = config["env"]
        return policy

    def __repr__(self) -> str:
        return f"TrainedPolicy(env={self.env_id!r}, greedy={self.greedy})"
