"""The retry policy every API client shares: how long to wait between attempts, declared once.

Full-jitter exponential backoff (before retry ``n``, a uniform wait in ``0..min(max_backoff,
backoff * 2**(n-1))`` seconds, the formula of ``tenacity.wait_random_exponential``), or, when
the server said when to come back (``Retry-After`` in seconds or as an HTTP date, or
``retry-after-ms``), no sooner than that, up to ``max_retry_after`` seconds, with the jitter only
added above it. How many attempts (the first included) is the seat's ``max_attempts``, a
:class:`~dilemmax.llm.config.GenerateConfig` field a user sets; which errors are worth another
attempt is the client's (its server's) verdict. The loop is a plain ``while`` on the event
loop: a call that succeeds at once (nearly all of them) costs no retry machinery.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from dilemmax.envs.option_spec import Range
from dilemmax.llm import sampling
from dilemmax.llm.chat_http import body_message

T = TypeVar("T")
WAITS = Range("float", 0.0)


def describe_error(error: BaseException) -> str:
    """``"RateLimitError 429: <first line>"``: how a failed call's error is recorded. The first
    line is the message's first line with text (a message may start with a line break), and
    the server's own words are added where the error keeps its body (the ``openai`` package's
    status errors do), so a 422's "Unexpected fields in the request: ..." is shown."""
    status = getattr(error, "status_code", None)
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    said = body_message(getattr(error, "body", None))
    if said and said not in text:
        text = f"{text} - {said}" if text else said
    named = f"{type(error).__name__}{f' {status}' if status else ''}"
    return " ".join(f"{named}: {text}".split())[:300] if text else named


@dataclass(frozen=True)
class RetryPolicy:
    """How long a client waits before another attempt (every field checked: an
    :class:`OptionError` names it). Every client is given one; the defaults are the one
    declaration of the timings."""

    backoff: float = 0.5  # the backoff's first window, seconds
    max_backoff: float = 30.0  # its largest window, seconds
    max_retry_after: float = 60.0  # the longest Retry-After honoured, seconds

    def __post_init__(self):
        for name in ("backoff", "max_backoff", "max_retry_after"):
            object.__setattr__(self, name, sampling.check_option(getattr(self, name), WAITS, name))

    def wait(self, attempt: int, asked: float | None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1 = the first), given what
        the server asked (None: nothing)."""
        if asked is not None:
            return min(asked, self.max_retry_after) + random.uniform(0.0, self.backoff)
        window = self.backoff * 2.0 ** min(max(attempt - 1, 0), 64)  # no float overflow
        return random.uniform(0.0, min(self.max_backoff, window))

    async def call(
        self,
        attempt: Callable[[], Awaitable[T]],
        transient: Callable[[BaseException], bool],
        max_attempts: int,
        asked: Callable[[BaseException], float | None] | None = None,
    ) -> T:
        """``await attempt()`` until it returns, tried again after each error ``transient``
        accepts, at most ``max_attempts`` times (the first included); the last error is raised.
        ``asked(error)``: how long the server asked to wait (default: its Retry-After
        headers)."""
        asked = retry_after if asked is None else asked
        number = 0
        while True:
            number += 1
            try:
                return await attempt()
            except Exception as error:
                if number >= max_attempts or not transient(error):
                    raise
                await asyncio.sleep(self.wait(number, asked(error)))


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
