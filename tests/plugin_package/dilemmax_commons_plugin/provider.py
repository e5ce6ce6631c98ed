"""The ``localtest:`` seat kind: a language model behind an OpenAI-compatible chat endpoint,
asked with the Python standard library alone.

    dilemmax play shared_well --seats localtest:tiny,base_url=http://127.0.0.1:8000/v1

A provider is two things: a client (anything with ``complete(requests, on_result) ->
completions``, :class:`dilemmax.llm.client.Client`) built from one
:class:`~dilemmax.llm.config.GenerateConfig`, and a :class:`~dilemmax.llm.seats.ModelProvider`
declaring the seat: its target, the options a seat may set (here :class:`GenerateConfig` fields,
with that field's own range, over the run's ``--base-url``, ``--temperature``, ...), how the
client is built, what decides a reply and what is refused before any call.
``model_seat_kind(PROVIDER)`` makes it the seat kind the package's ``"dilemmax.seats"`` entry point
names.
"""

from __future__ import annotations

import dataclasses
import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dilemmax.envs.seat_spec import SeatSpec
from dilemmax.errors import UsageError
from dilemmax.llm.client import ChatRequest, Completion, FatalClientError, OnResult
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.seats import ModelProvider, model_seat_kind

# The GenerateConfig fields a localtest seat may set for itself (the rest are the run's).
SEAT_OPTIONS = ("base_url", "temperature", "max_tokens", "seed", "timeout", "max_attempts")
FATAL = (401, 403, 404)  # a wrong key or model: no retry helps
FIRST_WAIT = 0.05  # seconds before the first retry, doubled each time up to MAX_WAIT
MAX_WAIT = 1.0


class LocalTestClient:
    """Chat calls to ``generate.base_url`` (its first URL), ``generate.concurrency`` at a time.

    A call is retried on a connection error, a 429, a 5xx or a reply that is not a completion,
    up to ``generate.max_attempts`` attempts; a 401, 403 or 404 raises
    :class:`FatalClientError`; a call still failing comes back with ``error`` set.
    """

    def __init__(self, model: str, generate: GenerateConfig):
        if not generate.base_url:
            raise ValueError("a localtest seat needs a base_url (the server's /v1 address)")
        self.model = model
        self.generate = generate
        self.url = generate.base_url[0].rstrip("/") + "/chat/completions"

    def complete(
        self, requests: Sequence[ChatRequest], on_result: OnResult | None = None
    ) -> list[Completion]:
        def one(index: int) -> Completion:
            completion = self._call(requests[index])
            if on_result is not None:
                on_result(index, completion)
            return completion

        with ThreadPoolExecutor(max_workers=self.generate.concurrency) as pool:
            return list(pool.map(one, range(len(requests))))

    def _body(self, request: ChatRequest) -> bytes:
        g = self.generate
        body = {"model": self.model, "messages": list(request.messages),
                "temperature": g.temperature, "max_tokens": g.max_tokens}  # fmt: skip
        if g.seed is not None:
            body["seed"] = g.seed
        return json.dumps(body).encode()

    def _call(self, request: ChatRequest) -> Completion:
        start, error = time.perf_counter(), ""
        for attempt in range(self.generate.max_attempts):
            if attempt:
                time.sleep(min(MAX_WAIT, FIRST_WAIT * 2 ** (attempt - 1)))
            try:
                reply = self._post(self._body(request))
                message = reply["choices"][0]["message"]["content"]
                usage = reply.get("usage") or {}
            except FatalClientError:
                raise
            except (OSError, ValueError, KeyError, IndexError, TypeError) as failure:
                error = f"{type(failure).__name__}: {str(failure)[:200]}"
                continue
            return Completion(
                text=str(message or ""),
                prompt_tokens=int(usage.get("prompt_tokens", 0)),
                completion_tokens=int(usage.get("completion_tokens", 0)),
                latency_s=time.perf_counter() - start,
                retries=attempt,
            )
        return Completion("", latency_s=time.perf_counter() - start,
                          retries=self.generate.max_attempts - 1, error=error)  # fmt: skip

    def _post(self, payload: bytes) -> dict:
        headers = {"Content-Type": "application/json", "Authorization": "Bearer EMPTY"}
        http = urllib.request.Request(self.url, payload, headers, method="POST")
        try:
            with urllib.request.urlopen(http, timeout=self.generate.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as failure:
            if failure.code in FATAL:
                raise FatalClientError(
                    f"{self.url}: HTTP {failure.code} {failure.reason}"
                ) from None
            raise


# ----------------------------------------------------------------------------- the seat kind
def settings(options: Mapping[str, Any], generate: GenerateConfig) -> GenerateConfig:
    """The seat's own options over the run's GenerateConfig."""
    return generate.merged(options)


def client(target: str, options: Mapping[str, Any], generate: GenerateConfig) -> LocalTestClient:
    return LocalTestClient(target, settings(options, generate))


def identity(target: str, options: Mapping[str, Any], generate: GenerateConfig) -> dict:
    """What decides a reply besides the prompt (the response cache's key): never the timeout
    or the attempts."""
    chosen = settings(options, generate)
    sampled = {name: getattr(chosen, name) for name in ("temperature", "max_tokens", "seed")}
    return {"kind": "localtest", "model": target, "base_url": chosen.base_url, **sampled}


def check(spec: SeatSpec, options: Mapping[str, Any], generate: GenerateConfig) -> None:
    """Refused before any call: a seat with no server to ask."""
    if not settings(options, generate).base_url:
        raise UsageError(f"seat {spec.text!r}: a localtest seat needs base_url (or --base-url)")


# Each option's range is GenerateConfig's own (read from its field), so it is declared once.
RANGES = {f.name: f.metadata["range"] for f in dataclasses.fields(GenerateConfig)}
PROVIDER = ModelProvider(
    "localtest",
    "<model>",
    {name: RANGES[name] for name in SEAT_OPTIONS},
    client,
    identity,
    check=check,
)
SEAT = model_seat_kind(PROVIDER)
