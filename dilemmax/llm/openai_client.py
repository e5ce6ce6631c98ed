"""An OpenAI-compatible chat client (hosted APIs, vLLM, any ``/v1/chat/completions`` server).

Asynchronous underneath: every call of a batch is a coroutine on the clients' one background
event loop (:mod:`dilemmax.llm.aio`), over the process's kept-alive connections
(:mod:`dilemmax.llm.chat_http`), at most ``concurrency`` in flight, and no thread per call; the
harness sees a synchronous ``complete``. (The official ``openai`` package spent about 2 ms of
CPU per call on building and validating objects, which bound batched play at ~400 calls/s.)

Retries are ``tenacity``'s jittered exponential backoff on 429, 5xx, timeouts, dropped
connections, replies that are not valid JSON and replies with no choices. A 429 or 503 that says
when to come back (``Retry-After`` in seconds or as an HTTP date, or ``retry-after-ms``) is
retried no sooner than that, up to ``max_retry_after`` seconds, with the jitter only added above
it. 401 / 403 / 404 raise :class:`FatalClientError` at once (a wrong key or model name does not
heal). Several base URLs are replicas of one model: each call goes to the one with the fewest
calls outstanding.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import os
import random
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import tenacity

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
from dilemmax.llm.client import ChatRequest, Completion, FatalClientError, OnResult


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


def _describe(error: BaseException) -> str:
    status = getattr(error, "status_code", None)
    name = type(error).__name__
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{name}{f' {status}' if status else ''}: {text}"[:300]


def retry_after(error: BaseException | None) -> float | None:
    """Seconds the server asked the client to wait (``retry-after-ms``, or ``Retry-After`` as
    seconds or an HTTP date), None when it did not say or said something unreadable."""
    headers = getattr(getattr(error, "response", None), "headers", None)
    if headers is None:
        return None
    try:
        millis = headers.get("retry-after-ms")
        if millis is not None:
            return _seconds(float(str(millis)[:40]) / 1000)
        text = headers.get("retry-after")
        return None if text is None else parse_retry_after(str(text))
    except (AttributeError, TypeError, ValueError):  # headers of an unexpected shape
        return None


def parse_retry_after(text: str, now: datetime | None = None) -> float | None:
    """A ``Retry-After`` value in seconds from now: ``"3"`` or an HTTP date; None if neither.

    Total on any text (long values are not numbers, and the date parser is linear)."""
    text = text.strip()[:100]
    try:
        return _seconds(float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT
        when = when.replace(tzinfo=UTC)
    return _seconds((when - (now or datetime.now(UTC))).total_seconds())


def _seconds(value: float) -> float | None:
    return max(0.0, value) if math.isfinite(value) else None


class OpenAIClient:
    """Chat completions from an OpenAI-compatible server.

    Args:
        model: the model name the server knows.
        base_url: the server (``http://host:8000/v1`` for vLLM), or several replicas of the same
            model (a sequence, or text joined by ``|``): each call goes to the one with the
            fewest calls outstanding. None: OpenAI's API.
        api_key_env: environment variable holding the API key. If unset and ``base_url`` is
            given, the key "EMPTY" is sent (what vLLM accepts by default).
        temperature, top_p, top_k, presence_penalty, max_tokens, seed: sampling options (top_k
            and seed only where the server takes them; None leaves an option to the server).
        reasoning_effort: asked of reasoning models (``"low"``, ...); None: the server's default.
        output: how a reply is asked for when the request carries a JSON schema:
            ``"json_schema"`` (structured output), ``"json_object"`` (JSON mode) or ``"text"``.
            A server that rejects the ``response_format`` (400) is asked again without it, and
            not asked with it again.
        structured_output: False is ``output="text"`` (the older spelling).
        timeout: seconds per attempt.
        max_attempts: attempts per request (first included).
        backoff, max_backoff: the jittered exponential backoff's initial and largest window (s).
        max_retry_after: the longest wait a server's ``Retry-After`` is honoured up to (s).
        concurrency: requests in flight at once.

    Raises:
        OptionError: an option outside its range (a ValueError naming the option).
    """

    def __init__(
        self,
        model: str,
        base_url: str | Sequence[str] | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float | None = 0.0,
        top_p: float | None = None,
        max_tokens: int | None = 512,
        seed: int | None = None,
        structured_output: bool = True,
        top_k: int | None = None,
        presence_penalty: float | None = None,
        reasoning_effort: str | None = None,
        output: str = "json_schema",
        timeout: float = 60.0,
        max_attempts: int = 6,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        max_retry_after: float = 60.0,
        concurrency: int = 16,
    ):
        api_key = os.environ.get(api_key_env)
        if not api_key:
            if base_url is None:
                raise FatalClientError(
                    f"no API key: set the environment variable {api_key_env} (or pass a "
                    "--base-url for a local server)"
                )
            api_key = "EMPTY"
        self.model = model
        self.base_urls = _base_urls(base_url)
        self.base_url = "|".join(self.base_urls) if self.base_urls else None
        sent = {
            "temperature": temperature,
            "top_p": top_p,
            "top_k": top_k,
            "presence_penalty": presence_penalty,
            "max_tokens": max_tokens,
            "seed": seed,
        }
        self.options = {
            k: sampling.check_option(v, sampling.OPENAI[k], k)
            for k, v in sent.items()
            if v is not None
        }
        if reasoning_effort is not None:
            effort = sampling.GENERATION["reasoning_effort"]
            self.options["reasoning_effort"] = effort.check(reasoning_effort, "reasoning_effort")
        self.output = sampling.GENERATION["output"].check(output, "output")
        if not structured_output:
            self.output = "text"
        timeout = sampling.check_option(timeout, sampling.CLIENT["timeout"], "timeout")
        self.max_attempts = sampling.check_option(
            max_attempts, sampling.CLIENT["max_attempts"], "max_attempts"
        )
        self.concurrency = sampling.check_option(
            concurrency, sampling.CLIENT["concurrency"], "concurrency"
        )
        waits = sampling.Range("float", 0.0)
        self.backoff = sampling.check_option(backoff, waits, "backoff")
        self.max_backoff = sampling.check_option(max_backoff, waits, "max_backoff")
        self.max_retry_after = sampling.check_option(max_retry_after, waits, "max_retry_after")
        self._transport = ChatTransport(self.base_urls, api_key, timeout)
        self._in_flight: asyncio.Semaphore | None = None  # made on the loop, at the first call

    @property
    def sent(self) -> list[int]:
        """Attempts sent to each replica so far (in ``base_urls`` order)."""
        return list(self._transport.replicas.sent)

    @property
    def structured_output(self) -> bool:
        """Whether replies are asked for in a JSON format (schema or JSON mode)."""
        return self.output != "text"

    def complete(
        self, requests: Sequence[ChatRequest], on_result: OnResult | None = None
    ) -> list[Completion]:
        calls = [lambda request=request: self._complete_one(request) for request in requests]
        return aio.run_batch(calls, on_result)

    # ------------------------------------------------------------------ one request
    def _retrying(self) -> tenacity.AsyncRetrying:
        return tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception_type(TRANSIENT_ERRORS),
            wait=self._wait,
            stop=tenacity.stop_after_attempt(self.max_attempts),
            reraise=True,
        )

    def _wait(self, state: tenacity.RetryCallState) -> float:
        """The server's Retry-After (capped) plus jitter above it, or the jittered backoff."""
        asked = retry_after(state.outcome.exception() if state.outcome else None)
        if asked is None:
            backoff = tenacity.wait_random_exponential(
                multiplier=self.backoff, max=self.max_backoff
            )
            return backoff(state)
        return min(asked, self.max_retry_after) + random.uniform(0.0, self.backoff)

    async def _complete_one(self, request: ChatRequest) -> Completion:
        if self._in_flight is None:  # on the loop's thread: no other coroutine runs meanwhile
            self._in_flight = asyncio.Semaphore(self.concurrency)
        async with self._in_flight:
            return await self._attempts(request)

    async def _attempts(self, request: ChatRequest) -> Completion:
        start = time.perf_counter()
        attempts = 0
        try:
            async for attempt in self._retrying():
                with attempt:
                    attempts += 1
                    response = await self._create(request)
                    if not _field(response, "choices"):
                        raise NoChoices("the server's reply held no choices")
        except FATAL_ERRORS as error:
            raise FatalClientError(
                f"{self.base_url or 'OpenAI API'} refused model {self.model!r}: {_describe(error)}"
            ) from error
        except Exception as error:  # a failed call is recorded, never raised into the game
            return Completion(
                "",
                latency_s=time.perf_counter() - start,
                retries=attempts - 1,
                error=_describe(error),
            )
        return self._completion(response, time.perf_counter() - start, attempts - 1)

    async def _create(self, request: ChatRequest):
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [dict(m) for m in request.messages],
            **self.options,
        }
        response_format = _response_format(request.json_schema, self.output)
        if response_format is not None:
            body["response_format"] = response_format
        try:
            return await self._transport.post(body)
        except BadRequestError:
            if "response_format" not in body:
                raise
            # The server has no structured output: ask again in plain text from now on.
            self.output = "text"
            body.pop("response_format")
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
        return Completion(
            text,
            prompt_tokens=_count(_field(usage, "prompt_tokens")),
            completion_tokens=_count(_field(usage, "completion_tokens")),
            latency_s=latency,
            retries=retries,
            reasoning_tokens=_count(_field(details, "reasoning_tokens")),
        )


def _field(value: Any, name: str) -> Any:
    """``value[name]`` of a JSON object, or ``value.name`` of a response object; None if absent."""
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def _count(value: Any) -> int:
    """A token count as the server reported it, 0 when it is not a count (the reply itself is
    still good: a bad usage field must not lose it)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _response_format(schema: Mapping[str, Any] | None, output: str) -> dict[str, Any] | None:
    """The ``response_format`` of a request whose prompt carries ``schema`` (None: none)."""
    if schema is None or output == "text":
        return None
    if output == "json_object":
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": "reply", "schema": dict(schema)}}


def _base_urls(base_url: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if base_url is None:
        return None
    urls = sampling.URLS.check(
        base_url if isinstance(base_url, str) else "|".join(base_url), "base_url"
    )
    return urls
