"""Dilemmax's chat requests and completions as Inspect AI's messages, configs and outputs.

The one translation between the two, used by :class:`dilemmax.llm.inspect_client.InspectClient`
(``inspect:`` seats) and by the Inspect tasks (:mod:`dilemmax.evals`), so a game's prompt reaches
a model the same way in ``dilemmax play`` and in ``inspect eval``. ``inspect_ai`` belongs to the
optional ``inspect`` extra, so it is imported inside the functions: this module imports without
it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dilemmax.llm.client import ChatRequest, Completion, token_count

ROLES = ("system", "user", "assistant")


def chat_messages(request: ChatRequest) -> list:
    """The request's messages as Inspect's ``ChatMessageSystem`` / ``User`` / ``Assistant``."""
    from inspect_ai.model import (  # optional inspect extra: loaded for Inspect's model API
        ChatMessageAssistant,
        ChatMessageSystem,
        ChatMessageUser,
    )

    kinds = {
        "system": ChatMessageSystem,
        "user": ChatMessageUser,
        "assistant": ChatMessageAssistant,
    }
    messages = []
    for message in request.messages:
        role = message.get("role")
        if role not in kinds:
            raise ValueError(f"a chat message's role must be one of {ROLES}, got {role!r}")
        messages.append(kinds[role](content=str(message.get("content", ""))))
    return messages


def chat_request(messages: Sequence, json_schema: Mapping[str, Any] | None = None) -> ChatRequest:
    """Inspect chat messages (system, user, assistant; tool messages are left out) as a
    :class:`ChatRequest`, their content as text."""
    out = [
        {"role": message.role, "content": message.text}
        for message in messages
        if message.role in ROLES
    ]
    return ChatRequest(tuple(out), json_schema)


def response_schema(json_schema: Mapping[str, Any] | None):
    """The prompt's JSON schema as Inspect's ``ResponseSchema`` (structured output); None if
    the prompt has none."""
    if json_schema is None:
        return None
    from inspect_ai.model import ResponseSchema  # optional inspect extra
    from inspect_ai.util import JSONSchema

    return ResponseSchema(name="reply", json_schema=JSONSchema.model_validate(dict(json_schema)))


def generate_config(
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    presence_penalty: float | None = None,
    max_tokens: int | None = None,
    seed: int | None = None,
    reasoning_effort: str | None = None,
    reasoning_tokens: int | None = None,
    timeout: float | None = None,
    concurrency: int | None = None,
    max_retries: int | None = None,
):
    """An Inspect ``GenerateConfig`` from a seat's options (None: the provider's default).

    ``timeout`` is per attempt (Inspect's ``attempt_timeout``, whole seconds, rounded up);
    ``concurrency`` is Inspect's ``max_connections``; ``max_retries`` is Inspect's own retries
    (the seat's client retries itself and passes 0).
    """
    from inspect_ai.model import GenerateConfig  # optional inspect extra

    options = {
        "temperature": temperature,
        "top_p": top_p,
        "top_k": top_k,
        "presence_penalty": presence_penalty,
        "max_tokens": max_tokens,
        "seed": seed,
        "reasoning_effort": reasoning_effort,
        "reasoning_tokens": reasoning_tokens,
        "attempt_timeout": None if timeout is None else max(1, math.ceil(timeout)),
        "max_connections": concurrency,
        "max_retries": max_retries,
    }
    return GenerateConfig(**{k: v for k, v in options.items() if v is not None})


def request_config(request: ChatRequest, output: str, extra_body: Mapping[str, Any] | None = None):
    """What one request adds to the seat's config: its schema as structured output
    (``output="json_schema"``), JSON mode as the OpenAI-compatible ``response_format``
    (``"json_object"``: providers of that API only), or nothing (``"text"``); and the seat's
    ``extra_body`` fields (Inspect replaces, not merges, a config's ``extra_body``)."""
    from inspect_ai.model import GenerateConfig  # optional inspect extra

    body = dict(extra_body or {})
    schema = None
    if request.json_schema is not None and output == "json_object":
        body["response_format"] = {"type": "json_object"}
    elif request.json_schema is not None and output == "json_schema":
        schema = response_schema(request.json_schema)
    return GenerateConfig(response_schema=schema, extra_body=body or None)


def completion_from_output(output, latency_s: float = 0.0, retries: int = 0) -> Completion:
    """An Inspect ``ModelOutput`` as a :class:`Completion`: the first choice's text and the
    provider's token counts (input, output and reasoning; 0 where it reported none). Read
    totally: an output of an odd shape keeps what it has.

    Inspect's ``input_tokens`` are the prompt tokens billed at the full rate, beside its cache
    reads (``input_tokens_cache_read``: Anthropic's cache hits, OpenAI's cached tokens) and
    writes (``input_tokens_cache_write``); the prompt tokens are all three, as Inspect's own
    ``usage_input_tokens`` counts them, and the cache reads are the cached tokens."""
    text = getattr(output, "completion", "")
    usage = getattr(output, "usage", None)
    read = token_count(getattr(usage, "input_tokens_cache_read", None))
    write = token_count(getattr(usage, "input_tokens_cache_write", None))
    return Completion(
        text if isinstance(text, str) else "",
        prompt_tokens=token_count(getattr(usage, "input_tokens", None)) + read + write,
        cached_tokens=read,
        cache_write_tokens=write,
        completion_tokens=token_count(getattr(usage, "output_tokens", None)),
        latency_s=latency_s,
        retries=retries,
        reasoning_tokens=token_count(getattr(usage, "reasoning_tokens", None)),
    )
