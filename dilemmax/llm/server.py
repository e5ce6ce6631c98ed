"""A tiny OpenAI-compatible chat server on 127.0.0.1, for tests and benchmarks (no network).

It answers ``POST /v1/chat/completions`` with a reply computed by a Python function of the
request, and can be told to misbehave on chosen requests (429, with or without a
``Retry-After``, 500, 401, 404, a reply that is not JSON, a reply with no choices, a reply whose
JSON holds a lone surrogate, a reply slower than the client's timeout, or a request held until
released), so the client's retries and the harness's resume are tested against real HTTP. It
can also be a server of a narrower API, as real ones are: one that refuses ``response_format``
(400), one that refuses fields it does not know (422, in the words of ``transformers serve``),
and ``POST /v1/responses`` answered with an event stream when the request does not set
``stream`` (what ``transformers serve`` does, and OpenAI's Responses API does not).

    with LocalChatServer(lambda request: "ACTION QUERY") as server:
        client = OpenAIClient("tiny", GenerateConfig(base_url=server.base_url))
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

Reply = Callable[[dict], str]
FAULTS = (
    "400",  # a request refused for what it asks (not for its response_format)
    "429",
    "retry_after",  # 429 with the header Retry-After: <retry_after>
    "500",
    "401",
    "404",
    "malformed",
    "no_choices",  # 200 with "choices": []
    "surrogate",  # the reply with a lone surrogate appended ("\ud800" in the JSON)
    "timeout",
    "hold",
)


def _approx_tokens(text: str) -> int:
    return max(1, len(text.split()))


REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    500: "Internal Server Error",
}
MAX_HEADER = 64 * 1024  # bytes of a request's head; more is refused (and the connection closed)


class LocalChatServer:
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint served from a thread.

    An asyncio server on its own event loop (thread), HTTP/1.1 with kept-alive connections, so a
    batch of hundreds of calls costs the benchmark little more than the replies themselves. The
    reply function runs on a thread pool, so a slow reply (a test's ``time.sleep``) holds only
    its own request.

    Args:
        reply: request body (dict) -> the assistant's text.
        faults: request ordinal (0-based, in arrival order) -> one of :data:`FAULTS`; that
            request gets the fault instead of a reply. ``"hold"`` blocks the request until
            :meth:`release` (or the server stops), so a test can kill a client mid-call.
        timeout_delay: seconds a ``"timeout"`` fault waits before answering.
        retry_after: the ``Retry-After`` header of a ``"retry_after"`` fault (seconds or an
            HTTP date).
        structured_output: if False, a request with ``response_format`` gets 400 (a server
            without structured output). (A server that takes ``response_format`` and ignores it
            is any ``reply`` that answers in plain text.)
        refused_fields: top-level request fields the server does not know: a request that
            carries one gets 422 ``{"detail": "Unexpected fields in the request: {...}"}``, as
            ``transformers serve`` answers ``top_k``.
        count_tokens: text -> its token count, for ``usage`` (default: one token per
            whitespace-separated word of the messages joined). Given, the prompt tokens are the
            sum over the messages' contents, as :mod:`dilemmax.llm.plan` counts them.
        cached_tokens: request body -> the prompt tokens to report as read from a prompt cache
            (``usage.prompt_tokens_details.cached_tokens``, as OpenAI and vLLM report them);
            None: no details, as a server without a prompt cache answers.

    Attributes:
        received: requests that arrived (every attempt, retries included).
        answered: requests that got a well-formed reply.
        bodies: every well-formed request body, in arrival order.
        arrivals: ``time.perf_counter()`` of every request, in arrival order.
        in_flight, max_in_flight: replies being computed now, and the most at once.
        held: set when a ``"hold"`` request arrives.
    """

    def __init__(
        self,
        reply: Reply,
        faults: dict[int, str] | None = None,
        timeout_delay: float = 2.0,
        structured_output: bool = True,
        retry_after: str = "1",
        refused_fields: tuple[str, ...] = (),
        count_tokens: Callable[[str], int] | None = None,
        cached_tokens: Callable[[dict], int] | None = None,
    ):
        self.reply = reply
        self.count_tokens = count_tokens
        self.cached_tokens = cached_tokens
        self.refused_fields = frozenset(refused_fields)
        self.faults = dict(faults or {})
        bad = sorted(set(self.faults.values()) - set(FAULTS))
        if bad:
            raise ValueError(f"unknown fault(s) {bad}; choose from {FAULTS}")
        self.timeout_delay = float(timeout_delay)
        self.retry_after = str(retry_after)
        self.arrivals: list[float] = []
        self.structured_output = bool(structured_output)
        self.bodies: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.received = 0
        self.answered = 0
        self.held = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()  # the counters, read by tests from other threads
        self._loop = asyncio.new_event_loop()
        self._replies = ThreadPoolExecutor(64, thread_name_prefix="local-chat-reply")
        self._listening = socket.create_server(("127.0.0.1", 0), backlog=1024)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._stopped = None  # an asyncio.Event on the server's loop, made when it starts

    @property
    def base_url(self) -> str:
        host, port = self._listening.getsockname()[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> LocalChatServer:
        ready = threading.Event()
        self._ready = ready
        self._thread.start()
        ready.wait()
        return self

    def release(self) -> None:
        """Lets held requests go on (they then get a normal reply)."""
        self._release.set()

    def stop(self) -> None:
        self._release.set()
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(10.0)
        self._replies.shutdown(wait=False, cancel_futures=True)
        self._listening.close()

    def __enter__(self) -> LocalChatServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ the server's loop
    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())
        self._loop.close()

    async def _main(self) -> None:
        self._stopped = asyncio.Event()
        server = await asyncio.start_server(self._connection, sock=self._listening)
        self._ready.set()
        async with server:
            await self._stopped.wait()
            server.close()
        for task in asyncio.all_tasks() - {asyncio.current_task()}:
            task.cancel()  # connections still open (kept alive, or held)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        """One kept-alive connection: requests in turn until the client closes it."""
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    break
                path, body = request
                status, payload, headers = await self._answer(path, body)
                writer.write(_response(status, payload, headers))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client went away mid-request: nothing to answer
        except asyncio.CancelledError:
            pass
        finally:
            writer.close()

    # ------------------------------------------------------------------ request handling
    def _next_fault(self) -> str | None:
        with self._lock:
            ordinal = self.received
            self.received += 1
            self.arrivals.append(time.perf_counter())
        return self.faults.get(ordinal)

    async def _answer(self, path: str, raw: bytes) -> tuple[int, bytes, dict]:
        """(status, body, extra headers) of one request, faults included."""
        if path.rstrip("/").endswith("/responses"):
            return self._responses_stream(raw)
        if not path.rstrip("/").endswith("/chat/completions"):
            return _error(404, f"no route {path}")
        fault = self._next_fault()
        if fault in INSTANT_FAULTS:
            return INSTANT_FAULTS[fault](self)
        if fault == "timeout":
            await asyncio.sleep(self.timeout_delay)
        if fault == "hold":
            self.held.set()
            await self._loop.run_in_executor(None, self._release.wait)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return _error(400, "request body is not JSON")
        with self._lock:
            self.bodies.append(body)
        unexpected = self.refused_fields & set(body)
        if unexpected:  # FastAPI's error body: {"detail": ...}
            detail = f"Unexpected fields in the request: {set(sorted(unexpected))}"
            return 422, json.dumps({"detail": detail}).encode(), {}
        if "response_format" in body and not self.structured_output:
            return _error(400, "response_format is not supported")
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            completion = await self._loop.run_in_executor(
                self._replies, self._completion, body, fault
            )
            # json.dumps escapes a lone surrogate as \ud800: valid JSON, no UTF-8 form.
            payload = json.dumps(completion).encode()
        finally:
            with self._lock:
                self.in_flight -= 1
        # Counted before the reply leaves: a client that has read it must find it counted.
        with self._lock:
            self.answered += 1
        return 200, payload, {}

    def _responses_stream(self, raw: bytes) -> tuple[int, bytes, dict]:
        """``POST /v1/responses`` as ``transformers serve`` answers it: a server-sent event
        stream unless the request sets ``"stream": false`` (OpenAI's API streams only when asked
        to, so its clients read this reply as one JSON object and fail)."""
        with self._lock:
            self.received += 1
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return _error(400, "request body is not JSON")
        text = str(self.reply({**body, "messages": _input_messages(body.get("input"))}))
        events = [
            {"type": "response.created", "response": {"id": "resp-local", "status": "in_progress"}},
            {"type": "response.output_text.delta", "delta": text},
            {"type": "response.completed", "response": {"id": "resp-local", "status": "completed"}},
        ]
        if body.get("stream") is False:
            return 200, json.dumps(events[-1]["response"]).encode(), {}
        stream = "".join(f"data: {json.dumps(event)}\n\n" for event in events)
        return 200, stream.encode(), {"Content-Type": "text/event-stream"}

    def _completion(self, body: dict, fault: str | None = None) -> dict[str, Any]:
        text = str(self.reply(body)) + ("\ud800" if fault == "surrogate" else "")
        contents = [str(m.get("content", "")) for m in body.get("messages", [])]
        if self.count_tokens is None:
            prompt_tokens, completion_tokens = (
                _approx_tokens(" ".join(contents)),
                _approx_tokens(text),
            )
        else:
            prompt_tokens = sum(self.count_tokens(c) for c in contents)
            completion_tokens = self.count_tokens(text)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if self.cached_tokens is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens(body)}
        return {
            "id": "chatcmpl-local",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "local"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
        }


