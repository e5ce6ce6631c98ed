"""An OpenAI-compatible chat client (hosted APIs, vLLM, any ``/v1/chat/completions`` server).

Asynchronous underneath: every call of a batch is a coroutine on the clients' one background
event loop (:mod:`dilemmax.llm.aio`), over the process's kept-alive connections
(:mod:`dilemmax.llm.chat_http`), at most ``concurrency`` in flight, and no thread per call; the
harness sees a synchronous ``complete``. (The official ``openai`` package spent about 2 ms of
CPU per call on building and validating objects, which bound batched play at ~400 calls/s.)

Retries (:mod:`dilemmax.llm.retrying`) are a jittered exponential backoff on 429,
5xx, timeouts, dropped connections, replies that are not valid JSON and replies with no choices.
A 429 or 503 that says when to come back (``Retry-After`` in seconds or as an HTTP date, or
``retry-after-ms``) is retried no sooner than that, up to ``max_retry_after`` seconds, with the
jitter only added above it. 401 / 403 / 404 raise :class:`FatalClientError` at once (a wrong
key or model name does not heal). Several base URLs are replicas of one model: each call goes
to the one with the fewest calls outstanding.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Mapping
from typing import Any

from dilemmax.llm import aio, sampling
from dilemmax.llm.chat_http import (
    APIConnectionError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ChatTransport,
    InternalServerError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
)
from dilemmax.llm.client import (
    ChatRequest,
    Completion,
    FatalClientError,
    asked_output,
    token_count,
)
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.retrying import RetryPolicy, describe_error

# The defaults of the options a client shares with a model seat, declared by GenerateConfig.
DEFAULT = GenerateConfig()


class NoChoices(ValueError):
    """A reply without a single choice: a server's glitch, retried like a malformed reply."""


TRANSIENT_ERRORS = (
    RateLimitError,
    InternalServerError,
    APITimeoutError,
    APIConnectionError,
    json.JSONDecodeError,
    NoChoices,
)
FATAL_ERRORS = (AuthenticationError, PermissionDeniedError, NotFoundError)


def _transient(error: BaseException) -> bool:
    return isinstance(error, TRANSIENT_ERRORS)


