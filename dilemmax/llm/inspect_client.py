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
401 / 403 / 404 stops the run (:class:`FatalClientError`). A failed call's error shows the
provider's own error (Inspect wraps it in a ``ModelGenerateError`` whose message starts with the
request), the server's words included. Token counts, reasoning tokens included, are the
provider's; a provider that reports none leaves them unknown (0): no seat counts tokens with a
tokenizer it would have to download (Inspect's mock model would fetch tiktoken's encoding, so it
is given outputs whose usage says so), so nothing but the model's own endpoint is reached.

``openai/<model>`` is Inspect's provider for OpenAI's own API, which it calls through the
Responses API (``POST /responses``); a local OpenAI-compatible server is
``openai-api/<name>/<model>`` or ``vllm/<model>`` (chat completions). Pointed at a local server,
``openai/`` fails in ways that do not name the cause (no ``OPENAI_API_KEY``: "Unable to
initialise OpenAI client"; a server that streams ``/v1/responses`` unasked, as ``transformers
serve`` does: a bare ``AssertionError``), so those failures stop the run with a line that says
which seat to use.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from dilemmax.llm import aio, sampling
from dilemmax.llm.chat_http import Replicas
from dilemmax.llm.client import ChatRequest, Completion, FatalClientError, asked_output
from dilemmax.llm.config import GenerateConfig
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

# A client given no config leaves the key variable, temperature and reply length to the provider.
DEFAULT = GenerateConfig(api_key_env=None, temperature=None, max_tokens=None)


class InspectClient(aio.BatchedClient):
    """Chat completions through Inspect AI's model API.

    Args:
        model: ``<provider>/<model>`` as Inspect names it, or an Inspect ``Model``.
        config: how it is asked (every field checked): ``base_url`` the server(s) (several
            replicas of one model: each call goes to the one with the fewest calls
            outstanding; None: the provider's default); ``api_key_env`` the variable holding
            the key (None: the provider's own, ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``,
            ...); sampling and reasoning (None: the provider's default); ``output``:
            ``json_schema`` (the prompt's schema as structured output), ``json_object`` (JSON
            mode, OpenAI-compatible providers) or ``text``. A 400 to a structured request is
            asked again in text (a retry, counted) and the seat stays in text from then on;
            that completion carries the refusal (``Completion.output_refused``). ``timeout``
            per attempt, ``max_attempts`` per request (the first included), ``concurrency``
            requests in flight over all replicas together.
        retry: how long to wait between attempts (:class:`~dilemmax.llm.retrying.RetryPolicy`).
        model_args: further provider arguments (``custom_outputs`` of ``mockllm/model``, ...).

    Raises:
        OptionError: an option outside its range.
        FatalClientError: a model Inspect cannot build (unknown provider, missing key, package).
    """

    def __init__(
        self,
        model: Any,
        config: GenerateConfig = DEFAULT,
        retry: RetryPolicy = RetryPolicy(),
        model_args: dict[str, Any] | None = None,
    ):
        config = config.check()
        options = sampling.sampling_options(
            temperature=config.temperature, top_p=config.top_p, top_k=config.top_k,
            presence_penalty=config.presence_penalty, max_tokens=config.max_tokens,
            seed=config.seed, reasoning_effort=config.reasoning_effort,
            reasoning_tokens=config.reasoning_tokens,
        )  # fmt: skip
        self.output = config.output
        self.requested_output = self.output  # what the seat asked for; .output is what holds
        self.concurrency = config.concurrency
        self.max_attempts = config.max_attempts
        self.retry = retry
        urls = config.base_url
        self.base_url = "|".join(urls) if urls else None
        provider = str(model).split("/", 1)[0]
        self.provider = provider
        self.extra_body = {}
        if provider in TOP_K_IN_BODY and "top_k" in options:
            self.extra_body["top_k"] = options.pop("top_k")
        inspect_config = generate_config(
            **options, timeout=config.timeout, concurrency=self.concurrency, max_retries=0
        )
        api_key = _api_key(config.api_key_env)
        self._models = _models(model, urls, api_key, inspect_config, model_args or {})
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
        mode, refused = asked_output(request, self.output), ""

        async def attempt():
            nonlocal attempts, mode, refused
            attempts += 1
            mode = asked_output(request, self.output)
            try:
                return await self._generate(request, mode)
            except Exception as error:
                status = getattr(_unwrapped(error), "status_code", None)
                if mode in ("", "text") or status != 400:
                    raise
                # Asked again in plain text: answered, the server has no structured output and
                # the seat stays in text; refused too (raised), the 400 was about something else.
                attempts += 1
                output = await self._generate(request, "text")
                self.output, mode, refused = "text", "text", _described(error)
                return output

        try:
            output = await self.retry.call(
                attempt, self._transient, self.max_attempts, self._asked_wait
            )
        except Exception as error:  # a failed call is recorded, never raised into the game
            error = _unwrapped(error)
            self._stop_if_fatal(error)
            return Completion(
                "", latency_s=time.perf_counter() - start, retries=attempts - 1,
                error=_described(error), output=mode, output_refused=refused,
            )  # fmt: skip
        completion = completion_from_output(output, time.perf_counter() - start, attempts - 1)
        return dataclasses.replace(completion, output=mode, output_refused=refused)

    def _stop_if_fatal(self, error: BaseException) -> None:
        """Raises :class:`FatalClientError` for what no retry mends: a refused key or model, or
        Inspect's ``openai/`` provider pointed at a server that does not speak OpenAI's
        Responses API (a bare ``AssertionError`` on its reply)."""
        status = getattr(error, "status_code", None)
        if (
            self.provider == "openai"
            and self.base_url
            and (isinstance(error, AssertionError) or status in (404, 405))
        ):
            raise FatalClientError(
                f"inspect:{self.model} at {self.base_url}: {_described(error)}: Inspect's "
                "openai/ provider calls OpenAI's Responses API (POST /responses) and this server "
                "does not answer it as OpenAI does (transformers serve, for one, streams "
                f"/v1/responses when a request does not set stream); {_use_instead(self.model)}"
            ) from error
        if status in FATAL_STATUS:
            raise FatalClientError(
                f"{self.base_url or 'the provider'} refused model {self.model!r}: "
                f"{_described(error)}"
            ) from error

    async def _generate(self, request: ChatRequest, mode: str):
        replica = self._replicas.pick()
        model = self._models[replica]
        try:
            config = request_config(request, mode or "text", self.extra_body)
            cache = {"cache": _cache_policy(request.cache_key)} if request.cache_key else {}
            return await model.generate(chat_messages(request), config=config, **cache)
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


