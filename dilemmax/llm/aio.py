"""One background event loop for the model clients, and a synchronous batch call on top of it.

The harness is synchronous (it steps JAX between batches of calls), while the fast HTTP clients
and Inspect AI's model API are asynchronous. Every client of the process shares one event loop
running on a daemon thread (:func:`background_loop`): connections are reused across batches and
across clients, and no thread is started per call. :func:`run_batch` runs one coroutine per
request on that loop and hands each result to the caller's thread as soon as it is done, so the
``on_result`` callbacks (the transcript's writes) run where the harness runs, in the order the
calls finish.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")

_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_PID: int | None = None  # the process that started it (a forked child needs its own)
_LOOP_LOCK = threading.Lock()


def background_loop() -> asyncio.AbstractEventLoop:
    """The process's client event loop, started on first use on a daemon thread (again in a
    forked child, where the parent's loop thread does not exist)."""
    global _LOOP, _LOOP_PID
    with _LOOP_LOCK:
        if _LOOP is None or _LOOP.is_closed() or os.getpid() != _LOOP_PID:
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def serve() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            threading.Thread(target=serve, name="dilemmax-clients", daemon=True).start()
            ready.wait()
            _LOOP, _LOOP_PID = loop, os.getpid()
        return _LOOP


def run(coroutine: Awaitable[T]) -> T:
    """Runs ``coroutine`` on the background loop and waits for its result (from any thread but
    the loop's own)."""
    loop = background_loop()
    if _on_loop(loop):
        raise RuntimeError("dilemmax.llm.aio.run called from the client loop itself")
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result()


def loop_semaphore(holder: dict, size: int) -> asyncio.Semaphore:
    """A client's bound on its calls in flight, made on (and for) the running loop: a loop of
    a forked child gets a fresh one. ``holder`` is the client's own cache."""
    loop = asyncio.get_running_loop()
    if holder.get("loop") is not loop:
        holder.update(loop=loop, semaphore=asyncio.Semaphore(size))
    return holder["semaphore"]


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


Report = Callable[[Any], Awaitable[None]]
"""``await report(result)``: hands a call's result to the caller's thread and returns once its
``on_result`` has run (so a client can keep the call's slot in flight until it is recorded)."""


def run_batch(
    calls: Sequence[Callable[[Report], Awaitable[T]]],
    on_result: Callable[[int, T], Any] | None = None,
) -> list[T]:
    """``[await call(report) for call in calls]``, all at once on the background loop.

    ``on_result(i, result)`` runs on the calling thread as each call finishes. A call may
    ``await report(result)`` itself, inside its own bound on calls in flight: it then goes on
    only once ``on_result`` has returned, so with one call in flight a result is recorded
    before the next request leaves (a crash loses only calls still in flight). A call that does
    not report is reported when it returns. An exception of a call (a fatal client error)
    cancels the calls still running and is raised here, after the results that came before it
    were reported.
    """
    loop = background_loop()
    if _on_loop(loop):
        raise RuntimeError("dilemmax.llm.aio.run_batch called from the client loop itself")
    done: queue.SimpleQueue = queue.SimpleQueue()

    async def one(index: int, call: Callable[[Report], Awaitable[T]]) -> None:
        reported = False

        async def report(result: Any) -> None:
            nonlocal reported
            reported = True
            recorded = loop.create_future() if on_result is not None else None
            done.put((index, result, None, recorded))
            if recorded is not None:
                await recorded

        try:
            result = await call(report)
            if not reported:
                await report(result)
        except asyncio.CancelledError:
            raise
        except BaseException as error:  # handed to the caller's thread, raised there
            done.put((index, None, error, None))

    async def every() -> None:  # one hand-over to the loop for the whole batch
        await asyncio.gather(*(one(i, c) for i, c in enumerate(calls)))

    future = asyncio.run_coroutine_threadsafe(every(), loop)
    results: list[Any] = [None] * len(calls)
    try:
        for _ in range(len(calls)):
            index, result, error, recorded = done.get()
            if error is not None:
                raise error
            results[index] = result
            try:
                if on_result is not None:
                    on_result(index, result)
            finally:
                if recorded is not None:
                    loop.call_soon_threadsafe(_settle, recorded)
    finally:
        future.cancel()  # after a fatal error or an interrupt nothing keeps calling
    return results


def _settle(recorded: asyncio.Future) -> None:
    if not recorded.done():  # a cancelled batch's future stays cancelled
        recorded.set_result(None)


class BatchedClient:
    """The synchronous ``Client.complete`` of an asynchronous client: each request of a batch is
    one coroutine on the background loop, at most ``concurrency`` in flight.

    A subclass sets ``concurrency`` and ``_in_flight = {}`` (where the loop's semaphore is made)
    and implements ``_attempts(request) -> Completion``: one request with its retries, never
    raising for a failed call.
    """

    concurrency: int
    _in_flight: dict

    def complete(self, requests, on_result=None):
        calls = [
            lambda report, request=request: self._complete_one(request, report)
            for request in requests
        ]
        return run_batch(calls, on_result)

    async def _complete_one(self, request, report: Report):
        # The call holds its slot until the harness has recorded it: what is not yet in the
        # transcript is still in flight.
        async with loop_semaphore(self._in_flight, self.concurrency):
            completion = await self._attempts(request)
            await report(completion)
            return completion

    async def _attempts(self, request):
        raise NotImplementedError
