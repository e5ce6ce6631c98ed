"""An OpenAI-compatible chat client (hosted APIs, vLLM, any ``/v1/chat/completions`` server).

Built on the official ``openai`` package, with its own retries turned off: retries are
``tenacity``'s jittered exponential backoff on 429, 5xx, timeouts, dropped connections and
replies that are not valid JSON. 401 / 403 / 404 raise :class:`FatalClientError` at once (a
wrong key or model name does not heal). A batch of requests runs on a thread pool of at most
``concurrency`` requests in flight.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import tenacity

from dilemmax.llm.client import ChatRequest, Completion, FatalClientError, OnResult


def _transient_errors() -> tuple[type[BaseException], ...]:
    import openai  # optional llm extra, slow to import: loaded when a client needs it

    return (
        openai.RateLimitError,
        openai.InternalServerError,
        openai.APITimeoutError,
        openai.APIConnectionError,
        openai.APIResponseValidationError,
        json.JSONDecodeError,
    )


def _fatal_errors() -> tuple[type[BaseException], ...]:
    import openai  # optional llm extra, slow to import: loaded when a client needs it

    return (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError)


def _describe(error: BaseException) -> str:
    status = getattr(error, "status_code", None)
    name = type(error).__name__
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{name}{f' {status}' if status else ''}: {text}"[:300]


class OpenAIClient:
    """Chat completions from an OpenAI-compatible server.

    Args:
        model: the model name the server knows.
        base_url: the server (``http://host:8000/v1`` for vLLM); None: OpenAI's API.
        api_key_env: environment variable holding the API key. If unset and ``base_url`` is
            given, the key "EMPTY" is sent (what vLLM accepts by default).
        temperature, top_p, max_tokens, seed: sampling options (seed only where the server
            takes one; None leaves an option to the server).
        structured_output: ask for the prompt's JSON schema as ``response_format`` when a request
            carries one; a server that rejects it (400) is asked again without it, and not asked
            with it again.
        timeout: seconds per attempt.
        max_attempts: attempts per request (first included).
        backoff, max_backoff: the jittered exponential backoff's initial and largest window (s).
        concurrency: requests in flight at once.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float | None = 0.0,
        top_p: float | None = None,
        max_tokens: int | None = 512,
        seed: int | None = None,
        structured_output: bool = True,
        timeout: float = 60.0,
        max_attempts: int = 6,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
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
        if max_attempts < 1 or concurrency < 1 or timeout <= 0:
            raise ValueError("max_attempts and concurrency must be >= 1 and timeout > 0")
        self.model = model
        self.base_url = base_url
        self.options = {
            k: v
            for k, v in {
                "temperature": temperature,
                "top_p": top_p,
                "max_tokens": max_tokens,
                "seed": seed,
            }.items()
            if v is not None
        }
        self.structured_output = bool(structured_output)
        self.max_attempts = int(max_attempts)
        self.backoff, self.max_backoff = float(backoff), float(max_backoff)
        self.concurrency = int(concurrency)
        self._openai = openai.OpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0
        )
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
            wait=tenacity.wait_random_exponential(multiplier=self.backoff, max=self.max_backoff),
            stop=tenacity.stop_after_attempt(self.max_attempts),
            reraise=True,
        )

    def _complete_one(self, request: ChatRequest) -> Completion:
        start = time.perf_counter()
        attempts = 0
        try:
            for attempt in self._retrying():
                with attempt:
                    attempts += 1
                    response = self._create(request)
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

    def _create(self, request: ChatRequest):
        kwargs: dict[str, Any] = dict(self.options)
        schema = request.json_schema
        if schema is not None and self.structured_output:
            kwargs["response_format"] = _response_format(schema)
        messages = [dict(m) for m in request.messages]
        try:
            return self._openai.chat.completions.create(
                model=self.model, messages=messages, **kwargs
            )
        except self._bad_request:
            if "response_format" not in kwargs:
                raise
            # The server has no structured output: ask again in plain text from now on.
            self.structured_output = False
            kwargs.pop("response_format")
            return self._openai.chat.completions.create(
                model=self.model, messages=messages, **kwargs
            )

    @staticmethod
    def _completion(response, latency: float, retries: int) -> Completion:
        choices = getattr(response, "choices", None) or []
        message = getattr(choices[0], "message", None) if choices else None
        text = getattr(message, "content", None) or ""
        usage = getattr(response, "usage", None)
        error = "" if choices else "the server sent no choices"
        return Completion(
            str(text),
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            latency_s=latency,
            retries=retries,
            error=error,
        )


def _response_format(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "reply", "schema": dict(schema)}}
