"""A tiny OpenAI-compatible chat server on 127.0.0.1, for tests and benchmarks (no network).

It answers ``POST /v1/chat/completions`` with a reply computed by a Python function of the
request, and can be told to misbehave on chosen requests (429, with or without a
``Retry-After``, 500, 401, 404, a reply that is not JSON, a reply with no choices, a reply whose
JSON holds a lone surrogate, a reply slower than the client's timeout, or a request held until
released), so the client's retries and the harness's resume are tested against real HTTP.

    with LocalChatServer(lambda request: "ACTION QUERY") as server:
        client = OpenAIClient("tiny", base_url=server.base_url, api_key="test")
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Callable[[dict], str]
FAULTS = (
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


class _Listener(ThreadingHTTPServer):
    # A client opening its whole connection pool at once (an async client's first batch) must
    # not overflow the accept queue: the default backlog of 5 resets the rest.
    request_queue_size = 1024


def _approx_tokens(text: str) -> int:
    return max(1, len(text.split()))


class LocalChatServer:
    """An OpenAI-compatible ``/v1/chat/completions`` endpoint served from a thread.

    Args:
        reply: request body (dict) -> the assistant's text.
        faults: request ordinal (0-based, in arrival order) -> one of :data:`FAULTS`; that
            request gets the fault instead of a reply. ``"hold"`` blocks the request until
            :meth:`release` (or the server stops), so a test can kill a client mid-call.
        timeout_delay: seconds a ``"timeout"`` fault waits before answering.
        retry_after: the ``Retry-After`` header of a ``"retry_after"`` fault (seconds or an
            HTTP date).
        structured_output: if False, a request with ``response_format`` gets 400 (a server
            without structured output).

    Attributes:
        received: requests that arrived (every attempt, retries included).
        answered: requests that got a well-formed reply.
        held: set when a ``"hold"`` request arrives.
    """

    def __init__(
        self,
        reply: Reply,
        faults: dict[int, str] | None = None,
        timeout_delay: float = 2.0,
        structured_output: bool = True,
        retry_after: str = "1",
    ):
        self.reply = reply
        self.faults = dict(faults or {})
        bad = sorted(set(self.faults.values()) - set(FAULTS))
        if bad:
            raise ValueError(f"unknown fault(s) {bad}; choose from {FAULTS}")
        self.timeout_delay = float(timeout_delay)
        self.retry_after = str(retry_after)
        self.arrivals: list[float] = []  # perf_counter time of every request, in arrival order
        self.structured_output = bool(structured_output)
        self.bodies: list[dict] = []  # every well-formed request body, in arrival order
        self.in_flight = 0
        self.max_in_flight = 0
        self.received = 0
        self.answered = 0
        self.held = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._httpd = _Listener(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> LocalChatServer:
        self._thread.start()
        return self

    def release(self) -> None:
        """Lets held requests go on (they then get a normal reply)."""
        self._release.set()

    def stop(self) -> None:
        self._release.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> LocalChatServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ request handling
    def _next_fault(self) -> str | None:
        with self._lock:
            ordinal = self.received
            self.received += 1
            self.arrivals.append(time.perf_counter())
        return self.faults.get(ordinal)

    def _completion(self, body: dict, fault: str | None = None) -> dict[str, Any]:
        text = str(self.reply(body)) + ("\ud800" if fault == "surrogate" else "")
        prompt = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
        prompt_tokens, completion_tokens = _approx_tokens(prompt), _approx_tokens(text)
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
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output quiet
                pass

            def _send(self, status: int, payload: bytes, headers: dict | None = None):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(payload)

            def _error(self, status: int, message: str, headers: dict | None = None):
                body = {"error": {"message": message, "type": "test", "code": str(status)}}
                self._send(status, json.dumps(body).encode(), headers)

            def do_POST(self):  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    return self._error(404, f"no route {self.path}")
                fault = server._next_fault()
                if fault == "429":
                    return self._error(429, "rate limited (injected)")
                if fault == "retry_after":
                    wait = {"Retry-After": server.retry_after}
                    return self._error(429, "rate limited (injected)", wait)
                if fault == "500":
                    return self._error(500, "server error (injected)")
                if fault == "401":
                    return self._error(401, "invalid api key (injected)")
                if fault == "404":
                    return self._error(404, "model not found (injected)")
                if fault == "malformed":
                    return self._send(200, b'{"choices": [ {"message": ')
                if fault == "no_choices":
                    empty = {"id": "chatcmpl-local", "object": "chat.completion", "choices": []}
                    return self._send(200, json.dumps(empty).encode())
                if fault == "timeout":
                    time.sleep(server.timeout_delay)
                if fault == "hold":
                    server.held.set()
                    server._release.wait()
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    return self._error(400, "request body is not JSON")
                with server._lock:
                    server.bodies.append(body)
                if "response_format" in body and not server.structured_output:
                    return self._error(400, "response_format is not supported")
                with server._lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    # json.dumps escapes a lone surrogate as \ud800: valid JSON, no UTF-8 form.
                    payload = json.dumps(server._completion(body, fault)).encode()
                finally:
                    with server._lock:
                        server.in_flight -= 1
                # Counted before the reply leaves: a client that has read it must find it counted.
                with server._lock:
                    server.answered += 1
                self._send(200, payload)

        return Handler


def main(argv: list[str] | None = None) -> None:
    """``python -m dilemmax.llm.server --reply TEXT``: serve one fixed reply until killed (a
    stand-in server for benchmarks and demos); prints the base URL on its first line."""
    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument("--reply", default="ACTION QUERY", help="the text every call gets")
    args = parser.parse_args(argv)
    server = LocalChatServer(lambda body: args.reply).start()
    print(server.base_url, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
