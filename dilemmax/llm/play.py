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
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.agents.policy import is_jittable
from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.loop import EpisodeLoop, Played, StepHook
from dilemmax.envs.rollout import (  # episode_jobs: re-exported, batched play's users import it
    EpisodeJob,
    episode_jobs,
    num_configs_of,
)
from dilemmax.envs.text import NoReply, ParsedReply, Prompt, TextProtocol
from dilemmax.llm.client import Completion, FatalClientError
from dilemmax.llm.policy import CallStats, LLMPolicy, parse_safely
from dilemmax.llm.transcript import Transcript, call_key, prompt_hash


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
    """

    metrics: dict[str, np.ndarray]
    episodes: list[dict] = field(default_factory=list)
    stats: dict[str, CallStats] = field(default_factory=dict)
    wall_s: float = 0.0


def rotate_seats(seats: Sequence[Seat], shift: int) -> list[Seat]:
    """Seat ``i`` gets ``seats[(i - shift) % n]``: over n shifts every policy sits everywhere."""
    n = len(seats)
    return [seats[(i - shift) % n] for i in range(n)]


CALL_ERROR_POLICIES = ("stop", "invalid")


class CallsFailed(FatalClientError):
    """Calls that failed after all their retries stopped a run (``on_call_error="stop"``)."""


# --------------------------------------------------------------------------- compiled steps
_LOOPS: dict[tuple, EpisodeLoop] = {}


def _loop_for(env: MultiAgentEnv, seats: Sequence[Seat], num_steps: int) -> EpisodeLoop:
    """The driver's batched loop shared by every run with the same env, jittable seats and length
    (a model seat is a placeholder there, so which model it is does not matter)."""
    for seat in seats:
        if not seat.is_model and not is_jittable(seat.policy):
            raise TypeError(f"seat {seat.name!r} is neither a model nor a jittable policy")
    key = (id(env), tuple(None if s.is_model else id(s.policy) for s in seats), num_steps)
    cached = _LOOPS.get(key)
    if cached is None or cached.env is not env:
        if len(_LOOPS) >= 32:  # a long-lived process building many envs
            _LOOPS.clear()
        jax_seats = [None if s.is_model else s.policy for s in seats]
        # The loop keeps the policies alive, so their ids stay theirs.
        cached = _LOOPS[key] = EpisodeLoop(env, jax_seats, num_steps, batched=True)
    return cached


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
        if protocol is None and any(s.is_model for s in seats):
            protocol = env.text_protocol()
        self.protocol = protocol
        self.num_envs = int(num_envs)
        self.num_steps = env.max_steps if max_steps is None else min(int(max_steps), env.max_steps)
        if self.num_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.transcript = transcript
        self.progress = progress
        self.stats: dict[str, CallStats] = {}
        self._loop = _loop_for(env, self.seats, self.num_steps)
        self._model_agents = [a for a, s in zip(env.agents, self.seats, strict=True) if s.is_model]

    # ------------------------------------------------------------------ public
    def run(self, key: jax.Array, num_episodes: int, configs=None, part="main") -> PlayResult:
        """``num_episodes`` episodes (per configuration when ``configs`` is batched [C, ...]).

        ``part`` names this run in call keys (a rotation, a condition group), so several parts
        share one transcript.
        """
        if num_episodes < 1:
            raise ValueError(f"num_episodes must be >= 1, got {num_episodes}")
        start = time.perf_counter()
        jobs = episode_jobs(key, num_episodes, num_configs_of(configs))
        per_wave = []
        memories: dict[tuple[int, str], Any] = {}
        for first in range(0, len(jobs), self.num_envs):
            wave = jobs[first : first + self.num_envs]
            per_wave.append(self._play_wave(wave, configs, part, memories))
        metrics = {k: np.concatenate([m[k] for m, _ in per_wave]) for k in per_wave[0][0]}
        episodes = [e for _, infos in per_wave for e in infos]
        return PlayResult(metrics, episodes, dict(self.stats), time.perf_counter() - start)

    # ------------------------------------------------------------------ one wave
    def _play_wave(self, wave: list[EpisodeJob], configs, part: str, memories):
        n = len(wave)
        padded = wave + [wave[0]] * (self.num_envs - n)  # inactive copies keep shapes fixed
        keys = jnp.stack([job.key for job in padded])
        batch_configs = None  # each episode samples its own configuration
        if configs is not None:
            index = jnp.asarray([job.config_index for job in padded])
            batch_configs = jax.tree.map(lambda x: x[index], configs)
        memory = self._episode_memories(wave, memories)
        hook = _ModelSeats(self, wave, part, memory) if self._model_agents else None
        played = self._loop.play(keys, batch_configs, np.arange(self.num_envs) < n, hook)
        return self._finish(wave, part, played, memory, memories)

    def _episode_memories(self, wave, memories) -> dict[tuple[int, str], Any]:
        """Each env slot's model agents carry their memory from the slot's previous episode."""
        memory = {}
        for e in range(len(wave)):
            for agent in self._model_agents:
                old = memories.get((e, agent), _MISSING)
                memory[(e, agent)] = (
                    self.protocol.new_memory(agent)
                    if old is _MISSING
                    else self.protocol.next_memory(old, agent)
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
    def _finish(self, wave, part, played: Played, memory, memories):
        env, n = self.env, len(wave)
        metrics = {k: v[:n] for k, v in played.metrics.items()}
        host_final = jax.device_get(played.final_state) if self._model_agents else None
        for e in range(n):
            for agent in self._model_agents:
                self.protocol.after_episode(memory[(e, agent)], agent, _index(host_final, e))
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
                self.transcript.record_episode(info["id"], row)
        if self.progress is not None:
            self.progress.update(n)
        return metrics, episodes


# --------------------------------------------------------------------------- the model seats
class _ModelSeats(StepHook):
    """One wave's model seats, outside JAX between acting and stepping: each live env's turns
    (one batch per model), the reflect prompts after each step, transcripts and replays."""

    def __init__(self, runner: BatchedPlay, wave: list[EpisodeJob], part: str, memory: dict):
        self.runner, self.wave, self.part, self.memory = runner, wave, part, memory
        self.protocol = runner.protocol
        self._host_state = None  # the state this step's turns were rendered from

    def fill(self, t, step_key, playing, actions, live) -> dict:
        """Every seat's actions with the model seats' filled in."""
        self._host_state = host_state = jax.device_get(playing.state)
        actions = {a: np.array(v) for a, v in actions.items()}
        asks: list[tuple[int, str, Prompt]] = []
        for e in np.flatnonzero(live):
            single = _index(host_state, e)
            for agent in self.runner._model_agents:
                turn = self.protocol.turn(single, agent, self.memory[(e, agent)])
                if isinstance(turn, NoReply):
                    actions[agent][e] = int(turn.action)
                else:
                    asks.append((int(e), agent, turn))
        replies = self._exchange(t, asks)
        for (e, agent, _), parsed in zip(asks, replies, strict=True):
            actions[agent][e] = int(parsed.action)
        return {a: jnp.asarray(v, jnp.int32) for a, v in actions.items()}

    def observe(self, t, before, step, after, live) -> None:
        host_next = jax.device_get(after.state)
        actions, _, _, infos = step
        asks: list[tuple[int, str, Prompt]] = []
        for e in np.flatnonzero(live):
            state, next_state = _index(self._host_state, e), _index(host_next, e)
            acts, info = _index(actions, e), _index(infos, e)
            for agent in self.runner._model_agents:
                memory = self.memory[(e, agent)]
                prompts = self.protocol.after_step(memory, agent, state, acts, info, next_state)
                asks += [(int(e), agent, p) for p in prompts or []]
        # Reflect prompts of one agent are answered in order; ordinals keep their keys apart.
        self._exchange(t, asks)

    def _exchange(self, t, asks) -> list[ParsedReply]:
        """Answers ``asks`` (replayed or from the clients, one batch per model); feeds memory."""
        if not asks:
            return []
        runner = self.runner
        seat_of = dict(zip(runner.env.agents, runner.seats, strict=True))
        keys, ordinals = [], {}
        for e, agent, prompt in asks:
            slot = (e, agent, prompt.kind)
            ordinals[slot] = ordinals.get(slot, -1) + 1
            episode = self.wave[e].episode
            keys.append(call_key(self.part, episode, e, t, agent, prompt.kind, ordinals[slot]))
        replies: list[tuple[Completion, bool] | None] = [None] * len(asks)
        missing: dict[str, list[int]] = {}
        for i, (_, agent, prompt) in enumerate(asks):
            row = runner.transcript.replay(keys[i], prompt) if runner.transcript else None
            if row is not None:
                replies[i] = (_completion_from_row(row), True)
            else:
                missing.setdefault(seat_of[agent].name, []).append(i)
        parsed: list[ParsedReply | None] = [None] * len(asks)

        failed: dict[int, Completion] = {}

        def record(i: int, completion: Completion) -> None:
            # Runs as each call returns (possibly on a client thread): parse and write it now.
            if completion.error and runner.on_call_error == "stop":
                failed[i] = completion  # not written: a resumed run asks it again
                return
            parsed[i] = parse_safely(self.protocol, completion.text, asks[i][2])
            replies[i] = (completion, False)
            self._record(keys[i], t, asks[i], completion, parsed[i])

        def ask(seat_name: str, indices: list[int]) -> None:
            policy = next(s.policy for s in runner.seats if s.name == seat_name)
            prompts = [asks[i][2] for i in indices]
            completions = policy.ask(prompts, lambda j, c: record(indices[j], c))
            for i, completion in zip(indices, completions, strict=True):
                if parsed[i] is None and i not in failed:  # a client that did not report it
                    record(i, completion)

        if len(missing) == 1:
            ask(*next(iter(missing.items())))
        elif missing:  # different models answer at the same time
            with ThreadPoolExecutor(len(missing)) as pool:
                for future in [pool.submit(ask, name, idx) for name, idx in missing.items()]:
                    future.result()
        if failed:
            raise CallsFailed(_failure_message(failed, keys, runner.transcript))
        for i, (e, agent, prompt) in enumerate(asks):
            completion, replayed = replies[i]
            if parsed[i] is None:
                parsed[i] = parse_safely(self.protocol, completion.text, prompt)
            memory = self.memory[(e, agent)]
            self.protocol.after_reply(memory, agent, prompt, completion.text, parsed[i])
            stats = runner.stats.setdefault(seat_of[agent].name, CallStats())
            stats.add(completion, parsed[i] if prompt.kind == "act" else None, replayed)
        runner._update_progress()
        return parsed

    def _record(self, key, t, ask, completion: Completion, parsed) -> None:
        """Writes one call (prompt, reply, what it parsed to) to the transcript, flushed."""
        e, agent, prompt = ask
        runner = self.runner
        if runner.transcript is None:
            return
        seat = runner.seats[runner.env.agent_index[agent]]
        runner.transcript.record_call(
            {
                "key": key,
                "part": self.part,
                "seat": seat.name,
                "agent": agent,
                "env": e,
                "episode": self.wave[e].episode,
                "step": t,
                "kind": prompt.kind,
                "prompt_hash": prompt_hash(prompt),
                "system": prompt.system,
                "prompt": prompt.user,
                "reply": completion.text,
                "action": int(parsed.action),
                "valid": bool(parsed.valid),
                "recovered": bool(parsed.recovered),
                "parse_error": parsed.error,
                "fields": dict(parsed.fields),
                "error": completion.error,
                "prompt_tokens": completion.prompt_tokens,
                "completion_tokens": completion.completion_tokens,
                "latency_s": round(completion.latency_s, 6),
                "retries": completion.retries,
            }
        )


_MISSING = object()


def _failure_message(failed: dict[int, Completion], keys: list[str], transcript) -> str:
    """What stopped the run: how many calls failed, the first one's error and attempts, and
    how to go on."""
    first = failed[min(failed)]
    attempts = first.retries + 1
    kept = (
        "every answered call is in the transcript, so the same command with --resume continues "
        "from here"
        if transcript is not None
        else "run with --out to keep the answered calls and --resume later"
    )
    return (
        f"{len(failed)} model call(s) failed (first: {keys[min(failed)]}: {first.error}, after "
        f"{attempts} attempt{'s' if attempts != 1 else ''}); {kept}"
    )


def _index(tree, i: int):
    return jax.tree.map(lambda x: x[i], tree)


def _completion_from_row(row: Mapping[str, Any]) -> Completion:
    return Completion(
        str(row.get("reply") or ""),
        prompt_tokens=int(row.get("prompt_tokens") or 0),
        completion_tokens=int(row.get("completion_tokens") or 0),
        latency_s=float(row.get("latency_s") or 0.0),
        retries=int(row.get("retries") or 0),
        error=str(row.get("error") or ""),
    )