class OpenAIClient(aio.BatchedClient):
    """Chat completions from an OpenAI-compatible server.

    Args:
        model: the model name the server knows.
        config: how it is asked (every field checked, an :class:`OptionError` naming the one
            out of range): ``base_url`` the server (``http://host:8000/v1`` for vLLM), or
            several replicas of the same model, each call going to the one with the fewest
            calls outstanding (None: OpenAI's API); ``api_key_env`` the variable holding the
            key (unset with a ``base_url``: the key "EMPTY" is sent, what vLLM accepts);
            sampling (``top_k`` and ``seed`` only where the server takes them; None leaves an
            option to the server; ``reasoning_tokens`` has no OpenAI spelling and is not
            sent); ``output``, how a reply is asked for when the request carries a JSON
            schema: ``json_schema`` (structured output), ``json_object`` (JSON mode) or
            ``text``. A server that rejects the ``response_format`` (400) is asked again
            without it (a retry, counted), and not asked with it again; that completion
            carries the refusal (``Completion.output_refused``) and every completion the mode
            it was asked in. ``timeout`` per attempt, ``max_attempts`` per request (the first
            included), ``concurrency`` requests in flight over all replicas together.
        retry: how long to wait between attempts (:class:`~dilemmax.llm.retrying.RetryPolicy`).

    Raises:
        OptionError: an option outside its range (a ValueError naming the option).
        FatalClientError: no key in ``api_key_env`` and no ``base_url``.
    """

    def __init__(
        self, model: str, config: GenerateConfig = DEFAULT, retry: RetryPolicy = RetryPolicy()
    ):
        config = config.check()
        variable = config.api_key_env or DEFAULT.api_key_env
        api_key = os.environ.get(variable)
        if not api_key:
            if config.base_url is None:
                raise FatalClientError(
                    f"no API key: set the environment variable {variable} (or pass a "
                    "--base-url for a local server)"
                )
            api_key = "EMPTY"
        self.model = model
        self.base_urls = config.base_url
        self.base_url = "|".join(self.base_urls) if self.base_urls else None
        self.options = sampling.sampling_options(
            temperature=config.temperature, top_p=config.top_p, top_k=config.top_k,
            presence_penalty=config.presence_penalty, max_tokens=config.max_tokens,
            seed=config.seed, reasoning_effort=config.reasoning_effort,
        )  # fmt: skip
        self.output = config.output
        self.requested_output = self.output  # what the seat asked for; .output is what holds
        self.concurrency = config.concurrency
        self.max_attempts = config.max_attempts
        self.retry = retry
        self._transport = ChatTransport(self.base_urls, api_key, config.timeout)
        self._in_flight: dict = {}  # the semaphore bounding calls in flight, made on the loop

    @property
    def sent(self) -> list[int]:
        """Attempts sent to each replica so far (in ``base_urls`` order)."""
        return list(self._transport.replicas.sent)

    @property
    def structured_output(self) -> bool:
        """Whether replies are asked for in a JSON format (schema or JSON mode)."""
        return self.output != "text"

    # ------------------------------------------------------------------ one request
    async def _attempts(self, request: ChatRequest) -> Completion:
        start = time.perf_counter()
        attempts = 0
        mode, refused = asked_output(request, self.output), ""

        async def attempt():
            nonlocal attempts, mode, refused
            attempts += 1
            mode = asked_output(request, self.output)
            try:
                response = await self._create(request, mode)
            except BadRequestError as error:
                if mode in ("", "text"):
                    raise
                # Asked again in plain text: answered, the server has no structured output and
                # the seat stays in text; refused too (raised), the 400 was about something else.
                attempts += 1
                response = await self._create(request, "text")
                self.output, mode, refused = "text", "text", describe_error(error)
            if not _field(response, "choices"):
                raise NoChoices("the server's reply held no choices")
            return response

        try:
            response = await self.retry.call(attempt, _transient, self.max_attempts)
        except FATAL_ERRORS as error:
            where = self.base_url or "OpenAI API"
            raise FatalClientError(
                f"{where} refused model {self.model!r}: {describe_error(error)}"
            ) from error
        except Exception as error:  # a failed call is recorded, never raised into the game
            return Completion(
                "",
                latency_s=time.perf_counter() - start,
                retries=attempts - 1,
                error=describe_error(error),
                output=mode,
                output_refused=refused,
            )
        completion = self._completion(response, time.perf_counter() - start, attempts - 1)
        return dataclasses.replace(completion, output=mode, output_refused=refused)

    async def _create(self, request: ChatRequest, output: str):
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in request.messages],
            **self.options,
        }
        response_format = _response_format(request.json_schema, output)
        if response_format is not None:
            body["response_format"] = response_format
        return await self._transport.post(body)

    @staticmethod
    def _completion(response, latency: float, retries: int) -> Completion:
        """The reply's text and token counts, read totally: a reply of an odd shape (a refusal,
        a tool call, usage that is not counts) keeps what it has and never raises."""
        choices = _field(response, "choices")
        choices = choices if isinstance(choices, list | tuple) else []
        message = _field(choices[0], "message") if choices else None
        text = _field(message, "content")
        text = text if isinstance(text, str) else ""  # a refusal or tool call: no reply text
        usage = _field(response, "usage")
        details = _field(usage, "completion_tokens_details")
        prompt_tokens = token_count(_field(usage, "prompt_tokens"))
        # OpenAI's prompt caching and vLLM's prefix caching report the prompt tokens they read
        # from the cache here (never more than the prompt: a larger count is not believed).
        cached = token_count(_field(_field(usage, "prompt_tokens_details"), "cached_tokens"))
        return Completion(
            text,
            prompt_tokens=prompt_tokens,
            cached_tokens=cached if cached <= prompt_tokens else 0,
            completion_tokens=token_count(_field(usage, "completion_tokens")),
            latency_s=latency,
            retries=retries,
            reasoning_tokens=token_count(_field(details, "reasoning_tokens")),
        )


def _field(value: Any, name: str) -> Any:
    """``value[name]`` of a JSON object, or ``value.name`` of a response object; None if absent."""
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def _response_format(schema: Mapping[str, Any] | None, output: str) -> dict[str, Any] | None:
    """The ``response_format`` of a request whose prompt carries ``schema`` (None: none)."""
    if schema is None or output == "text":
        return None
    if output == "json_object":
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": "reply", "schema": dict(schema)}}
