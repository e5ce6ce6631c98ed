"""The language model as a policy: prompts from the game's text protocol, replies from a client.

:class:`LLMPolicy` does two jobs:

- in batched play (:func:`dilemmax.llm.play.play`) it is a seat whose prompts the runner gathers
  across environments and sends as one batch (:meth:`LLMPolicy.ask`);
- in the arena's Python path it follows :class:`dilemmax.agents.policy.Policy`
  (``policy(key, observation) -> action``): it keeps each agent's memory, asks the protocol for
  the turn (a :class:`~dilemmax.envs.text.NoReply` seat is not called), sends the prompt, parses
  the reply and feeds the protocol's memory hooks. The env state goes only to the protocol (the
  game's renderer); the parser receives the prompt's context, never the state.

An invalid reply plays the parser's action (the game's invalid action, or the leniently
recovered move) and is counted, never raised.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dilemmax.envs.text import NoReply, ParsedReply, Prompt, TextProtocol
from dilemmax.errors import UsageError
from dilemmax.llm.client import ChatRequest, Client, Completion, FatalClientError, OnResult
from dilemmax.llm.pricing import Price, cost

JSON_MODES = ("json_schema", "json_object")


def is_json_object(text: str) -> bool:
    """Whether a reply is one JSON object (what both JSON output modes ask for)."""
    try:
        return isinstance(json.loads(text), dict)
    except (ValueError, RecursionError):
        return False


@dataclass
class CallStats:
    """Running counts over a seat's calls (what the progress bar and summary show), and the
    seat's output mode: the one it asked for, the one its replies were last asked in, and
    where the server's refusal of structured output switched it to text (``output_switch``:
    ``{"call": <call key>, "error": <the refusal>}``). ``json_mode_calls`` counts the answered
    calls asked in a JSON mode and ``json_valid`` those of them whose reply is a JSON object,
    so a server that takes ``response_format`` and ignores it shows as a low rate.
    """

    calls: int = 0
    replayed: int = 0
    act_calls: int = 0
    valid: int = 0
    recovered: int = 0
    errors: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    reasoning_tokens: int = 0  # of the completion tokens, spent thinking (provider's count)
    cached_tokens: int = 0  # of the prompt tokens, read from the server's prompt cache
    cache_write_tokens: int = 0  # of the prompt tokens, written into it (Anthropic's)
    json_mode_calls: int = 0
    json_valid: int = 0
    cache_hits: int = 0  # calls answered from the response cache (--cache): none was made
    cache_misses: int = 0  # calls the cache did not hold, made and then stored
    output_requested: str = ""  # "" when the client does not say (scripted, local models)
    output_in_effect: str = ""  # of the latest reply to a request with a schema
    output_switch: dict | None = None

    def add(
        self,
        completion: Completion,
        parsed: ParsedReply | None,
        replayed: bool,
        call: str = "",
        cached: bool | None = None,
    ) -> None:
        """Counts one call (``call``: its key, which names where a fallback happened;
        ``cached``: answered from the response cache, or not; None: no cache)."""
        self.cache_hits += int(cached is True)
        self.cache_misses += int(cached is False)
        if completion.output:
            self.output_in_effect = completion.output
        if completion.output_refused and self.output_switch is None:
            self.output_switch = {"call": call, "error": completion.output_refused}
        if completion.output in JSON_MODES and not completion.error:
            self.json_mode_calls += 1
            self.json_valid += int(is_json_object(completion.text))
        self.calls += 1
        self.replayed += int(replayed)
        self.errors += int(bool(completion.error))
        self.retries += completion.retries
        self.prompt_tokens += completion.prompt_tokens
        self.completion_tokens += completion.completion_tokens
        self.reasoning_tokens += completion.reasoning_tokens
        self.cached_tokens += completion.cached_tokens
        self.cache_write_tokens += completion.cache_write_tokens
        self.latency_s += completion.latency_s
        if parsed is not None:
            self.act_calls += 1
            self.valid += int(parsed.valid)
            self.recovered += int(parsed.recovered)

    def merged(self, other: CallStats) -> CallStats:
        """The counts of both (``other`` played after ``self``): sums, the first requested mode
        and switch, the later mode in effect."""
        counts = {k: getattr(self, k) + getattr(other, k) for k in COUNTS}
        return CallStats(
            **counts,
            output_requested=self.output_requested or other.output_requested,
            output_in_effect=other.output_in_effect or self.output_in_effect,
            output_switch=self.output_switch or other.output_switch,
        )

    @property
    def output_shown(self) -> str:
        """The output mode as the calls table shows it: ``json_schema``, ``json_schema>text``
        after a fallback, ``-`` when the client does not say."""
        requested = self.output_requested or "-"
        if self.output_switch is not None or (
            self.output_in_effect and self.output_in_effect != self.output_requested
        ):
            return f"{requested}>{self.output_in_effect or 'text'}"
        return requested

    def cost(self, price: Price | None) -> float | None:
        """Dollars of these calls at ``price`` (cached prompt tokens at its cached rate); None
        when the price is unknown, or no call reported its tokens (0 is this project's unknown)."""
        if price is None or (self.calls and not (self.prompt_tokens or self.completion_tokens)):
            return None
        return cost(price, self.prompt_tokens, self.cached_tokens, self.completion_tokens)

    def summary(self, price: Price | None = None) -> dict[str, Any]:
        """The counts as ``results.json`` holds them; ``cost_usd`` at ``price`` (None: unknown)."""
        acts = max(self.act_calls, 1)
        return {
            "calls": self.calls,
            "replayed": self.replayed,
            "format_validity": self.valid / acts,
            "recovered_rate": self.recovered / acts,
            "played_move_rate": (self.valid + self.recovered) / acts,
            "errors": self.errors,
            "retries": self.retries,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "cached_tokens": self.cached_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cost_usd": self.cost(price),
            "mean_latency_s": self.latency_s / max(self.calls, 1),
            "output_requested": self.output_requested or None,
            "output_in_effect": self.output_in_effect or None,
            "output_switched": self.output_switch,
            "json_mode_calls": self.json_mode_calls,
            "json_valid": self.json_valid,
            "cache_hits": self.cache_hits,
            "cache_misses": self.cache_misses,
            "json_valid_rate": (
                self.json_valid / self.json_mode_calls if self.json_mode_calls else None
            ),
        }


# The fields merged by summing: the counts (the output mode's fields are not numbers).
COUNTS = tuple(f.name for f in dataclasses.fields(CallStats) if type(f.default) in (int, float))


def requested_output(policy) -> str:
    """The output mode a model seat's client asks for ("" when it does not say)."""
    return str(getattr(getattr(policy, "client", None), "requested_output", "") or "")


def reflect_reply(prompt: Prompt, text: str, error: str = "") -> ParsedReply:
    """A reflect reply as a :class:`ParsedReply` (it plays no action: ``action`` -1); what a
    protocol's parser that failed on a reflect reply leaves the memory hooks."""
    text = text if isinstance(text, str) else ""
    valid = bool(text.strip()) and not error
    return ParsedReply(-1, valid, error or ("" if valid else "empty reply"), text.strip())


def parse_safely(protocol: TextProtocol, text: str, prompt: Prompt) -> ParsedReply:
    """``protocol.parse_reply`` for every kind of call (a reflect reply's lessons are read by
    the protocol's parser too). A parser that raises (it must not) gives an invalid reply."""
    try:
        return protocol.parse_reply(text, prompt)
    except Exception as error:  # untrusted text must never stop a run
        reason = f"parser raised {type(error).__name__}"
        if prompt.kind != "act":
            return reflect_reply(prompt, text, reason)
        fallback = prompt.context.get("invalid_action", 0) if prompt.context else 0
        return ParsedReply(int(fallback), False, reason)


class SeatCallFailed(FatalClientError, UsageError):
    """A model seat's call failed after all its retries in the arena's step-by-step play: the
    message names the seat and the failure (a one-line error of ``dilemmax rollout``)."""


@dataclass(eq=False)
class LLMPolicy:
    """A seat played by a language model behind ``client``.

    Args:
        client: anything with ``complete(requests) -> completions``.
        name: how the seat is named in transcripts and summaries ("openai:gpt-4o-mini").

    Attributes:
        stats: counts over every call this policy made or replayed.
        on_call: optional hook ``(agent, prompt, completion, parsed)`` after each call (the
            arena path; batched play writes its own transcript).
        on_call_error: in the arena path, a call that failed after its retries ``"stop"``s
            the episodes with :class:`SeatCallFailed` (so no metrics are reported as if the
            model had played), or plays as an ``"invalid"`` reply, counted in ``stats.errors``
            (batched play has the run's own option).
    """

    client: Client
    name: str = "model"
    stats: CallStats = field(default_factory=CallStats)
    on_call: Callable | None = None
    on_call_error: str = "stop"
    jittable = False

    def __post_init__(self):
        self.stats.output_requested = self.stats.output_requested or requested_output(self)
        self.notices: set[str] = set()  # notices printed once per process (an output fallback)
        self._env = None
        self._protocol: TextProtocol | None = None
        self._memory: dict[str, Any] = {}

    def ask(
        self,
        prompts: Sequence[Prompt],
        on_result: OnResult | None = None,
        cache_keys: Sequence[str | None] | None = None,
    ) -> list[Completion]:
        """One batched client call for ``prompts`` (in order); ``on_result(i, completion)`` as
        each finishes; ``cache_keys``: each request's response-cache key (``--cache``)."""
        if not prompts:
            return []
        keys = cache_keys or [None] * len(prompts)
        requests = [
            dataclasses.replace(ChatRequest.from_prompt(p), cache_key=k)
            for p, k in zip(prompts, keys, strict=True)
        ]
        completions = self.client.complete(requests, on_result)
        if len(completions) != len(prompts):
            raise RuntimeError(
                f"{self.name}: client returned {len(completions)} replies for {len(prompts)}"
            )
        return completions

    # ------------------------------------------------------------------ the arena's Python path
    def bind(self, env, protocol: TextProtocol) -> None:
        """Seats the policy in ``env`` with the game's ``protocol`` (the arena calls this)."""
        if protocol is None:
            raise ValueError(f"{env.name} has no text protocol, so a language model cannot play")
        self._env, self._protocol = env, protocol
        self._memory = {}

    def reset(self) -> None:
        """Episode start: each agent's memory moves on (``protocol.next_memory``)."""
        if self._protocol is None:
            return
        for agent in self._env.agents:
            old = self._memory.get(agent)
            self._memory[agent] = (
                self._protocol.new_memory(agent)
                if agent not in self._memory
                else self._protocol.next_memory(old, agent)
            )

    def __call__(self, key, observation) -> int:
        del key  # the model's sampling is the client's business
        if self._protocol is None:
            raise RuntimeError(
                "LLMPolicy plays through dilemmax.llm.play or an Arena (which binds it to the "
                "game's text protocol); call bind(env, protocol) first"
            )
        agent = self._env.agents[int(np.asarray(observation.agent_index))]
        if agent not in self._memory:
            self._memory[agent] = self._protocol.new_memory(agent)
        turn = self._protocol.turn(observation.state, agent, self._memory[agent])
        if isinstance(turn, NoReply):
            return int(turn.action)
        return int(self._exchange(agent, turn).action)

    def after_step(self, agent: str, state, actions, infos, next_state) -> None:
        """Feeds one transition to ``agent``'s memory; sends the reflect prompts it returns."""
        if self._protocol is None or agent not in self._memory:
            return
        memory = self._memory[agent]
        for prompt in self._protocol.after_step(memory, agent, state, actions, infos, next_state):
            self._exchange(agent, prompt)

    def end_episode(self, agent: str, final_state) -> None:
        if self._protocol is not None and agent in self._memory:
            self._protocol.after_episode(self._memory[agent], agent, final_state)

    def _exchange(self, agent: str, prompt: Prompt) -> ParsedReply:
        completion = self.ask([prompt])[0]
        if completion.error and self.on_call_error == "stop":
            raise SeatCallFailed(
                f"seat {agent} ({self.name}): a model call failed after "
                f"{completion.retries + 1} attempt(s): {completion.error[:300]}; check that its "
                "server runs at its base_url"
            )
        parsed = parse_safely(self._protocol, completion.text, prompt)
        self._protocol.after_reply(self._memory[agent], agent, prompt, completion.text, parsed)
        self.stats.add(completion, parsed if prompt.kind == "act" else None, replayed=False)
        if self.on_call is not None:
            self.on_call(agent, prompt, completion, parsed)
        return parsed