def _input_messages(items: Any) -> list[dict]:
    """A Responses API ``input`` (text, or messages whose content is text or text parts) as
    chat messages, so one reply function serves both routes."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    messages = []
    for item in items if isinstance(items, list) else []:
        content = item.get("content", "") if isinstance(item, dict) else ""
        if isinstance(content, list):
            parts = [part for part in content if isinstance(part, dict)]
            content = "".join(str(part.get("text", "")) for part in parts)
        messages.append({"role": item.get("role", "user"), "content": str(content)})
    return messages


def _error(status: int, message: str, headers: dict | None = None) -> tuple[int, bytes, dict]:
    body = {"error": {"message": message, "type": "test", "code": str(status)}}
    return status, json.dumps(body).encode(), headers or {}


_EMPTY = {"id": "chatcmpl-local", "object": "chat.completion", "choices": []}
INSTANT_FAULTS = {  # fault -> its answer, sent at once
    "400": lambda server: _error(400, "the prompt is too long (injected)"),
    "429": lambda server: _error(429, "rate limited (injected)"),
    "retry_after": lambda server: _error(
        429, "rate limited (injected)", {"Retry-After": server.retry_after}
    ),
    "500": lambda server: _error(500, "server error (injected)"),
    "401": lambda server: _error(401, "invalid api key (injected)"),
    "404": lambda server: _error(404, "model not found (injected)"),
    "malformed": lambda server: (200, b'{"choices": [ {"message": ', {}),
    "no_choices": lambda server: (200, json.dumps(_EMPTY).encode(), {}),
}


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, bytes] | None:
    """(path, body) of the next request on a connection; None when the client closed it."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as error:
        if error.partial.strip():
            raise
        return None
    if len(head) > MAX_HEADER:
        raise ConnectionError("request head too long")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    path = parts[1] if len(parts) >= 2 else ""
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip()) if value.strip().isdigit() else 0
    body = await reader.readexactly(length) if length else b""
    return path, body


def _response(status: int, payload: bytes, headers: dict) -> bytes:
    headers = {"Content-Type": "application/json", **headers}
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines.append(f"Content-Length: {len(payload)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload
