"""Batched play: many episodes at once, language-model seats beside scripted and trained ones.

``num_envs`` environments step together in one jitted ``vmap(env.step_env)``. At each step:

1. every jittable seat (scripted, trained) of every env acts inside JAX, in one call;
2. every model seat of every live env asks the game's text protocol for its turn; the prompts
   of one model are sent as one batch (concurrent HTTP requests, or one batched ``generate``);
   a seat whose turn is :class:`~dilemmax.envs.text.NoReply` is not called;
3. the envs step; each model seat's memory sees the transition (``after_step``), and the
   reflect prompts it returns (a trial-end lesson) are sent, again as one batch, before the
   next turn.

Episodes split their keys exactly as :func:`dilemmax.envs.rollout.run_episode` does, so with
only jittable seats batched play reproduces the JAX path's episodes, and every episode's metrics
come from the same ``env.episode_metrics`` as scripted and trained play. Every call goes to a
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
from dilemmax.envs.base import MultiAgentEnv, Rollout
from dilemmax.envs.rollout import Observation, initial_carries, is_carried, record_step
from dilemmax.envs.text import NoReply, ParsedReply, Prompt, TextProtocol
from dilemmax.llm.client import Completion, FatalClientError
from dilemmax.llm.policy import CallStats, LLMPolicy, parse_safely
from dilemmax.llm.transcript import Transcript, call_key, prompt_hash


@dataclass(frozen=True)
class Seat:
    """A policy and the name it is reported under (``scripted:greedy``, ``openai:<model>``)."""

    name: str
    policy: Any

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


@dataclass
class _Job:
    """One episode to play: its key, configuration (index into ``configs`` or None) and id."""

    episode: int
    key: jax.Array
    config_index: int | None


def episode_jobs(key: jax.Array, num_episodes: int, num_configs: int | None) -> list[_Job]:
    """Episodes and keys, split as :func:`dilemmax.envs.rollout.run_episodes` splits them."""
    if num_configs is None:
        keys = jax.random.split(key, num_episodes)
        return [_Job(i, keys[i], None) for i in range(num_episodes)]
    jobs = []
    for c, config_key in enumerate(jax.random.split(key, num_configs)):
        for e, k in enumerate(jax.random.split(config_key, num_episodes)):
            jobs.append(_Job(c * num_episodes + e, k, c))
    return jobs


def rotate_seats(seats: Sequence[Seat], shift: int) -> list[Seat]:
    """Seat ``i`` gets ``seats[(i - shift) % n]``: over n shifts every policy sits everywhere."""
    n = len(seats)
    return [seats[(i - shift) % n] for i in range(n)]


CALL_ERROR_POLICIES = ("stop", "invalid")


class CallsFailed(FatalClientError):
    """Calls that failed after all their retries stopped a run (``on_call_error="stop"``)."""


# --------------------------------------------------------------------------- compiled pieces
class _Programs:
    """The jitted functions one seating needs (built once per env and seating)."""

    def __init__(self, env: MultiAgentEnv, seats: Sequence[Seat], num_steps: int):
        self.env = env
        jittable = [None if s.is_model else s.policy for s in seats]
        for seat in seats:
            if not seat.is_model and not is_jittable(seat.policy):
                raise TypeError(f"seat {seat.name!r} is neither a model nor a jittable policy")

        def start(key, config, use_config: bool):
            key_config, key_reset, key_run = jax.random.split(key, 3)
            if not use_config:
                config = env.sample_config(key_config)
            obs, state = env.reset_to(key_reset, config)
            # Recurrent (carried) seats start each episode from their initial memory.
            carries = initial_carries(jittable)
            return obs, state, jax.random.split(key_run, env.max_steps)[:num_steps], carries

        def act(step_key, obs, state, carries):
            key_act, _ = jax.random.split(step_key)
            keys = jax.random.split(key_act, env.num_agents)
            masks = env.action_mask(state)
            actions, new_carries = {}, []
            seating = zip(env.agents, jittable, carries, strict=True)
            for i, (agent, policy, carry) in enumerate(seating):
                view = Observation(obs[agent], masks[agent], jnp.int32(i), state)
                if policy is None:
                    action = jnp.int32(0)
                elif is_carried(policy):
                    action, carry = policy.step(carry, keys[i], view)
                else:
                    action = policy(keys[i], view)
                actions[agent] = jnp.asarray(action, jnp.int32)
                new_carries.append(carry)
            return actions, new_carries

        def step(step_key, obs, state, actions, finished, carries):
            _, key_step = jax.random.split(step_key)
            next_obs, next_state, rewards, dones, infos = env.step_env(key_step, state, actions)
            next_carries = record_step(env, jittable, carries, actions, rewards, infos, dones)
            keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(finished, o, n), new, old)
            next_obs, next_state, next_carries = keep(
                (next_obs, next_state, next_carries), (obs, state, carries)
            )
            return next_obs, next_state, rewards, dones, infos, next_carries

        self.start = {
            flag: jax.jit(jax.vmap(lambda k, c, flag=flag: start(k, c, flag)))
            for flag in (False, True)
        }
        self.act = jax.jit(jax.vmap(act))
        self.step = jax.jit(jax.vmap(step))
        self.metrics = jax.jit(jax.vmap(env.episode_metrics))


_PROGRAMS: dict[tuple, _Programs] = {}


def _programs_for(env: MultiAgentEnv, seats: Sequence[Seat], num_steps: int) -> _Programs:
    """Compiled programs shared by every run with the same env, jittable seats and length (a
    model seat contributes a placeholder, so which model it is does not matter)."""
    key = (id(env), tuple(None if s.is_model else id(s.policy) for s in seats), num_steps)
    cached = _PROGRAMS.get(key)
    if cached is None or cached.env is not env:
        if len(_PROGRAMS) >= 32:  # a long-lived process building many envs
            _PROGRAMS.clear()
        cached = _PROGRAMS[key] = _Programs(env, seats, num_steps)
        cached.seats = list(seats)  # keeps the policies alive, so their ids stay theirs
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
        self._programs = _programs_for(env, self.seats, self.num_steps)
        self._model_agents = [a for a, s in zip(env.agents, self.seats, strict=True) if s.is_model]

    # ------------------------------------------------------------------ public
    def run(self, key: jax.Array, num_episodes: int, configs=None, part="main") -> PlayResult:
        """``num_episodes`` episodes (per configuration when ``configs`` is batched [C, ...]).

        ``part`` names this run in call keys (a rotation, a condition group), so several parts
        share one transcript.
        """
        start = time.perf_counter()
        num_configs = None if configs is None else jax.tree.leaves(configs)[0].shape[0]
        jobs = episode_jobs(key, num_episodes, num_configs)
        per_wave = []
        memories: dict[tuple[int, str], Any] = {}
        for first in range(0, len(jobs), self.num_envs):
            wave = jobs[first : first + self.num_envs]
            per_wave.append(self._play_wave(wave, configs, part, memories))
        metrics = {k: np.concatenate([m[k] for m, _ in per_wave]) for k in per_wave[0][0]}
        episodes = [e for _, infos in per_wave for e in infos]
        return PlayResult(metrics, episodes, dict(self.stats), time.perf_counter() - start)

    # ------------------------------------------------------------------ one wave
    def _play_wave(self, wave: list[_Job], configs, part: str, memories) -> tuple[dict, list]:
        programs = self._programs
        n = len(wave)
        padded = wave + [wave[0]] * (self.num_envs - n)  # inactive copies keep shapes fixed
        keys = jnp.stack([job.key for job in padded])
        if configs is None:
            batch_configs = keys  # a placeholder: each episode samples its own configuration
            use_config = False
        else:
            index = jnp.asarray([job.config_index for job in padded])
            batch_configs = jax.tree.map(lambda x: x[index], configs)
            use_config = True
        obs, state, step_keys, carries = programs.start[use_config](keys, batch_configs)
        live = np.arange(self.num_envs) < n
        finished = jnp.asarray(~live)
        memory = self._episode_memories(wave, memories)
        steps, played = [], np.zeros(self.num_envs, np.int32)
        for t in range(self.num_steps):
            actions, acted_carries = programs.act(step_keys[:, t], obs, state, carries)
            host_state, actions = self._model_actions(wave, part, t, state, actions, live, memory)
            next_obs, next_state, rewards, dones, infos, carries = programs.step(
                step_keys[:, t], obs, state, actions, finished, acted_carries
            )
            steps.append(jax.device_get((actions, rewards, dones, infos)))
            played += live
            if self._model_agents:
                self._observe(wave, part, t, host_state, steps[-1], next_state, live, memory)
            obs, state = next_obs, next_state
            live = live & ~np.asarray(steps[-1][2]["__all__"])
            finished = jnp.asarray(~live)
            if not live.any():
                break
        return self._finish(wave, part, steps, played, state, memory, memories)

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

    # ------------------------------------------------------------------ model seats
    def _model_actions(self, wave, part, t, state, actions, live, memory) -> tuple[Any, dict]:
        """(the state on the host, every seat's actions with the model seats' filled in)."""
        if not self._model_agents:
            return None, actions
        host_state = jax.device_get(state)
        actions = {a: np.array(v) for a, v in actions.items()}
        asks: list[tuple[int, str, Prompt]] = []
        for e in np.flatnonzero(live):
            single = _index(host_state, e)
            for agent in self._model_agents:
                turn = self.protocol.turn(single, agent, memory[(e, agent)])
                if isinstance(turn, NoReply):
                    actions[agent][e] = int(turn.action)
                else:
                    asks.append((int(e), agent, turn))
        replies = self._exchange(wave, part, t, asks, memory)
        for (e, agent, _), parsed in zip(asks, replies, strict=True):
            actions[agent][e] = int(parsed.action)
        return host_state, {a: jnp.asarray(v, jnp.int32) for a, v in actions.items()}

    def _observe(self, wave, part, t, host_state, step, next_state, live, memory) -> None:
        host_next = jax.device_get(next_state)
        actions, _, _, infos = step
        asks: list[tuple[int, str, Prompt]] = []
        for e in np.flatnonzero(live):
            before, after = _index(host_state, e), _index(host_next, e)
            acts, info = _index(actions, e), _index(infos, e)
            for agent in self._model_agents:
                prompts = self.protocol.after_step(
                    memory[(e, agent)], agent, before, acts, info, after
                )
                asks += [(int(e), agent, p) for p in prompts or []]
        # Reflect prompts of one agent are answered in order; ordinals keep their keys apart.
        self._exchange(wave, part, t, asks, memory)

    def _exchange(self, wave, part, t, asks, memory) -> list[ParsedReply]:
        """Answers ``asks`` (replayed or from the clients, one batch per model); feeds memory."""
        if not asks:
            return []
        seat_of = dict(zip(self.env.agents, self.seats, strict=True))
        keys, ordinals = [], {}
        for e, agent, prompt in asks:
            slot = (e, agent, prompt.kind)
            ordinals[slot] = ordinals.get(slot, -1) + 1
            episode = wave[e].episode
            keys.append(call_key(part, episode, e, t, agent, prompt.kind, ordinals[slot]))
        replies: list[tuple[Completion, bool] | None] = [None] * len(asks)
        missing: dict[str, list[int]] = {}
        for i, (_, agent, prompt) in enumerate(asks):
            row = self.transcript.replay(keys[i], prompt) if self.transcript else None
            if row is not None:
                replies[i] = (_completion_from_row(row), True)
            else:
                missing.setdefault(seat_of[agent].name, []).append(i)
        parsed: list[ParsedReply | None] = [None] * len(asks)

        failed: dict[int, str] = {}

        def record(i: int, completion: Completion) -> None:
            # Runs as each call returns (possibly on a client thread): parse and write it now.
            if completion.error and self.on_call_error == "stop":
                failed[i] = completion.error  # not written: a resumed run asks it again
                return
            parsed[i] = parse_safely(self.protocol, completion.text, asks[i][2])
            replies[i] = (completion, False)
            self._record(keys[i], wave, part, t, asks[i], completion, parsed[i])

        def ask(seat_name: str, indices: list[int]) -> None:
            policy = next(s.policy for s in self.seats if s.name == seat_name)
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
            first = min(failed)
            raise CallsFailed(
                f"{len(failed)} model call(s) failed after all retries (first: {keys[first]}: "
                f"{failed[first]}); every answered call is in the transcript, so the same "
                "command with --resume continues from here"
            )
        for i, (e, agent, prompt) in enumerate(asks):
            completion, replayed = replies[i]
            if parsed[i] is None:
                parsed[i] = parse_safely(self.protocol, completion.text, prompt)
            self.protocol.after_reply(memory[(e, agent)], agent, prompt, completion.text, parsed[i])
            stats = self.stats.setdefault(seat_of[agent].name, CallStats())
            stats.add(completion, parsed[i] if prompt.kind == "act" else None, replayed)
        self._update_progress()
        return parsed

    def _record(self, key, wave, part, t, ask, completion: Completion, parsed) -> None:
        """Writes one call (prompt, reply, what it parsed to) to the transcript, flushed."""
        e, agent, prompt = ask
        if self.transcript is None:
            return
        seat = self.seats[self.env.agent_index[agent]]
        self.transcript.record_call(
            {
                "key": key,
                "part": part,
                "seat": seat.name,
                "agent": agent,
                "env": e,
                "episode": wave[e].episode,
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
    def _finish(self, wave, part, steps, played, final_state, memory, memories):
        env = self.env
        length = env.max_steps
        stacked = jax.tree.map(lambda *xs: np.stack(xs, axis=1), *steps)  # [N, T, ...]
        t_played = len(steps)
        valid = np.arange(length)[None, :] < played[:, None]
        pad = lambda x: np.concatenate([x, np.repeat(x[:, -1:], length - t_played, axis=1)], axis=1)
        actions, rewards, dones, infos = jax.tree.map(pad, stacked)
        rollout = Rollout(actions, rewards, dones, infos, jnp.asarray(valid), final_state)
        metrics = jax.tree.map(np.asarray, self._programs.metrics(rollout))
        n = len(wave)
        metrics = {k: v[:n] for k, v in metrics.items()}
        host_final = jax.device_get(final_state) if self._model_agents else None
        for e in range(n):
            for agent in self._model_agents:
                self.protocol.after_episode(memory[(e, agent)], agent, _index(host_final, e))
                memories[(e, agent)] = memory[(e, agent)]
        episodes = []
        for e, job in enumerate(wave):
            done = bool(np.asarray(dones["__all__"])[e, max(int(played[e]) - 1, 0)])
            info = {
                "id": f"{part}|e{job.episode}",
                "part": part,
                "episode": job.episode,
                "config_index": job.config_index,
                "seats": {a: s.name for a, s in zip(env.agents, self.seats, strict=True)},
                "steps": int(played[e]),
                "truncated": not done,
            }
            episodes.append(info)
            if self.transcript is not None:
                row = {**info, "metrics": {k: v[e].tolist() for k, v in metrics.items()}}
                self.transcript.record_episode(info["id"], row)
        if self.progress is not None:
            self.progress.update(n)
        return metrics, episodes


_MISSING = object()


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
