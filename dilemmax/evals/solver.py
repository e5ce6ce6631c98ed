"""The Inspect solver that plays one dilemmax episode per sample.

The episode runs in the episode driver's batched loop (:class:`dilemmax.envs.loop.EpisodeLoop`
with one env, the loop ``dilemmax play`` runs its waves in), from the job key
:func:`dilemmax.envs.rollout.episode_jobs` gives it, so a sample plays exactly the episode of the
same position in ``dilemmax play``. Its hook asks each model seat's protocol for the turn
(``protocol.turn``; a :class:`~dilemmax.envs.text.NoReply` seat is not called), sends the turns
of one step to their Inspect models concurrently, parses each reply with
:func:`dilemmax.llm.policy.parse_safely` and feeds the protocol's memory hooks (``after_reply``,
``after_step`` and its reflect prompts, ``after_episode``), in the order batched play does.

JAX steps are synchronous and Inspect's models are coroutines, so the loop runs in a worker
thread and each step's calls go back to the sample's event loop (``anyio.from_thread.run``, which
keeps the sample's context: its model roles and its transcript). Each call's prompt and reply
are appended to the sample's messages with the agent, step and parsed action in their metadata,
so ``inspect view`` shows the game turn by turn. A call that still fails after Inspect's retries
raises, and the sample fails as any Inspect sample does (``--retry-on-error`` plays it again).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.to_thread
import jax
import jax.numpy as jnp
import numpy as np
from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageUser,
    GenerateConfig,
    Model,
    ModelOutput,
    get_model,
)
from inspect_ai.solver import Generate, Solver, TaskState, solver

from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.loop import EpisodeLoop, Played, StepHook
from dilemmax.envs.text import NoReply, ParsedReply, Prompt, TextProtocol
from dilemmax.llm import sampling
from dilemmax.llm.client import ChatRequest
from dilemmax.llm.inspect_messages import chat_messages, completion_from_output, request_config
from dilemmax.llm.policy import CallStats, parse_safely

STORE_KEY = "dilemmax"  # the sample store's entry holding the episode's metrics and calls


@dataclass(frozen=True)
class EpisodeSeat:
    """How one agent of an episode is played.

    Attributes:
        agent: the env's agent name.
        name: what the seat is reported as (``seat_1``, ``scripted:teacher``).
        policy: the jittable policy of a scripted or trained seat; None for a model seat.
        role: the Inspect model role of a model seat (``seat_1``); Inspect's default model when
            the eval names no model for it. None for a JAX seat.
        protocol: the text protocol of a model seat (its own options applied); None otherwise.
    """

    agent: str
    name: str
    policy: Any = None
    role: str | None = None
    protocol: TextProtocol | None = None

    @property
    def is_model(self) -> bool:
        return self.policy is None


@dataclass(frozen=True)
class Episode:
    """One sample's episode: what ``dilemmax play`` would play at this position of this part.

    Attributes:
        part: the part name (a design's cell group, ``main``, ``n=2``; ``/rot<k>`` if rotated).
        env: the env of the part.
        seats: one :class:`EpisodeSeat` per agent, in ``env.agents`` order.
        key: the episode's job key (``episode_jobs``).
        config: the episode's configuration, batched with leading axis 1; None when sampled.
        num_steps: steps at most (``env.max_steps`` or the task's ``max_steps``).
        info: the sample's metadata (part, episode, config index and name, seed, seats).
    """

    part: str
    env: MultiAgentEnv
    seats: tuple[EpisodeSeat, ...]
    key: jax.Array
    config: Any
    num_steps: int
    info: Mapping[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- compiled loops
_LOOPS: dict[tuple, EpisodeLoop] = {}
_LOOPS_LOCK = threading.Lock()  # episodes start on several worker threads at once


def loop_for(episode: Episode) -> EpisodeLoop:
    """The batched loop shared by every episode with this env, these JAX seats and this length
    (samples played at the same time share its compiled steps, compiled once)."""
    env = episode.env
    policies = [None if s.is_model else s.policy for s in episode.seats]
    key = (id(env), tuple(None if p is None else id(p) for p in policies), episode.num_steps)
    with _LOOPS_LOCK:
        cached = _LOOPS.get(key)
        if cached is None or cached.env is not env:
            if len(_LOOPS) >= 32:  # a long-lived process building many envs
                _LOOPS.clear()
            # The loop keeps the env and policies alive, so their ids stay theirs.
            cached = _LOOPS[key] = EpisodeLoop(env, policies, episode.num_steps, batched=True)
        return cached


# --------------------------------------------------------------------------- calls
OUTPUT_MODES = sampling.OUTPUT_MODES  # as an ``openai:`` seat's ``output=``


def prompt_call(prompt: Prompt, output_mode: str) -> tuple[list[ChatMessage], GenerateConfig]:
    """The Inspect messages and config of one turn: the request ``dilemmax play`` sends
    (``ChatRequest.from_prompt``), translated by :mod:`dilemmax.llm.inspect_messages`, with the
    prompt's JSON schema as structured output where ``output_mode`` asks for it."""
    request = ChatRequest.from_prompt(prompt)
    try:
        config = request_config(request, output_mode)
    except ValueError:  # a schema Inspect cannot describe: the reply is parsed from text anyway
        config = GenerateConfig()
    return chat_messages(request), config


# --------------------------------------------------------------------------- the hook
class _InspectSeats(StepHook):
    """One episode's model seats: turns, concurrent Inspect calls, parses, memories, messages.

    Runs on the worker thread of the episode; each step's calls are made on the sample's event
    loop (``anyio.from_thread.run``).
    """

    def __init__(self, episode: Episode, models: Mapping[str, Model], output_mode: str):
        self.episode = episode
        self.models = models
        self.output_mode = output_mode
        self.seats = [s for s in episode.seats if s.is_model]
        self.memory = {s.agent: s.protocol.new_memory(s.agent) for s in self.seats}
        self.stats: dict[str, CallStats] = {}
        self.messages: list[ChatMessage] = []
        self.last_output: ModelOutput | None = None
        self._host_state = None  # the state this step's turns were rendered from
        self._systems: dict[str, str] = {}  # agent -> the system message last logged for it

    def fill(self, t, step_key, playing, actions, live) -> dict:
        self._host_state = jax.device_get(playing.state)
        if not live[0]:
            return actions
        single = _first(self._host_state)
        actions = {a: np.array(v) for a, v in actions.items()}
        asks: list[tuple[EpisodeSeat, Prompt]] = []
        for seat in self.seats:
            turn = seat.protocol.turn(single, seat.agent, self.memory[seat.agent])
            if isinstance(turn, NoReply):
                actions[seat.agent][0] = int(turn.action)
            else:
                asks.append((seat, turn))
        for (seat, _), parsed in zip(asks, self._exchange(t, asks), strict=True):
            actions[seat.agent][0] = int(parsed.action)
        return {a: jnp.asarray(v, jnp.int32) for a, v in actions.items()}

    def observe(self, t, before, step, after, live) -> None:
        if not live[0]:
            return
        state, next_state = _first(self._host_state), _first(jax.device_get(after.state))
        actions, _, _, infos = step
        acts, info = _first(actions), _first(infos)
        asks = []
        for seat in self.seats:
            memory = self.memory[seat.agent]
            prompts = seat.protocol.after_step(memory, seat.agent, state, acts, info, next_state)
            asks += [(seat, p) for p in prompts or []]
        self._exchange(t, asks)

    def finish(self, final_state) -> None:
        final = _first(jax.device_get(final_state))
        for seat in self.seats:
            seat.protocol.after_episode(self.memory[seat.agent], seat.agent, final)

    # ------------------------------------------------------------------ calls
    def _exchange(self, t: int, asks: Sequence[tuple[EpisodeSeat, Prompt]]) -> list[ParsedReply]:
        """Answers ``asks`` (one step's calls, concurrently), then parses and remembers them in
        order, as batched play does."""
        if not asks:
            return []
        outputs = anyio.from_thread.run(self._generate, asks)
        parsed = []
        for (seat, prompt), output in zip(asks, outputs, strict=True):
            completion = completion_from_output(output, output.time or 0.0)
            reply = parse_safely(seat.protocol, completion.text, prompt)
            memory = self.memory[seat.agent]
            seat.protocol.after_reply(memory, seat.agent, prompt, completion.text, reply)
            stats = self.stats.setdefault(seat.name, CallStats())
            stats.add(completion, reply if prompt.kind == "act" else None, False)
            self._log(t, seat, prompt, output, completion.text, reply)
            parsed.append(reply)
        self.last_output = outputs[-1]
        return parsed

    async def _generate(self, asks) -> list[ModelOutput]:
        outputs: list[ModelOutput | None] = [None] * len(asks)

        async def one(i: int, seat: EpisodeSeat, prompt: Prompt) -> None:
            messages, config = prompt_call(prompt, self.output_mode)
            outputs[i] = await self.models[seat.agent].generate(messages, config=config)

        async with anyio.create_task_group() as group:
            for i, (seat, prompt) in enumerate(asks):
                group.start_soon(one, i, seat, prompt)
        return outputs

    def _log(self, t: int, seat: EpisodeSeat, prompt: Prompt, output, text: str, reply):
        """The call as sample messages: the agent's system message when it changes, the turn's
        prompt, and the reply with what it parsed to."""
        where = {"agent": seat.agent, "seat": seat.name, "step": t, "kind": prompt.kind}
        if prompt.system and self._systems.get(seat.agent) != prompt.system:
            self._systems[seat.agent] = prompt.system
            self.messages.append(ChatMessageSystem(content=prompt.system, metadata=where))
        self.messages.append(ChatMessageUser(content=prompt.user, metadata=where))
        parse = {
            "action": int(reply.action),
            "valid": bool(reply.valid),
            "recovered": bool(reply.recovered),
            "parse_error": reply.error,
        }
        message = output.choices[0].message if output.choices else None
        if not isinstance(message, ChatMessageAssistant):  # an output without a message
            message = ChatMessageAssistant(content=text)
        self.messages.append(message.model_copy(update={"metadata": {**where, **parse}}))


# --------------------------------------------------------------------------- playing
def play(episode: Episode, models: Mapping[str, Model], output_mode: str = "json_schema"):
    """Plays ``episode`` (on a worker thread of a running event loop: its model calls go back
    to that loop). Returns (:class:`Played` with leading axis 1, the hook)."""
    hook = _InspectSeats(episode, models, output_mode)
    played = loop_for(episode).play(
        jnp.stack([episode.key]), episode.config, np.ones(1, bool), hook
    )
    hook.finish(played.final_state)
    return played, hook


def episode_record(episode: Episode, played: Played, hook: _InspectSeats) -> dict:
    """What the scorer reads: the episode's metrics (plain lists) with the axes the game declares
    for them and the agents an agent axis indexes, steps, truncation, calls."""
    steps = int(played.played[0])
    ends = np.asarray(played.rollout.dones["__all__"])[0]
    return {
        "metrics": {k: np.asarray(v)[0].tolist() for k, v in played.metrics.items()},
        "metric_axes": {
            k: list(axes) for k, axes in episode.env.metric_axes.items() if k in played.metrics
        },
        "agents": list(episode.env.agents),
        "steps": steps,
        "truncated": not bool(ends[max(steps - 1, 0)]),
        "calls": {name: stats.summary() for name, stats in hook.stats.items()},
        "call_counts": {name: vars(stats) for name, stats in hook.stats.items()},
    }


def play_episode(
    episodes: Mapping[str, Episode], output_mode: str = "json_schema", limiter_size: int = 64
) -> Solver:
    """Plays the sample's episode (looked up by sample id in ``episodes``) with each model
    seat's Inspect model: its role's model if the eval binds one, else the eval's model.

    Args:
        episodes: sample id -> :class:`Episode`.
        output_mode: one of :data:`OUTPUT_MODES` (how a prompt's JSON schema is asked for).
        limiter_size: episodes stepping at once (each holds a worker thread while it waits).
    """

    # Registered with plain parameters only: Inspect writes a solver's parameters into the log,
    # and the episodes (envs, keys, policies) are no JSON.
    @solver(name="play_episode")
    def dilemmax_episode(output_mode: str = "json_schema", episodes: int = 0) -> Solver:
        limiter: list[anyio.CapacityLimiter] = []  # made in the eval's event loop, on first use

        async def solve(state: TaskState, generate: Generate) -> TaskState:
            episode = table[str(state.sample_id)]
            models = {s.agent: get_model(role=s.role) for s in episode.seats if s.is_model}
            if not limiter:
                limiter.append(anyio.CapacityLimiter(limiter_size))
            played, hook = await anyio.to_thread.run_sync(
                play, episode, models, output_mode, limiter=limiter[0]
            )
            state.messages = hook.messages
            if hook.last_output is not None:
                state.output = hook.last_output
            state.store.set(STORE_KEY, episode_record(episode, played, hook))
            state.completed = True
            return state

        return solve

    table = dict(episodes)
    return dilemmax_episode(output_mode, len(table))


def _first(tree):
    """The first env of a batched (leading axis 1) host pytree."""
    return jax.tree.map(lambda x: x[0], tree)
