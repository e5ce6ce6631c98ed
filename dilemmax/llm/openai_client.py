"""An OpenAI-compatible chat client (hosted APIs, vLLM, any ``/v1/chat/completions`` server).

Built on the official ``openai`` package, with its own retries turned off: retries are
``tenacity``'s jittered exponential backoff on 429, 5xx, timeouts, dropped connections, replies
that are not valid JSON and replies with no choices. A 429 or 503 that says when to come back
(``Retry-After`` in seconds or as an HTTP date, or ``retry-after-ms``) is retried no sooner than
that, up to ``max_retry_after`` seconds, with the jitter only added above it. 401 / 403 / 404
raise :class:`FatalClientError` at once (a wrong key or model name does not heal). A batch of
requests runs on a thread pool of at most ``concurrency`` requests in flight.
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import random
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import tenacity

from dilemmax.llm import sampling
from dilemmax.llm.client import ChatRequest, Completion, FatalClientError, OnResult


class NoChoices(ValueError):
    """A reply without a single choice: a server's glitch, retried like a malformed reply."""


def _transient_errors() -> tuple[type[BaseException], ...]:
    import openai  # optional llm extra, slow to import: loaded when a client needs it

    return (
        openai.RateLimitError,
        openai.InternalServerError,
        openai.APITimeoutError,
        openai.APIConnectionError,
        openai.APIResponseValidationError,
        json.JSONDecodeError,
        NoChoices,
    )


def _fatal_errors() -> tuple[type[BaseException], ...]:
    import openai  # optional llm extra, slow to import: loaded when a client needs it

    return (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError)


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
        import openai  # optional llm extra, slow to import: loaded when a client needs it

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
        self._replicas = [
            openai.OpenAI(base_url=url, api_key=api_key, timeout=timeout, max_retries=0)
            for url in self.base_urls or [None]
        ]
        self.outstanding = [0] * len(self._replicas)  # calls in flight per replica
        self.sent = [0] * len(self._replicas)  # attempts sent per replica
        self._pick_lock = threading.Lock()
        self._transient = _transient_errors()
        self._fatal = _fatal_errors()
        self._bad_request = openai.BadRequestError

    def complete(
        self, requests: Sequence[ChatRequest], on_result: OnResult | None = None
    ) -> list[Completion]:
        def one(index: int) -> Completion:
            completion = self._complete_one(requests[index])
            if on_result is not None:
                on_result(index, completion)
            return completion

        if len(requests) <= 1:
            return [one(i) for i in range(len(requests))]
        with ThreadPoolExecutor(min(self.concurrency, len(requests))) as pool:
            return list(pool.map(one, range(len(requests))))

    # ------------------------------------------------------------------ one request
    def _retrying(self) -> tenacity.Retrying:
        return tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(self._transient),
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

    def _complete_one(self, request: ChatRequest) -> Completion:
        start = time.perf_counter()
        attempts = 0
        try:
            for attempt in self._retrying():
                with attempt:
                    attempts += 1
                    response = self._create(request)
                    if not getattr(response, "choices", None):
                        raise NoChoices("the server's reply held no choices")
        except self._fatal as error:
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

    @property
    def structured_output(self) -> bool:
        """Whether replies are asked for in a JSON format (schema or JSON mode)."""
        return self.output != "text"

    def _create(self, request: ChatRequest):
        kwargs: dict[str, Any] = dict(self.options)
        if "top_k" in kwargs:  # not a parameter of OpenAI's own API: sent as an extra field
            kwargs["extra_body"] = {"top_k": kwargs.pop("top_k")}
        response_format = _response_format(request.json_schema, self.output)
        if response_format is not None:
            kwargs["response_format"] = response_format
        messages = [dict(m) for m in request.messages]
        try:
            return self._send(messages, kwargs)
        except self._bad_request:
            if "response_format" not in kwargs:
                raise
            # The server has no structured output: ask again in plain text from now on.
            self.output = "text"
            kwargs.pop("response_format")
            return self._send(messages, kwargs)

    def _send(self, messages, kwargs):
        """One attempt, to the replica with the fewest calls in flight (on a tie, the one sent
        the fewest so far)."""
        with self._pick_lock:
            replica = min(
                range(len(self._replicas)), key=lambda r: (self.outstanding[r], self.sent[r])
            )
            self.outstanding[replica] += 1
            self.sent[replica] += 1
        try:
            return self._replicas[replica].chat.completions.create(
                model=self.model, messages=messages, **kwargs
            )
        finally:
            with self._pick_lock:
                self.outstanding[replica] -= 1

    @staticmethod
    def _completion(response, latency: float, retries: int) -> Completion:
        choices = getattr(response, "choices", None) or []
        message = getattr(choices[0], "message", None) if choices else None
        text = getattr(message, "content", None)
        text = text if isinstance(text, str) else ""  # a refusal or tool call: no reply text
        usage = getattr(response, "usage", None)
        return Completion(
            text,
            prompt_tokens=_count(getattr(usage, "prompt_tokens", 0)),
            completion_tokens=_count(getattr(usage, "completion_tokens", 0)),
            latency_s=latency,
            retries=retries,
        )


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
