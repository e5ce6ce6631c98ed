"""Batched play: many episodes at once, language-model seats beside scripted and trained ones.

``num_envs`` environments step together in one jitted ``vmap(env.step_env)``. At each step:

1. every jittable seat (scripted, trained) of every env acts inside JAX, in one call;
2. every model seat of every live env asks the game's text protocol for its turn; the prompts
   of one model are sent as one batch (concurrent HTTP requests, or one batched ``generate``);
   a seat whose turn is :class:`~dilemmax.envs.text.NoReply` is not called;
3. the envs step; each model seat's memory sees the transition (``after_step``), and the
   reflect prompts it returns (a trial-end lesson) are sent, again as one batch, before the
   next turn.

The waves run the episode driver's batched loop (:class:`dilemmax.envs.loop.EpisodeLoop`): the
same key schedule, jobs, seat loop and action check as :func:`dilemmax.envs.rollout.run_episode`,
with the model seats (steps 2 and 3) as its hook. So with only jittable seats batched play
reproduces the JAX path's episodes, and every episode's metrics come from the same
``env.episode_metrics`` as scripted and trained play. Every call goes to a
:class:`~dilemmax.llm.transcript.Transcript` as it returns; with ``resume`` the recorded calls
are replayed and only the missing ones reach the model.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.agents.policy import is_jittable
from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.loop import EpisodeLoop, Played
from dilemmax.envs.registry import build_key, options_key
from dilemmax.envs.replay import episode_start
from dilemmax.envs.rollout import (  # episode_jobs: re-exported, batched play's users import it
    EpisodeJob,
    episode_jobs,
    num_configs_of,
)
from dilemmax.envs.text import TextProtocol
from dilemmax.llm.model_seats import ModelSeats
from dilemmax.llm.policy import CallStats, LLMPolicy
from dilemmax.llm.transcript import Transcript


@dataclass(frozen=True)
class Seat:
    """A policy and the name it is reported under (``scripted:greedy``, ``openai:<model>``)."""

    name: str
    policy: Any
    # Text-protocol options of this seat alone (``role=cooperator`` in its spec), on top of the
    # run's ``--protocol`` options; empty for most seats.
    protocol_options: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_model(self) -> bool:
        return isinstance(self.policy, LLMPolicy)


@dataclass
class PlayResult:
    """What a batched run produced.

    Attributes:
        metrics: metric -> array [E, ...] in episode order (``env.episode_metrics``).
        episodes: one dict per episode: id, part (rotation / condition group), config index and
            name, seating (agent -> seat name), played steps, truncated.
        stats: seat name -> :class:`CallStats` of its model calls (replays included).
        wall_s: wall time of the run.
        infos: with ``keep_steps``: the env's per-step ``infos``, each leaf [E, T, ...] with T =
            ``env.max_steps`` (steps after an episode's end repeat its last); else empty.
        valid: with ``keep_steps``: bool[E, T], the steps each episode played; else None.
        replies: with ``keep_steps``: per episode, one dict per act reply (replayed ones too) in
            call order: step, agent, the parsed fields, valid; else empty.
    """

    metrics: dict[str, np.ndarray]
    episodes: list[dict] = field(default_factory=list)
    stats: dict[str, CallStats] = field(default_factory=dict)
    wall_s: float = 0.0
    infos: dict[str, Any] = field(default_factory=dict)
    valid: np.ndarray | None = None
    replies: list[list[dict]] = field(default_factory=list)


def concatenate(results: Sequence[PlayResult]) -> PlayResult:
    """Several results as one, episodes in order (waves; a part's rotations; a run's shards);
    call counts summed."""
    played = [r for r in results if r.episodes]
    first = played[0] if played else PlayResult({})
    metrics = {k: np.concatenate([r.metrics[k] for r in played]) for k in first.metrics}
    infos = jax.tree.map(lambda *xs: np.concatenate(xs), *[r.infos for r in played]) if (
        played and first.infos) else {}  # fmt: skip
    valid = np.concatenate([r.valid for r in played]) if first.valid is not None else None
    stats: dict[str, CallStats] = {}
    for result in results:
        for seat, s in result.stats.items():
            stats[seat] = stats.get(seat, CallStats()).merged(s)
    return PlayResult(
        metrics,
        [e for r in results for e in r.episodes],
        stats,
        sum(r.wall_s for r in results),
        infos,
        valid,
        [replies for r in results for replies in r.replies],
    )


def rotate_seats(seats: Sequence[Seat], shift: int) -> list[Seat]:
    """Seat ``i`` gets ``seats[(i - shift) % n]``: over n shifts every policy sits everywhere."""
    n = len(seats)
    return [seats[(i - shift) % n] for i in range(n)]


CALL_ERROR_POLICIES = ("stop", "invalid")


def seat_protocols(
    env: MultiAgentEnv,
    seats: Sequence[Seat],
    run_options: Mapping[str, Any],
    made: dict[tuple, TextProtocol],
) -> dict[str, TextProtocol]:
    """agent -> the text protocol of that model seat: ``env.text_protocol(**{**run_options,
    **seat.protocol_options})``, one instance per distinct option set (``made`` holds them, so
    several rotations reuse them). A protocol option such as ``role`` is thereby per seat without
    the protocol knowing about seats. Raises what ``text_protocol`` raises for an option it
    refuses (TypeError / ValueError), or NotImplementedError for a game without one."""
    return {
        agent: protocol_with(env, {**run_options, **seat.protocol_options}, made)
        for agent, seat in zip(env.agents, seats, strict=True)
        if seat.is_model
    }


def protocol_with(env: MultiAgentEnv, options: Mapping[str, Any], made: dict) -> TextProtocol:
    """``env.text_protocol(**options)``, built once per distinct ``options`` (kept in ``made``)."""
    key = options_key(options)
    if key not in made:
        made[key] = env.text_protocol(**options)
    return made[key]


# --------------------------------------------------------------------------- compiled steps
_LOOPS: dict[tuple, EpisodeLoop] = {}


def _loop_for(env: MultiAgentEnv, seats: Sequence[Seat], num_steps: int) -> EpisodeLoop:
    """The driver's batched loop shared by every run with an env made alike (``build_key``: the
    same game and options, so a sweep's sessions, each building its env afresh, compile it
    once), the same jittable seats and length (a model seat is a placeholder there, so which
    model it is does not matter)."""
    for seat in seats:
        if not seat.is_model and not is_jittable(seat.policy):
            raise TypeError(f"seat {seat.name!r} is neither a model nor a jittable policy")
    key = (build_key(env), tuple(None if s.is_model else id(s.policy) for s in seats), num_steps)
    cached = _LOOPS.get(key)
    if cached is None:
        if len(_LOOPS) >= 32:  # a long-lived process building many envs
            _LOOPS.clear()
        jax_seats = [None if s.is_model else s.policy for s in seats]
        # The loop keeps its env and policies alive, so the ids in its key stay theirs.
        cached = _LOOPS[key] = EpisodeLoop(env, jax_seats, num_steps, batched=True)
    return cached


def _stacked_keys(keys: Sequence[jax.Array]) -> jax.Array:
    """The keys as one key array, stacked on the host: ``jnp.stack`` would compile a program
    with one operand per key, once per wave size (10 s for a 1,140-episode sweep on a CPU)."""
    data = np.stack([np.asarray(jax.random.key_data(key)) for key in keys])
    if not jnp.issubdtype(keys[0].dtype, jax.dtypes.prng_key):  # legacy uint32 keys stay so
        return jax.device_put(data)
    return jax.random.wrap_key_data(data, impl=jax.random.key_impl(keys[0]))


# --------------------------------------------------------------------------- the runner
class BatchedPlay:
    """Plays episodes of ``env`` in waves of ``num_envs`` parallel environments.

    Args:
        env: a dilemmax env.
        seats: one :class:`Seat` per agent, in ``env.agents`` order.
        protocol: the game's text protocol (default ``env.text_protocol()``).
        num_envs: environments stepped together (a wave); the last wave is padded with inactive
            copies so every wave runs the same compiled programs.
        max_steps: stop each episode after this many steps (default ``env.max_steps``); a
            truncated episode's metrics cover the steps played.
        transcript: where calls are recorded and replayed from (None: not recorded).
        progress: a tqdm bar (or None) updated with calls, tokens, errors and retries.
        on_call_error: what a call that failed after all its retries (the server never gave a
            reply) does. ``"stop"`` (default): the run stops with :class:`CallsFailed` once the
            step's other calls are in; the failed call is not written, so ``--resume`` asks it
            again and the episode goes on as if nothing happened. ``"invalid"``: the call is
            recorded with its error and the seat plays the game's invalid move (the move a
            malformed reply gets), so the run always finishes.
        protocols: agent -> that model seat's own protocol instance (:func:`seat_protocols`),
            used for its turns, parses and memory; agents missing from it use ``protocol``. A
            seat with ``protocol_options`` needs its instance here unless ``protocol`` is the
            default, which then builds ``env.text_protocol(**seat.protocol_options)``.
        keep_steps: also give each episode's per-step infos and act replies (PlayResult).
        budget: the run's spending limits (:class:`~dilemmax.llm.limits.Budget`), asked before
            each batch of calls; a limit reached raises
            :class:`~dilemmax.llm.limits.LimitReached` and :attr:`finished` holds the waves
            played to the end.
        cache: the run's response cache (:class:`~dilemmax.llm.cache.RunCache`; None: off).
    """

    def __init__(
        self,
        env: MultiAgentEnv,
        seats: Sequence[Seat],
        protocol: TextProtocol | None = None,
        num_envs: int = 16,
        max_steps: int | None = None,
        transcript: Transcript | None = None,
        progress=None,
        on_call_error: str = "stop",
        protocols: Mapping[str, TextProtocol] | None = None,
        keep_steps: bool = False,
        budget=None,
        cache=None,
    ):
        if on_call_error not in CALL_ERROR_POLICIES:
            raise ValueError(
                f"on_call_error must be one of {CALL_ERROR_POLICIES}, got {on_call_error!r}"
            )
        self.on_call_error = on_call_error
        if len(seats) != env.num_agents:
            raise ValueError(f"got {len(seats)} seats for {env.num_agents} agents")
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.env = env
        self.seats = list(seats)
        default_protocol = protocol is None
        if protocol is None and any(s.is_model for s in seats):
            protocol = env.text_protocol()
        self.protocol = protocol
        self.protocols = self._protocols_of_seats(protocols or {}, default_protocol)
        self.num_envs = int(num_envs)
        self.num_steps = env.max_steps if max_steps is None else min(int(max_steps), env.max_steps)
        if self.num_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.transcript = transcript
        self.progress = progress
        self.keep_steps = bool(keep_steps)
        self.budget, self.cache = budget, cache
        self.finished: list[PlayResult] = []  # the waves of the latest run() played to the end
        self.stats: dict[str, CallStats] = {}
        self._loop = _loop_for(env, self.seats, self.num_steps)
        self._model_agents = [a for a, s in zip(env.agents, self.seats, strict=True) if s.is_model]

    def _protocols_of_seats(self, given, default_protocol: bool) -> dict[str, TextProtocol]:
        """agent -> protocol of each model seat: ``given``, else the instance of the seat's own
        options (over the default protocol only), else the run's ``protocol``."""
        out, made = {}, {options_key({}): self.protocol}
        for agent, seat in zip(self.env.agents, self.seats, strict=True):
            if not seat.is_model:
                continue
            if agent in given:
                out[agent] = given[agent]
            elif seat.protocol_options and not default_protocol:
                raise ValueError(
                    f"seat {seat.name!r} at {agent} has protocol options "
                    f"{dict(seat.protocol_options)}: pass its protocol in protocols= "
                    "(seat_protocols builds them)"
                )
            else:
                out[agent] = protocol_with(self.env, seat.protocol_options, made)
        return out

    # ------------------------------------------------------------------ public
    def run(
        self,
        key: jax.Array,
        num_episodes: int,
        configs=None,
        part="main",
        select: Collection[int] | None = None,
    ) -> PlayResult:
        """``num_episodes`` episodes (per configuration when ``configs`` is batched [C, ...]).

        ``part`` names this run in call keys (a rotation, a condition group), so several parts
        share one transcript. ``select`` (positions in :func:`episode_jobs`' list) plays only
        those episodes (a shard of a sweep): each keeps its key, its call keys and its env slot
        (the slot it has when every episode is played), so its calls and metrics are those of
        the full run. Given, the result may hold no episode (and then no metrics).
        """
        if num_episodes < 1:
            raise ValueError(f"num_episodes must be >= 1, got {num_episodes}")
        start = time.perf_counter()
        jobs = episode_jobs(key, num_episodes, num_configs_of(configs))
        slotted = [(p % self.num_envs, job) for p, job in enumerate(jobs)]
        if select is not None:
            chosen = set(select)
            slotted = [item for p, item in enumerate(slotted) if p in chosen]
        per_wave = self.finished = []
        memories: dict[tuple[int, str], Any] = {}
        for first in range(0, len(slotted), self.num_envs):
            wave = slotted[first : first + self.num_envs]
            per_wave.append(self._play_wave(wave, configs, part, memories))
        result = concatenate(per_wave)
        result.stats, result.wall_s = dict(self.stats), time.perf_counter() - start
        return result

    def played_so_far(self) -> PlayResult:
        """The waves of the latest :meth:`run` played to the end, with every call counted (those
        of a wave a spending limit stopped too): what a stopped run reports."""
        result = concatenate(self.finished)
        result.stats = dict(self.stats)
        return result

    # ------------------------------------------------------------------ one wave
    def _play_wave(self, slotted: list[tuple[int, EpisodeJob]], configs, part: str, memories):
        """One wave: ``slotted`` holds (env slot of the full run, job) per env of the batch."""
        wave = [job for _, job in slotted]
        slots = [slot for slot, _ in slotted]
        n = len(wave)
        padded = wave + [wave[0]] * (self.num_envs - n)  # inactive copies keep shapes fixed
        keys = _stacked_keys([job.key for job in padded])
        batch_configs = None  # each episode samples its own configuration
        if configs is not None:
            index = jnp.asarray([job.config_index for job in padded])
            batch_configs = jax.tree.map(lambda x: x[index], configs)
        memory = self._episode_memories(wave, memories)
        replies = [[] for _ in wave] if self.keep_steps else None
        hook = ModelSeats(self, wave, slots, part, memory, replies) if self._model_agents else None
        played = self._loop.play(keys, batch_configs, np.arange(self.num_envs) < n, hook)
        result = self._finish(wave, part, played, memory, memories, configs)
        if self.keep_steps:
            result.infos = jax.tree.map(lambda x: np.asarray(x)[:n], played.rollout.infos)
            result.valid = np.asarray(played.rollout.valid)[:n]
            result.replies = replies
        return result

    def _episode_memories(self, wave, memories) -> dict[tuple[int, str], Any]:
        """Each env slot's model agents carry their memory from the slot's previous episode."""
        memory = {}
        for e in range(len(wave)):
            for agent in self._model_agents:
                old = memories.get((e, agent), _MISSING)
                protocol = self.protocols[agent]
                memory[(e, agent)] = (
                    protocol.new_memory(agent)
                    if old is _MISSING
                    else protocol.next_memory(old, agent)
                )
        return memory

    def _update_progress(self) -> None:
        if self.progress is None:
            return
        total = CallStats()
        for s in self.stats.values():
            total = total.merged(s)
        self.progress.set_postfix(
            calls=total.calls,
            tokens=total.prompt_tokens + total.completion_tokens,
            errors=total.errors,
            retries=total.retries,
            refresh=False,
        )

    # ------------------------------------------------------------------ end of a wave
    def _finish(self, wave, part, played: Played, memory, memories, configs=None):
        env, n = self.env, len(wave)
        metrics = {k: v[:n] for k, v in played.metrics.items()}
        host_final = jax.device_get(played.final_state) if self._model_agents else None
        for e in range(n):
            for agent in self._model_agents:
                final = _index(host_final, e)
                self.protocols[agent].after_episode(memory[(e, agent)], agent, final)
                memories[(e, agent)] = memory[(e, agent)]
        episodes = []
        ends = np.asarray(played.rollout.dones["__all__"])
        for e, job in enumerate(wave):
            steps = int(played.played[e])
            info = {
                "id": f"{part}|e{job.episode}",
                "part": part,
                "episode": job.episode,
                "config_index": job.config_index,
                "seats": {a: s.name for a, s in zip(env.agents, self.seats, strict=True)},
                "steps": steps,
                "truncated": not bool(ends[e, max(steps - 1, 0)]),
            }
            episodes.append(info)
            if self.transcript is not None:
                row = {**info, "metrics": {k: v[e].tolist() for k, v in metrics.items()}}
                row.update(_replay_record(env, job, configs, played.rollout.actions, e, steps))
                self.transcript.record_episode(info["id"], row)
        if self.progress is not None:
            self.progress.update(n)
        return PlayResult(metrics, episodes)


_MISSING = object()


def _replay_record(env, job: EpisodeJob, configs, actions, e: int, steps: int) -> dict:
    """What replays episode ``e`` of a wave (``dilemmax view``): its start (env, key,
    configuration) and every seat's actions, agent -> int list over the steps played."""
    config = None if job.config_index is None else _index(configs, job.config_index)
    return {
        "start": episode_start(env, job.key, config),
        "actions": {a: np.asarray(actions[a])[e, :steps].tolist() for a in env.agents},
    }


def _index(tree, i: int):
    return jax.tree.map(lambda x: x[i], tree)
