"""The HTTP side of an OpenAI-compatible chat call: ``POST {base_url}/chat/completions``.

One ``aiohttp`` session serves every client of the process, on the clients' background event
loop (:mod:`dilemmax.llm.aio`), so connections are kept alive across calls, batches and seats.
A call goes to the replica (one of a seat's base URLs) with the fewest calls outstanding. A reply
that is not 200 raises the error class the official ``openai`` package names for its status
(``RateLimitError``, ``NotFoundError``, ...), so transcripts and messages read as before; a
timeout raises :class:`APITimeoutError` and a dropped connection :class:`APIConnectionError`.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from dilemmax.llm import aio

OPENAI_API = "https://api.openai.com/v1"


class APIError(Exception):
    """A call that got no usable reply."""

    status_code: int | None = None


class APIStatusError(APIError):
    """The server answered with an error status; ``response.headers`` holds its headers (a
    ``Retry-After`` among them)."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str]):
        super().__init__(f"Error code: {status} - {message}")
        self.status_code = status
        self.response = _Headers(headers)


class _Headers:
    def __init__(self, headers: Mapping[str, str]):
        self.headers = headers


class BadRequestError(APIStatusError):
    """400."""


class AuthenticationError(APIStatusError):
    """401."""


class PermissionDeniedError(APIStatusError):
    """403."""


class NotFoundError(APIStatusError):
    """404."""


class RateLimitError(APIStatusError):
    """429."""


class InternalServerError(APIStatusError):
    """500 and above."""


class APITimeoutError(APIError):
    """No reply within the attempt's timeout."""


class APIConnectionError(APIError):
    """The connection failed or dropped before a whole reply came."""


STATUS_ERRORS = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    429: RateLimitError,
}


def status_error(status: int, payload: bytes, headers: Mapping[str, str]) -> APIStatusError:
    """The error a non-200 reply raises: its class by status, its message from the body."""
    kind = STATUS_ERRORS.get(status, InternalServerError if status >= 500 else APIStatusError)
    return kind(status, _error_message(payload), headers)


def _error_message(payload: bytes) -> str:
    """What an error body says (:func:`body_message`), else the body's first 200 chars."""
    text = payload[:4000].decode("utf-8", "replace")
    try:
        body = json.loads(text)
    except ValueError:
        return text[:200]
    message = body_message(body)
    return message[:200] if message else text[:200]


def body_message(body: Any) -> str:
    """The server's words in a parsed error body: OpenAI's ``error.message``, FastAPI's
    ``detail`` (``transformers serve``: "Unexpected fields in the request: ..."), a bare
    ``message``, or a body that is text; "" when it holds none of them."""
    if isinstance(body, str):
        return body.strip()
    if not isinstance(body, dict):
        return ""
    error = body.get("error")
    if isinstance(error, dict) and error.get("message") is not None:
        return str(error["message"]).strip()
    for name in ("detail", "message", "error"):
        if isinstance(body.get(name), str | list) and body[name]:
            return str(body[name]).strip()
    return ""


class Replicas:
    """The calls outstanding on each of a seat's ``count`` servers: each call goes to the one
    with the fewest (on a tie, the one sent the fewest so far), as replicas of one model behind
    no load balancer need. Used from the event loop's thread only."""

    def __init__(self, count: int):
        self.outstanding = [0] * count
        self.sent = [0] * count

    def pick(self) -> int:
        choice = min(range(len(self.sent)), key=lambda r: (self.outstanding[r], self.sent[r]))
        self.outstanding[choice] += 1
        self.sent[choice] += 1
        return choice

    def release(self, replica: int) -> None:
        self.outstanding[replica] -= 1


class ChatTransport:
    """Posts chat requests to a seat's replicas.

    Args:
        base_urls: the servers (None: OpenAI's API).
        api_key: sent as ``Authorization: Bearer <key>``.
        timeout: seconds per attempt (connecting, sending and reading the whole reply).
    """

    def __init__(self, base_urls: Sequence[str] | None, api_key: str, timeout: float):
        urls = base_urls or (OPENAI_API,)
        self.urls = tuple(url.rstrip("/") + "/chat/completions" for url in urls)
        self.proxies = tuple(_proxy_for(url) for url in self.urls)
        self.replicas = Replicas(len(self.urls))
        self.headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        self.timeout = float(timeout)

    async def post(self, body: Mapping[str, Any]) -> Any:
        """The reply's JSON (a 200), or a raised :class:`APIError`; ``json.JSONDecodeError`` for
        a 200 whose body is not JSON."""
        import aiohttp  # optional llm extra: loaded when a client calls

        payload = json.dumps(body).encode()
        replica = self.replicas.pick()
        try:
            session = await _session()
            timeout = aiohttp.ClientTimeout(total=self.timeout)
            async with session.post(
                self.urls[replica],
                data=payload,
                headers=self.headers,
                timeout=timeout,
                proxy=self.proxies[replica],
            ) as response:
                raw = await response.read()
                if response.status != 200:
                    raise status_error(response.status, raw, response.headers)
        except TimeoutError as error:
            raise APITimeoutError("Request timed out.") from error
        except aiohttp.ClientError as error:  # refused, reset, closed mid-reply
            raise APIConnectionError(f"Connection error: {type(error).__name__}") from error
        finally:
            self.replicas.release(replica)
        return json.loads(raw)


def _proxy_for(url: str) -> str | None:
    """The ``HTTP(S)_PROXY`` a call to ``url`` goes through (``NO_PROXY`` honoured), as the
    ``openai`` package would use it; read once per client (per request it costs ~0.2 ms)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if urllib.request.proxy_bypass(host):
        return None
    return urllib.request.getproxies().get(urllib.parse.urlsplit(url).scheme)


_SESSION = None
_SESSION_LOOP = None  # the loop the session was made on
_INHERITED: list = []  # sessions of the parent process, in a forked child


async def _session():
    """The process's aiohttp session (made on the background loop on first use, closed at
    exit): one connection pool for every client."""
    global _SESSION, _SESSION_LOOP
    import aiohttp  # optional llm extra: loaded when a client calls

    loop = asyncio.get_running_loop()
    if _SESSION is None or _SESSION.closed or _SESSION_LOOP is not loop:
        if _SESSION is not None and not _SESSION.closed:  # a forked child: the parent's
            _INHERITED.append(_SESSION)  # session stays referenced, never closed from here
        _SESSION_LOOP = loop
        # No pool limit of its own: each client bounds its calls in flight (its concurrency).
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        # No cookies: an API call carries its key in a header, and a jar costs every request.
        _SESSION = aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())
    return _SESSION


@atexit.register
def _close_session() -> None:
    session = _SESSION
    if session is not None and not session.closed:
        # The loop may already be gone at exit; nothing is left to lose then.
        with contextlib.suppress(Exception):
            aio.run(session.close())