def _cache_policy(key: str):
    """Inspect's own cache for a request dilemmax's response cache missed (``--cache``): kept
    until removed, and keyed by Inspect on the model, base URL, messages and config, with the
    request's dilemmax key as a scope, which holds the sample index (Inspect's epoch is not
    set outside an eval)."""
    from inspect_ai.model import CachePolicy  # optional inspect extra: an inspect seat

    return CachePolicy(expiry=None, per_epoch=False, scopes={"dilemmax": key})


def _described(error: BaseException) -> str:
    """:func:`describe_error` of the provider's own error: Inspect's ``ModelGenerateError``
    starts its message with the request and keeps the provider's error (whose body holds the
    server's words) as its cause."""
    cause = error.__cause__
    if getattr(error, "provider_message", None) is not None and isinstance(cause, Exception):
        return describe_error(cause)
    return describe_error(error)


def _use_instead(model: str) -> str:
    """The seats that reach a local OpenAI-compatible server, for one that named ``openai/``."""
    name = model.split("/", 1)[1] if "/" in model else model
    return (
        f"for an OpenAI-compatible server use inspect:openai-api/<name>/{name} or "
        f"inspect:vllm/{name} (chat completions)"
    )


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
    if provider == "mockllm":
        model_args = {**model_args, "custom_outputs": _with_usage(model_args.get("custom_outputs"))}
    try:
        return [
            get_model(
                model, config=config, base_url=url, api_key=api_key, memoize=False, **model_args
            )  # fmt: skip
            for url in urls or [None]
        ]
    except Exception as error:  # unknown provider, missing package or key: one line
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        hint = (
            " (openai/ is Inspect's provider for OpenAI's own API: it wants OPENAI_API_KEY); "
            + _use_instead(str(model))
            if provider == "openai" and urls
            else ""
        )
        raise FatalClientError(
            f"Inspect cannot build model {model!r}: {type(error).__name__}: {first}"[:300] + hint
        ) from error


def _with_usage(outputs):
    """Inspect's mock model's outputs (``custom_outputs``: a callable, an iterable, or None for
    its default reply), each with a usage: where an output has none, the mock model would count
    the tokens with tiktoken, which downloads its encoding on first use (a machine without
    internet then fails every call). The usage given is zero, this project's "unknown"."""
    import inspect as python_inspect

    from inspect_ai.model import ModelOutput, ModelUsage  # optional inspect extra

    if outputs is None:
        outputs = _default_mock_output
    given = outputs if callable(outputs) else iter(outputs)

    async def with_usage(messages, tools, tool_choice, config):
        if callable(given):
            output = given(messages, tools, tool_choice, config)
            output = await output if python_inspect.isawaitable(output) else output
        else:
            output = next(given, None)
            if output is None:
                raise ValueError("custom_outputs ran out of values")
        if isinstance(output, ModelOutput) and output.usage is None:
            output.usage = ModelUsage()
        return output

    return with_usage


def _default_mock_output(messages, tools, tool_choice, config):
    """The reply of Inspect's mock model when it is given no outputs."""
    from inspect_ai.model import ModelOutput  # optional inspect extra
    from inspect_ai.model._providers.mockllm import MockLLM  # where its default reply is kept

    return ModelOutput.from_content(model="mockllm", content=MockLLM.default_output)


def _unwrapped(error: BaseException | None) -> BaseException | None:
    """The provider's error inside Inspect's exhausted-retries wrapper (tenacity's RetryError)."""
    last = getattr(error, "last_attempt", None)
    inner = last.exception() if last is not None and hasattr(last, "exception") else None
    return inner if inner is not None else error
