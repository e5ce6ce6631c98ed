"""Spending limits of a model run: ``--max-calls``, ``--token-limit``, ``--cost-limit``.

A run's :class:`Limits` bound what the whole run spends, over every invocation of it: a resumed
run starts from what its transcript records (calls answered from the response cache cost
nothing and count nowhere). The call loop (:mod:`dilemmax.llm.model_seats`) asks the run's
:class:`Budget`, before each batch of calls, how many of them may go:

- ``--max-calls``: exactly the calls left; a batch larger than that is cut, so the limit is
  never passed.
- ``--token-limit`` and ``--cost-limit``: a call's size is known only once its reply is back, so
  a batch is planned at the largest call seen so far in the run (tokens, or dollars at the
  seat's price) and cut to what fits the budget left; the first call of a run with nothing seen
  yet goes alone, to learn its size. A limit is then passed only by a call larger than every
  earlier one (prompts grow over an open-world trial), by at most that growth.

When a batch is cut, or no call fits, the calls already sent are answered and written to the
transcript, then :class:`LimitReached` stops the run at that step. The session keeps the
episodes that finished (``SessionResult.stopped``); each command writes them as a partial result
(``"partial": true``, ``"stopped_by"``, :func:`partial_fields`), prints :func:`stop_line` and exits
with :data:`STOPPED_STATUS`. The same command with ``--resume`` and a higher limit replays every
recorded call and goes on, so the finished run equals one that was never stopped.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dilemmax.envs.option_spec import INT32_MAX, Range
from dilemmax.envs.seat_spec import is_model_seat
from dilemmax.errors import UsageError
from dilemmax.llm import sampling
from dilemmax.llm.pricing import Price, cost, seat_price

# The exit status of a run stopped by a spending limit (0: done, 1: a training run diverged,
# 2: a usage error, 3: a stalled training run, 130: interrupted).
STOPPED_STATUS = 4

# limit name (results.json's "stopped_by") -> its flag and its range
FLAGS = {"max_calls": "--max-calls", "token_limit": "--token-limit", "cost_limit": "--cost-limit"}
RANGES = {
    "max_calls": Range("int", 1, INT32_MAX),
    "token_limit": Range("int", 1, None),
    "cost_limit": Range("float", 0, None, low_open=True),
}


@dataclass(frozen=True)
class Limits:
    """What a run may spend (None: no limit).

    Attributes:
        max_calls: model calls (``--max-calls``).
        token_limit: prompt plus completion tokens (``--token-limit``).
        cost_limit: dollars at the seats' prices (``--cost-limit``; every model seat needs one).
    """

    max_calls: int | None = None
    token_limit: int | None = None
    cost_limit: float | None = None

    def check(self) -> Limits:
        """``self``, each limit within its range; else a one-line UsageError naming its flag."""
        for name, flag in FLAGS.items():
            value = getattr(self, name)
            if value is not None:
                sampling.check_option(value, RANGES[name], flag)
        return self

    def set(self) -> dict[str, float]:
        """The limits given, by name."""
        return {name: getattr(self, name) for name in FLAGS if getattr(self, name) is not None}


class LimitReached(Exception):
    """A spending limit stopped the run before a batch of calls (every call sent was recorded).

    Attributes:
        limit: the limit's name (``"max_calls"``, ``"token_limit"``, ``"cost_limit"``).
        value: its value; spent: what the run had spent (calls, tokens, cost).
        partial: set by the session: the finished episodes' results so far.
    """

    def __init__(self, limit: str, value: float, spent: Mapping[str, float]):
        self.limit, self.value, self.spent = limit, value, dict(spent)
        self.partial: Any = None
        super().__init__(f"stopped by {FLAGS[limit]} {_number(value)} ({_spent(limit, spent)})")


def _number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.4g}"


def _spent(limit: str, spent: Mapping[str, float]) -> str:
    if limit == "max_calls":
        return f"{spent['calls']:,} calls made"
    if limit == "token_limit":
        return f"{spent['tokens']:,} tokens spent"
    return f"${spent['cost']:,.4f} spent"


class Budget:
    """What a run has spent against its :class:`Limits`, and how many calls may go next.

    Args:
        limits: the run's limits.
        price_of: seat name -> its price (None: unknown); read for ``cost_limit`` only.

    Calls are added from the clients' threads as they return (:meth:`add`), so the counts are
    behind a lock.
    """

    def __init__(self, limits: Limits, price_of: Callable[[str], Price | None] | None = None):
        self.limits = limits
        self.price_of = price_of or (lambda seat: None)
        self.calls = 0
        self.tokens = 0
        self.cost = 0.0
        self.largest_tokens = 0  # the largest call so far: how a batch's size is planned
        self.largest_cost = 0.0
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        return bool(self.limits.set())

    def spent(self) -> dict[str, float]:
        with self._lock:
            return {"calls": self.calls, "tokens": self.tokens, "cost": self.cost}

    def add(self, seat: str, prompt: int, completion: int, cached_prompt: int = 0) -> None:
        """One call made by ``seat`` (a cache hit is none: it is never added)."""
        price = self.price_of(seat) if self.limits.cost_limit is not None else None
        dollars = cost(price, prompt, cached_prompt, completion) if price is not None else 0.0
        with self._lock:
            self.calls += 1
            self.tokens += prompt + completion
            self.cost += dollars
            self.largest_tokens = max(self.largest_tokens, prompt + completion)
            self.largest_cost = max(self.largest_cost, dollars)

    def add_recorded(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """The calls a resumed run's transcript holds (those answered from the cache left out)."""
        for row in rows:
            if not row.get("cached"):
                self.add(
                    str(row.get("seat", "")),
                    _count(row.get("prompt_tokens")),
                    _count(row.get("completion_tokens")),
                    _count(row.get("cached_tokens")),
                )

    def allowance(self, pending: int) -> int:
        """How many of the next ``pending`` calls may be sent; raises :class:`LimitReached` when
        none may (the caller sends the allowed ones, then asks again for the rest)."""
        with self._lock:
            fits = [(pending, "")]
            limits = self.limits
            if limits.max_calls is not None:
                fits.append((limits.max_calls - self.calls, "max_calls"))
            if limits.token_limit is not None:
                fits.append(_fit(limits.token_limit - self.tokens, self.largest_tokens,
                                 "token_limit"))  # fmt: skip
            if limits.cost_limit is not None:
                fits.append(_fit(limits.cost_limit - self.cost, self.largest_cost, "cost_limit"))
            count, limit = min(fits, key=lambda fit: fit[0])
        if count < 1 and limit:
            raise LimitReached(limit, getattr(limits, limit), self.spent())
        return max(count, 0)


