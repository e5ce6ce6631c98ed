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
from dilemmax.agents.checkpoint import CONFIG_FILE, CheckpointError, find_checkpoint, fit, read_raw
from dilemmax.agents.networks import (
    NetworkSpec,
    make_policy_net,
    masked_categorical,
    recurrent_extras_size,
)
from dilemmax.agents.transforms import resolve_learner_transform
from dilemmax.envs.option_spec import OptionError
from dilemmax.envs.registry import check_version, registered_id, split_version
from dilemmax.envs.rollout import Observation
from dilemmax.errors import UsageError


class TrainedRunError(UsageError, ValueError):
    """A run folder that cannot be seated: no usable config or checkpoint, a checkpoint of
    another network, or a run trained for another game than the one it is asked to play."""


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
        cls, path: str | Path, seed: int = 0, greedy: bool = False, env=None
    ) -> TrainedPolicy | RecurrentPolicy:
        """The policy of training seed ``seed`` from a run folder or one of its checkpoints
        (a :class:`RecurrentPolicy` when the run trained a recurrent actor).

        Everything is checked before the policy plays: the run's config.json, the checkpoint
        against the network that config builds (the same fit ``dilemmax evaluate`` restores
        through), and, given ``env`` (the env the policy is to play in), that env against the
        one the run trained on: its id, number of agents, the learners' observation shapes and
        numbers of actions. A mistake is a :class:`TrainedRunError` (a UsageError) naming the
        run folder and what does not match."""
        ckpt, run_dir = _find(path)
        config = _read_config(run_dir)
        trained = _trained_env(run_dir, config)
        # A run made under another version of its game is refused (docs/versions.md); a
        # config.json from before versions were recorded was made under version 0.
        check_version(
            config["env"], config.get("env_version", 0), f"run {run_dir}", config.get("env_kwargs")
        )
        learners = _learners(run_dir, config, trained.num_agents)
        if env is not None:
            check_same_game(run_dir, config, trained, env, learners)
        first = trained.agents[learners[0]]
        space = trained.observation_space(first)
        num_actions = int(trained.action_space(first).n)
        recurrent = bool(config.get("recurrent", False))
        shared = bool(config.get("shared_params", True))
        try:
            actor = make_policy_net(
                NetworkSpec.from_dict(config),
                space,
                num_actions,
                trained.num_agents,
                recurrent,
                config.get("gru_hidden", 64),
            )
        except (TypeError, ValueError, KeyError) as err:
            reason = f"its {CONFIG_FILE} builds no network ({err})"
            raise TrainedRunError(f"{run_dir}: {reason}") from None
        params = _actor_params(ckpt, actor, space, num_actions, recurrent, learners, shared, seed)
        n = trained.num_agents
        if recurrent:
            policy = RecurrentPolicy(
                actor,
                params,
                learners,
                shared,
                n,
                num_actions,
                greedy,
                config.get("reward", "individual"),
                config.get("reward_scale", 1.0),
            )
        else:
            policy = cls(actor, params, learners, shared, n, greedy)
            policy._fn = _with_learner_transform(run_dir, config, policy._fn)
        policy.config = config
        policy.env_id = config["env"]
        return policy

    def __repr__(self) -> str:
        return f"TrainedPolicy(env={self.env_id!r}, greedy={self.greedy})"


def run_config(path: str | Path) -> dict:
    """The training config of a run folder (or of the run one of its checkpoints is in),
    checked as :meth:`TrainedPolicy.load` checks it, without reading the checkpoint."""
    _, run_dir = _find(path)
    return _read_config(run_dir)


def _with_learner_transform(run_dir: Path, config: dict, fn):
    """``fn`` under the run's learner transform (it trained playing the transformed policy, so
    its scripted decisions are the transform's, not its untrained heads'); ``fn`` without one.
    A recurrent run has none (TrainConfig refuses the pair)."""
    try:
        transform = resolve_learner_transform(config.get("learner_transform"))
    except OptionError as err:
        raise TrainedRunError(f"{run_dir}: its {CONFIG_FILE}: {err}") from None
    return fn if transform is None else transform(fn)


# ----------------------------------------------------------------------------- loading checks
def _find(path: str | Path) -> tuple[Path, Path]:
    """(checkpoint, run folder) of a run folder or a checkpoint file, else TrainedRunError."""
    try:
        ckpt, run_dir = find_checkpoint(path)
    except (FileNotFoundError, OSError) as err:
        raise TrainedRunError(f"{path}: not a trained run ({err})") from None
    if not (run_dir / CONFIG_FILE).is_file():
        raise TrainedRunError(f"{run_dir}: no {CONFIG_FILE}, so not a run folder (dilemmax train)")
    return ckpt, run_dir


def _read_config(run_dir: Path) -> dict:
    """The run's config.json as a dict with the keys loading reads, each of the right kind."""
    try:
        config = json.loads((run_dir / CONFIG_FILE).read_text())
    except (OSError, ValueError) as err:  # unreadable, not UTF-8, not JSON
        raise TrainedRunError(f"{run_dir}: unreadable {CONFIG_FILE} ({err})") from None
    if not isinstance(config, dict):
        raise TrainedRunError(f"{run_dir}: its {CONFIG_FILE} is not a JSON object")
    kinds = {"env": str, "env_kwargs": dict, "learners": (list, type(None))}
    for key, kind in kinds.items():
        if (key == "env" or key in config) and not isinstance(config.get(key), kind):
            shown = repr(config.get(key))[:60]
            raise TrainedRunError(
                f"{run_dir}: {CONFIG_FILE} key {key!r} is {shown}, not a "
                f"{getattr(kind, '__name__', 'list or null')}"
            )
    return config


