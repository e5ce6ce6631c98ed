"""The model seats of a batched wave (:class:`ModelSeats`): the episode loop's hook that asks
each live env's model seats for their turns (one batch per model), sends the reflect prompts
after each step, writes every call to the transcript as it returns and replays recorded ones.

Each model seat's turns, parses and memory go through that seat's own protocol instance
(``runner.protocols``), so per-seat protocol options (a role) need nothing from the protocol.

A call whose server refused structured output (the client asked again in plain text, and the
seat stays in text) is recorded with the refusal, a ``{"type": "seat", "event":
"output_fallback"}`` line goes to the transcript, and one line is printed, once per client.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from dilemmax.envs.loop import StepHook
from dilemmax.envs.rollout import EpisodeJob
from dilemmax.envs.text import NoReply, ParsedReply, Prompt
from dilemmax.llm.cache import hit_row, served
from dilemmax.llm.client import ChatRequest, Completion, FatalClientError
from dilemmax.llm.limits import LimitReached
from dilemmax.llm.policy import CallStats, parse_safely, requested_output
from dilemmax.llm.transcript import call_key, prompt_hash


class CallsFailed(FatalClientError):
    """Calls that failed after all their retries stopped a run (``on_call_error="stop"``)."""


class ModelSeats(StepHook):
    """One wave's model seats, outside JAX between acting and stepping: each live env's turns
    (one batch per model), the reflect prompts after each step, transcripts and replays."""

    def __init__(self, runner, wave: list[EpisodeJob], slots, part: str, memory, replies=None):
        self.runner, self.wave, self.part, self.memory = runner, wave, part, memory
        self.slots = slots  # env e of this batch is env slots[e] of the full run (call keys)
        self.replies = replies  # per env of the wave, its act replies (None: not kept)
        self.protocols = runner.protocols
        self._host_state = None  # the state this step's turns were rendered from

    def fill(self, t, step_key, playing, actions, live) -> dict:
        """Every seat's actions with the model seats' filled in."""
        self._host_state = host_state = jax.device_get(playing.state)
        actions = {a: np.array(v) for a, v in actions.items()}
        asks: list[tuple[int, str, Prompt]] = []
        for e in np.flatnonzero(live):
            single = _index(host_state, e)
            for agent in self.runner._model_agents:
                turn = self.protocols[agent].turn(single, agent, self.memory[(e, agent)])
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
                protocol = self.protocols[agent]
                prompts = protocol.after_step(memory, agent, state, acts, info, next_state)
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
            ordinal = ordinals[slot]
            keys.append(call_key(self.part, episode, self.slots[e], t, agent, prompt.kind, ordinal))
        replies: list[tuple[Completion, bool] | None] = [None] * len(asks)
        cached: list[bool | None] = [None] * len(asks)  # from the response cache (None: off)
        digests = self._cache_keys(asks)
        missing: list[int] = []
        for i, (_, _, prompt) in enumerate(asks):
            row = runner.transcript.replay(keys[i], prompt) if runner.transcript else None
            if row is not None:
                replies[i] = (_completion_from_row(row), True)
                cached[i] = row.get("cached")
            else:
                missing.append(i)
        parsed: list[ParsedReply | None] = [None] * len(asks)
        failed: dict[int, Completion] = {}
        for i in list(missing):
            stored = runner.cache.get(digests[i]) if digests[i] else None
            if stored is not None:  # answered from the cache: no call, recorded as such
                missing.remove(i)
                replies[i], cached[i] = (served(stored), False), True
                parsed[i] = parse_safely(self.protocols[asks[i][1]], stored.text, asks[i][2])
                self._record(keys[i], t, asks[i], replies[i][0], parsed[i], hit_row(stored))

        def record(i: int, completion: Completion) -> None:
            # Runs as each call returns (possibly on a client thread): parse and write it now.
            if completion.error and runner.on_call_error == "stop":
                failed[i] = completion  # not written: a resumed run asks it again
                return
            parsed[i] = parse_safely(self.protocols[asks[i][1]], completion.text, asks[i][2])
            replies[i] = (completion, False)
            if digests[i]:
                cached[i] = False
                runner.cache.put(digests[i], completion)
            if runner.budget is not None:
                runner.budget.add(seat_of[asks[i][1]].name, completion.prompt_tokens,
                                  completion.completion_tokens,
                                  getattr(completion, "cached_tokens", 0))  # fmt: skip
            miss = {"cached": False} if digests[i] else {}
            self._record(keys[i], t, asks[i], completion, parsed[i], miss)
            if completion.output_refused:
                self._fell_back(seat_of[asks[i][1]], keys[i], t, completion)

        def ask(seat_name: str, indices: list[int]) -> None:
            policy = next(s.policy for s in runner.seats if s.name == seat_name)
            prompts = [asks[i][2] for i in indices]
            keys = [digests[i] for i in indices]  # an inspect: seat's scope in Inspect's cache
            cached = (keys,) if any(keys) else ()  # (a policy without a cache takes none)
            completions = policy.ask(prompts, lambda j, c: record(indices[j], c), *cached)
            for i, completion in zip(indices, completions, strict=True):
                if parsed[i] is None and i not in failed:  # a client that did not report it
                    record(i, completion)

        # The run's spending limits say how many calls may go; those sent are answered, written
        # and counted before a limit stops the run (LimitReached, from allowance).
        stopped = None
        while missing and stopped is None:
            try:
                allowed = runner.budget.allowance(len(missing)) if runner.budget else len(missing)
            except LimitReached as stop:
                stopped = stop
                break
            batch, missing = missing[:allowed], missing[allowed:]
            by_seat: dict[str, list[int]] = {}
            for i in batch:
                by_seat.setdefault(seat_of[asks[i][1]].name, []).append(i)
            if len(by_seat) == 1:
                ask(*next(iter(by_seat.items())))
            else:  # different models answer at the same time
                with ThreadPoolExecutor(len(by_seat)) as pool:
                    for future in [pool.submit(ask, name, idx) for name, idx in by_seat.items()]:
                        future.result()
        if failed:
            raise CallsFailed(_failure_message(failed, keys, runner.transcript))
        for i, (e, agent, prompt) in enumerate(asks):
            if replies[i] is None:  # not sent: a spending limit stops the run
                continue
            completion, replayed = replies[i]
            protocol = self.protocols[agent]
            if parsed[i] is None:
                parsed[i] = parse_safely(protocol, completion.text, prompt)
            memory = self.memory[(e, agent)]
            protocol.after_reply(memory, agent, prompt, completion.text, parsed[i])
            seat = seat_of[agent]
            stats = runner.stats.setdefault(
                seat.name, CallStats(output_requested=requested_output(seat.policy))
            )
            act = parsed[i] if prompt.kind == "act" else None
            stats.add(completion, act, replayed, keys[i], cached=cached[i])
            if self.replies is not None and prompt.kind == "act":
                reply = {"step": t, "agent": agent, "fields": dict(parsed[i].fields)}
                self.replies[e].append({**reply, "valid": bool(parsed[i].valid)})
        runner._update_progress()
        if stopped is not None:
            raise stopped
        return parsed

    def _record(self, key, t, ask, completion: Completion, parsed, extra=None) -> None:
        """Writes one call (prompt, reply, what it parsed to) to the transcript, flushed;
        ``extra``: what the response cache adds (a hit, or a miss)."""
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
                "env": self.slots[e],
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
                "reasoning_tokens": completion.reasoning_tokens,
                "cached_tokens": completion.cached_tokens,
                **(
                    {"cache_write_tokens": completion.cache_write_tokens}
                    if completion.cache_write_tokens
                    else {}
                ),
                "latency_s": round(completion.latency_s, 6),
                "retries": completion.retries,
                # The output mode of a request with a schema, and a refusal of its structured
                # form; absent where they do not apply (and in older transcripts).
                **({"output": completion.output} if completion.output else {}),
                **(
                    {"output_refused": completion.output_refused}
                    if completion.output_refused
                    else {}
                ),
                **(extra or {}),
            }
        )

    def _cache_keys(self, asks) -> list[str | None]:
        """Each ask's response-cache key (None without ``--cache``), taken in play order for
        every ask, replayed ones too, so each keeps its sample index on a resume."""
        cache = self.runner.cache
        if cache is None:
            return [None] * len(asks)
        seat_of = dict(zip(self.runner.env.agents, self.runner.seats, strict=True))
        return [
            cache.key(seat_of[agent].name, ChatRequest.from_prompt(prompt), self.wave[e].episode)
            for e, agent, prompt in asks
        ]

    def _fell_back(self, seat, key: str, t: int, completion: Completion) -> None:
        """The server refused a structured request of ``seat``, whose client now asks in plain
        text: a seat event in the transcript (once per seat) and one printed line (once per
        client)."""
        requested = requested_output(seat.policy)
        transcript = self.runner.transcript
        if transcript is not None:
            transcript.record_seat_event(
                seat.name,
                "output_fallback",
                {
                    "requested": requested,
                    "in_effect": "text",
                    "call": key,
                    "part": self.part,
                    "step": t,
                    "error": completion.output_refused,
                    "time": datetime.now(UTC).isoformat(timespec="seconds"),
                },
            )
        notices = getattr(seat.policy, "notices", None)
        if notices is None or "output_fallback" in notices:
            return
        notices.add("output_fallback")
        tqdm.write(
            f"dilemmax: {seat.policy.name}: the server refused {requested} output "
            f"({completion.output_refused}); replies are asked for in plain text from call "
            f"{key} on (recorded per seat in the transcript and in results.json)",
            file=sys.stderr,
        )


def _failure_message(failed: dict[int, Completion], keys: list[str], transcript) -> str:
    """What stopped the run: how many calls failed, the first one's error and attempts, and
    how to go on."""
    first = failed[min(failed)]
    attempts = first.retries + 1
    if transcript is None:
        kept = "run with --out to keep the answered calls and --resume later"
    elif transcript.resumable:
        kept = (
            "every answered call is in the transcript, so the same command with --resume "
            "continues from here"
        )
    else:  # a fresh start that recorded nothing: its folder (or transcript) is removed
        kept = (
            "nothing was recorded, so there is nothing to resume: fix the cause (a seat option "
            "the server refuses, a wrong --base-url) and run the same command again"
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
        reasoning_tokens=int(row.get("reasoning_tokens") or 0),  # absent in older transcripts
        cached_tokens=int(row.get("cached_tokens") or 0),  # absent in older transcripts
        cache_write_tokens=int(row.get("cache_write_tokens") or 0),
        latency_s=float(row.get("latency_s") or 0.0),
        retries=int(row.get("retries") or 0),
        error=str(row.get("error") or ""),
        output=str(row.get("output") or ""),  # absent in older transcripts: unknown
        output_refused=str(row.get("output_refused") or ""),
    )