def _fit(left: float, largest: float, limit: str) -> tuple[int, str]:
    """Calls of the largest size seen that fit in ``left`` (one while no size is known)."""
    if left <= 0:
        return 0, limit
    if largest <= 0:
        return 1, limit
    return int(math.floor(left / largest)), limit


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def budget_for(
    limits: Limits, seats: Iterable[str | None], prices: Mapping[str, Price]
) -> Budget | None:
    """The budget of a run with ``limits`` (None without any) whose seats are ``seats`` (their
    specs, any kind; None for a seat left open), priced by their ``price=`` option or
    ``prices`` (``--prices``). ``--cost-limit`` needs a price for every model seat: refused
    in one line before anything is written."""
    if not limits.set():
        return None
    price_of = functools.partial(seat_price, prices=prices)
    models = [seat for seat in dict.fromkeys(seats) if seat and is_model_seat(seat)]
    unpriced = [seat for seat in models if price_of(seat) is None]
    if limits.cost_limit is not None and unpriced:
        raise UsageError(
            f"--cost-limit: no price for {', '.join(unpriced)}; give one with --prices FILE or "
            "the seat's price= option, or limit --token-limit instead"
        )
    return Budget(limits, price_of)


# --------------------------------------------------------------------------- reporting
def partial_fields(stop: LimitReached | None) -> dict[str, Any]:
    """What a results.json written by a stopped run adds: ``"partial": true``, the limit that
    stopped it, its value and what was spent ({} for a run that finished)."""
    if stop is None:
        return {}
    return {
        "partial": True,
        "stopped_by": stop.limit,
        "limit": stop.value,
        "spent": {"calls": stop.spent["calls"], "tokens": stop.spent["tokens"],
                  "cost": round(stop.spent["cost"], 6)},
    }  # fmt: skip


def stop_line(command: str, stop: LimitReached, out: Path | None, finished: int) -> str:
    """The one line a stopped run prints: the limit, what finished, how to go on."""
    flag = FLAGS[stop.limit]
    done = f"{finished} episode(s) finished"
    if out is None:
        return (
            f"dilemmax {command}: {stop}; {done} (not written: without --out there is no "
            f"transcript to resume); run again with --out and a higher {flag}"
        )
    return (
        f"dilemmax {command}: {stop}; {done}, written as partial to {out / 'results.json'}; "
        f"every call made is in {out / 'transcript.jsonl'}: continue with the same command, "
        f"--resume and a higher {flag}"
    )
