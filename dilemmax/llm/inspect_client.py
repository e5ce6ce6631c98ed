"""Seats backed by Inspect AI's model API: ``inspect:<provider>/<model>``.

Inspect (``inspect_ai``, the optional ``inspect`` extra, imported when such a seat is built)
reaches the lab APIs (``openai/``, ``anthropic/``, ``google/``, ``mistral/``, ``grok/``), the
clouds, hosted open models (``together/``, ``groq/``, ``openrouter/``) and local servers
(``vllm/<model>`` or ``openai-api/<name>/<model>`` with a ``base_url``, ``ollama/``, ``hf/``),
plus its mock model (``mockllm/model``). The seat's options become a ``GenerateConfig``
(:mod:`dilemmax.llm.inspect_messages`); each request adds its JSON schema as structured output.

Inspect's ``generate`` is asynchronous: every call of a batch is a coroutine on the clients'
background event loop (:mod:`dilemmax.llm.aio`). Retries are this client's, as for
:class:`~dilemmax.llm.openai_client.OpenAIClient` (:mod:`dilemmax.llm.retrying`), so they are
counted the same way: Inspect's own are turned off (``max_retries=0``, and the provider SDK's
where its client takes the option), and which error is worth retrying is the provider's own
verdict (``Model.should_retry``: rate limits, overload, timeouts), with its Retry-After. A
401 / 403 / 404 stops the run (:class:`FatalClientError`). Token counts, reasoning tokens
included, are the provider's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from dilemmax.llm import aio, sampling
from dilemmax.llm.chat_http import Replicas
from dilemmax.llm.client import ChatRequest, Completion, FatalClientError
from dilemmax.llm.inspect_messages import (
    chat_messages,
    completion_from_output,
    generate_config,
    request_config,
)
from dilemmax.llm.retrying import RetryPolicy, describe_error, retry_after

# Providers whose SDK client takes ``max_retries`` (OpenAI's and Anthropic's SDKs): 0 there, so
# no retry happens out of this client's sight. Others retry (or not) inside their SDKs.
SDK_RETRY_PROVIDERS = frozenset(
    {"openai", "openai-api", "vllm", "sglang", "together", "groq", "fireworks", "openrouter",
     "deepseek", "grok", "ollama", "llama-cpp-python", "perplexity", "sambanova", "moonshot",
     "cloudflare", "litellm", "hf-inference-providers", "anthropic"}
)  # fmt: skip
# OpenAI-compatible providers whose servers take top_k (vLLM, SGLang, ...) but to which Inspect
# does not send it: it goes in the request's extra fields.
TOP_K_IN_BODY = frozenset(
    {"openai-api", "vllm", "sglang", "together", "fireworks", "openrouter", "ollama",
     "llama-cpp-python"}
)  # fmt: skip
FATAL_STATUS = (401, 403, 404)


class InspectClient(aio.BatchedClient):
    """Chat completions through Inspect AI's model API.

    Args:
        model: ``<provider>/<model>`` as Inspect names it, or an Inspect ``Model``.
        base_url: the server(s) (several replicas of one model as a sequence or joined by
            ``|``: each call goes to the one with the fewest calls outstanding); None: the
            provider's default.
        api_key_env: environment variable holding the key; None: the provider's own variable
            (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ...).
        temperature, top_p, top_k, presence_penalty, max_tokens, seed, reasoning_effort,
        reasoning_tokens: sampling and reasoning options (None: the provider's default).
        output: ``"json_schema"`` (the prompt's schema as structured output), ``"json_object"``
            (JSON mode, OpenAI-compatible providers) or ``"text"``. A 400 to a structured
            request drops to text from then on.
        timeout: seconds per attempt; max_attempts: attempts per request (first included);
        backoff, max_backoff, max_retry_after: as :class:`~dilemmax.llm.retrying.RetryPolicy`.
        concurrency: requests in flight at once, over all replicas together.
        model_args: further provider arguments (``custom_outputs`` of ``mockllm/model``, ...).

    Raises:
        OptionError: an option outside its range.
        FatalClientError: a model Inspect cannot build (unknown provider, missing key, package).
    """

    def __init__(
        self,
        model: Any,
        base_url: str | Sequence[str] | None = None,
        api_key_env: str | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        presence_penalty: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        reasoning_effort: str | None = None,
        reasoning_tokens: int | None = None,
        output: str = "json_schema",
        timeout: float = 60.0,
        max_attempts: int = 6,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        max_retry_after: float = 60.0,
        concurrency: int = 16,
        model_args: dict[str, Any] | None = None,
    ):
        options = sampling.sampling_options(
            temperature=temperature, top_p=top_p, top_k=top_k, presence_penalty=presence_penalty,
            max_tokens=max_tokens, seed=seed, reasoning_effort=reasoning_effort,
            reasoning_tokens=reasoning_tokens,
        )  # fmt: skip
        self.output = sampling.GENERATION["output"].check(output, "output")
        timeout = sampling.check_option(timeout, sampling.CLIENT["timeout"], "timeout")
        self.concurrency = sampling.check_option(
            concurrency, sampling.CLIENT["concurrency"], "concurrency"
        )
        self.retry = RetryPolicy(max_attempts, backoff, max_backoff, max_retry_after)
        urls = None if base_url is None else sampling.URLS.check(_joined(base_url), "base_url")
        self.base_url = "|".join(urls) if urls else None
        provider = str(model).split("/", 1)[0]
        self.extra_body = {}
        if provider in TOP_K_IN_BODY and "top_k" in options:
            self.extra_body["top_k"] = options.pop("top_k")
        config = generate_config(
            **options, timeout=timeout, concurrency=self.concurrency, max_retries=0
        )
        self._models = _models(model, urls, _api_key(api_key_env), config, model_args or {})
        self.model = str(self._models[0])
        self._replicas = Replicas(len(self._models))
        self._in_flight: dict = {}  # the semaphore bounding calls in flight, made on the loop

    @property
    def sent(self) -> list[int]:
        """Attempts sent to each replica so far (in ``base_url`` order)."""
        return list(self._replicas.sent)

    # ------------------------------------------------------------------ one request
    async def _attempts(self, request: ChatRequest) -> Completion:
        start = time.perf_counter()
        attempts = 0

        async def attempt():
            nonlocal attempts
            attempts += 1
            return await self._generate(request)

        try:
            output = await self.retry.call(attempt, self._transient, self._asked_wait)
        except Exception as error:  # a failed call is recorded, never raised into the game
            error = _unwrapped(error)
            if getattr(error, "status_code", None) in FATAL_STATUS:
                raise FatalClientError(
                    f"{self.base_url or 'the provider'} refused model {self.model!r}: "
                    f"{describe_error(error)}"
                ) from error
            return Completion(
                "", latency_s=time.perf_counter() - start, retries=attempts - 1,
                error=describe_error(error),
            )  # fmt: skip
        return completion_from_output(output, time.perf_counter() - start, attempts - 1)

    async def _generate(self, request: ChatRequest):
        replica = self._replicas.pick()
        model = self._models[replica]
        try:
            messages = chat_messages(request)
            try:
                config = request_config(request, self.output, self.extra_body)
                return await model.generate(messages, config=config)
            except Exception as error:
                structured = self.output != "text" and request.json_schema is not None
                if not structured or getattr(_unwrapped(error), "status_code", None) != 400:
                    raise
                # The server has no structured output: ask again in plain text from now on.
                self.output = "text"
                config = request_config(request, "text", self.extra_body)
                return await model.generate(messages, config=config)
        finally:
            self._replicas.release(replica)

    def _transient(self, error: BaseException) -> bool:
        """The provider's verdict on the error (rate limit, overload, timeout: try again)."""
        error = _unwrapped(error)
        return isinstance(error, Exception) and bool(self._models[0].should_retry(error))

    def _asked_wait(self, error: BaseException | None) -> float | None:
        """How long the provider asked to wait: its parsed verdict, else the Retry-After
        headers of the error's response."""
        error = _unwrapped(error)
        if error is None:
            return None
        decision = self._models[0].api.should_retry(error)
        asked = getattr(decision, "retry_after", None)
        return float(asked) if isinstance(asked, int | float) and asked >= 0 else retry_after(error)


def _joined(base_url: str | Sequence[str]) -> str:
    return base_url if isinstance(base_url, str) else "|".join(base_url)


def _api_key(variable: str | None) -> str | None:
    if variable is None:
        return None
    key = os.environ.get(variable)
    if not key:
        raise FatalClientError(f"no API key: set the environment variable {variable}")
    return key


def _models(model, urls, api_key, config, model_args) -> list:
    """One Inspect ``Model`` per replica (one when the provider's default server is used)."""
    from inspect_ai.model import Model, get_model  # optional inspect extra: an inspect seat

    if isinstance(model, Model):
        return [model]
    provider = str(model).split("/", 1)[0]
    if provider in SDK_RETRY_PROVIDERS:
        model_args = {"max_retries": 0, **model_args}
    if provider in ("openai-api", "vllm", "sglang") and api_key is None and urls:
        api_key = "EMPTY"  # what a local server accepts when no key is set
    try:
        return [
            get_model(
                model, config=config, base_url=url, api_key=api_key, memoize=False, **model_args
            )  # fmt: skip
            for url in urls or [None]
        ]
    except Exception as error:  # unknown provider, missing package or key: one line
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise FatalClientError(
            f"Inspect cannot build model {model!r}: {type(error).__name__}: {first}"[:300]
        ) from error


def _unwrapped(error: BaseException | None) -> BaseException | None:
    """The provider's error inside Inspect's exhausted-retries wrapper (tenacity's RetryError)."""
    last = getattr(error, "last_attempt", None)
    inner = last.exception() if last is not None and hasattr(last, "exception") else None
    return inner if inner is not None else error