def _trained_env(run_dir: Path, config: dict):
    """The env the run trained on, built from its config (an unknown id or a bad option named)."""
    try:
        return dilemmax.make(config["env"], **config.get("env_kwargs", {}))
    except (ValueError, TypeError) as err:  # OptionError is a ValueError
        reason = f"its {CONFIG_FILE} names no playable env ({err})"
        raise TrainedRunError(f"{run_dir}: {reason}") from None


def _learners(run_dir: Path, config: dict, num_agents: int) -> list[int]:
    learners = config.get("learners")
    if learners is None:
        return list(range(num_agents))
    ok = learners and all(isinstance(i, int) and 0 <= i < num_agents for i in learners)
    if not ok or len(set(learners)) != len(learners):
        raise TrainedRunError(
            f"{run_dir}: learners {learners} are not distinct seats of its "
            f"{num_agents}-agent {config['env']}"
        )
    return list(learners)


def _env_id(env) -> str:
    """The registered id of ``env``'s class (its class name if unregistered). An env built on
    the games names its id itself (``registered_as``: every scenario env is ``scenarios``,
    whichever set built it), so a run trained on scenarios sits in any scenario env."""
    return registered_id(env) or type(getattr(env, "inner", env)).__name__


def check_same_game(run_dir: Path, config: dict, trained, env, learners: list[int]) -> None:
    """Refuses to seat a run in ``env`` unless it is the game the run trained on, as far as its
    network sees: the env id, the number of agents (the agent-id input and the learners'
    seats) and every learner's observation shape and dtype and number of actions."""
    where = f"{run_dir} cannot play this game"
    played = _env_id(env)
    if played != split_version(config["env"])[0]:
        raise TrainedRunError(f"{where}: it was trained on {config['env']}, not {played}")
    if env.num_agents != trained.num_agents:
        raise TrainedRunError(
            f"{where}: it was trained with {trained.num_agents} agents (learners {learners}), "
            f"this {played} has {env.num_agents}; play it with its own env options "
            f"({config.get('env_kwargs') or 'the defaults'})"
        )
    for seat in learners:
        ours, theirs = trained.agents[seat], env.agents[seat]
        mine, other = trained.observation_space(ours), env.observation_space(theirs)
        if (tuple(mine.shape), mine.dtype) != (tuple(other.shape), other.dtype):
            raise TrainedRunError(
                f"{where}: {ours} saw observations {mine.dtype}{tuple(mine.shape)}, here "
                f"{other.dtype}{tuple(other.shape)}; play it with its own env options "
                f"({config.get('env_kwargs') or 'the defaults'})"
            )
        n, m = int(trained.action_space(ours).n), int(env.action_space(theirs).n)
        if n != m:
            raise TrainedRunError(f"{where}: {ours} had {n} actions, here {m}")


def _actor_params(ckpt, actor, space, num_actions, recurrent, learners, shared, seed):
    """Seed ``seed``'s actor parameters from ``ckpt``, fitted to the network the config builds
    (checkpoint.fit, as evaluation restores a run): a checkpoint of another network is named."""
    try:
        raw = read_raw(ckpt)  # checksum verified, the file named if bad
    except OSError as err:
        raise TrainedRunError(f"{ckpt}: cannot be read ({err.strerror})") from None
    stacked = raw["runner_state"].get("params", {})
    stacked = stacked.get("actor") if isinstance(stacked, dict) else None
    leaves = jax.tree.leaves(stacked) if isinstance(stacked, dict) else []
    first = np.asarray(leaves[0]) if leaves else None
    if first is None or first.ndim == 0:
        raise CheckpointError(f"{ckpt}: holds no actor parameters (not a training checkpoint)")
    num_seeds = first.shape[0]
    if not isinstance(seed, int) or not 0 <= seed < num_seeds:
        raise TrainedRunError(f"{ckpt}: seed {seed!r} not in this run's {num_seeds} seed(s)")
    try:  # shapes only: a network option the builder accepts may still fail here
        template = jax.eval_shape(lambda: _init_actor(actor, space, num_actions, recurrent))
    except (TypeError, ValueError, KeyError) as err:
        reason = f"its run's {CONFIG_FILE} builds no network ({err})"
        raise TrainedRunError(f"{ckpt}: {reason}") from None
    if not shared:  # one parameter set per learner, stacked
        template = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct((len(learners), *x.shape), x.dtype), template
        )
    one = jax.tree.map(lambda x: np.asarray(x)[seed], stacked)
    return fit(template, one, f"{ckpt} (its actor, for the network of its {CONFIG_FILE})")


def _init_actor(actor, space, num_actions: int, recurrent: bool):
    obs = jnp.zeros(space.shape, space.dtype)
    if not recurrent:
        return actor.init(jax.random.key(0), obs, jnp.int32(0))
    extras = jnp.zeros((recurrent_extras_size(num_actions),), jnp.float32)
    return actor.init(jax.random.key(0), actor.initial_memory(), obs, extras, jnp.bool_(True), 0)
