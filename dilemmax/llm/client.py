"""The client protocol: chat messages in, text + token counts + latency out, in batches.

Every client takes a list of :class:`ChatRequest` and returns one :class:`Completion` per
request, in order; it also calls ``on_result(index, completion)`` as each request finishes, so
the harness can record every call the moment it returns (a crash then loses only calls that were
still in flight). A request that still fails after the client's retries comes back as a
``Completion`` with ``error`` set and empty text (the harness then plays the game's invalid
action and counts it); only errors that no retry can fix (a wrong API key, an unknown model)
raise :class:`FatalClientError`, which stops a run with its message.

Clients here: :class:`ScriptedClient` (tests), :class:`dilemmax.llm.openai_client.OpenAIClient`
(any OpenAI-compatible server: hosted APIs, vLLM),
:class:`dilemmax.llm.inspect_client.InspectClient` (every provider of Inspect AI's model API)
and :class:`dilemmax.llm.hf_client.TransformersClient` (a local causal LM, one batched
``generate``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from dilemmax.envs.text import Prompt

OnResult = Callable[[int, "Completion"], None]
"""``on_result(index, completion)``: called once per request as soon as it has finished."""


class FatalClientError(RuntimeError):
    """An error retrying cannot fix (401 bad key, 404 unknown model): the run stops."""


@dataclass(frozen=True)
class ChatRequest:
    """One chat call.

    Attributes:
        messages: ``[{"role": "system" | "user" | "assistant", "content": str}, ...]``.
        json_schema: JSON schema of the expected reply, for servers with structured output.
        cache_key: the request's key in the run's response cache (``--cache``,
            :mod:`dilemmax.llm.cache`; None: no cache). An ``inspect:`` seat hands it to
            Inspect's own cache as a scope, so Inspect keeps one reply per sample too.
    """

    messages: tuple[Mapping[str, str], ...]
    json_schema: Mapping[str, Any] | None = None
    cache_key: str | None = None

    @classmethod
    def from_prompt(cls, prompt: Prompt) -> ChatRequest:
        """The system message (when the prompt has one) and the user message of ``prompt``."""
        messages = []
        if prompt.system:
            messages.append({"role": "system", "content": prompt.system})
        messages.append({"role": "user", "content": prompt.user})
        return cls(tuple(messages), prompt.json_schema)


@dataclass(frozen=True)
class Completion:
    """A client's answer to one request.

    Attributes:
        text: the reply ("" when the call failed).
        prompt_tokens, completion_tokens: as counted by the server or tokenizer (0 if unknown).
        latency_s: wall time of the call, retries and backoff included.
        retries: attempts beyond the first.
        error: why the call failed after its retries ("" on success).
        reasoning_tokens: of the completion tokens, those the model spent thinking, as the
            provider reports them (0 if unknown or none).
        output: the output mode the reply was asked in, for a request that carried a JSON
            schema (``"json_schema"``, ``"json_object"`` or ``"text"``); "" when the request had
            none or the client does not say (scripted and local-model clients).
        output_refused: the server's refusal of this request's structured form (a 400 to its
            ``response_format``), when the client asked again in plain text ("" otherwise). The
            retry counts in ``retries``.
        cached_tokens: of the prompt tokens, those the server read from its prompt cache
            (OpenAI's and vLLM's ``usage.prompt_tokens_details.cached_tokens``, Anthropic's
            cache reads through Inspect); 0 if none or unknown. Priced at the cached rate.
        cache_write_tokens: of the prompt tokens, those the server wrote into its cache
            (Anthropic's cache writes through Inspect); 0 if none or unknown.
    """

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    retries: int = 0
    error: str = ""
    reasoning_tokens: int = 0
    output: str = ""
    output_refused: str = ""
    cached_tokens: int = 0
    cache_write_tokens: int = 0


def asked_output(request: ChatRequest, output: str) -> str:
    """The output mode ``request`` is asked in under a seat's mode ``output`` ("" when the
    request carries no schema, so no mode applies)."""
    return output if request.json_schema is not None else ""


@runtime_checkable
class Client(Protocol):
    """Anything with ``complete(requests, on_result) -> completions`` (same length and order)."""

    def complete(
        self, requests: Sequence[ChatRequest], on_result: OnResult | None = None
    ) -> list[Completion]: ...


@dataclass
class ScriptedClient:
    """Replies from a Python function of the request, for tests and demos.

    Args:
        reply: request -> reply text; or a list of texts served in order (cycled).

    Attributes:
        calls: every request received, in order.
    """

    reply: Callable[[ChatRequest], str] | Sequence[str]
    calls: list[ChatRequest] = field(default_factory=list)

    def complete(
        self, requests: Sequence[ChatRequest], on_result: OnResult | None = None
    ) -> list[Completion]:
        out = []
        for index, request in enumerate(requests):
            start = time.perf_counter()
            if callable(self.reply):
                text = str(self.reply(request))
            else:
                text = str(self.reply[len(self.calls) % len(self.reply)])
            self.calls.append(request)
            prompt_words = sum(len(str(m.get("content", "")).split()) for m in request.messages)
            out.append(
                Completion(
                    text,
                    prompt_tokens=prompt_words,
                    completion_tokens=len(text.split()),
                    latency_s=time.perf_counter() - start,
                )
            )
            if on_result is not None:
                on_result(index, out[-1])
        return out


def token_count(value: Any) -> int:
    """A token count as a provider reported it, 0 when it is not a count (the reply itself is
    still good: a bad usage field must not lose it)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def last_user_message(request: ChatRequest) -> str:
    """The text of the request's last user message ("" if none)."""
    for message in reversed(request.messages):
        if message.get("role") == "user":
            return str(message.get("content", ""))
    return ""
