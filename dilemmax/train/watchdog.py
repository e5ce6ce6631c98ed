"""Ends a run whose computation stopped without failing: no progress while the process is idle.

A compiled program can stop for good without an error: XLA's CPU runtime has stalled with every
thread parked (benchmarks/xla_stall/), and a collective can wait forever for a peer. The main
thread then sits in ``block_until_ready``, in C++, and nothing tells the user. A
:class:`StallWatchdog` watches from a thread of its own: while the main thread waits for a chunk
(:meth:`StallWatchdog.waiting`), it reads the process's CPU time (``time.process_time``, every
thread of the process) and, when that stays still for ``timeout`` seconds, prints one line and
ends the process with :data:`EXIT_STALLED`. A slow chunk that computes keeps the CPU busy and is
never ended, however long it takes; a starved one on a loaded machine still gets its share.

Why the process ends instead of raising in the main thread: a stalled XLA program cannot be
cancelled. ``_thread.interrupt_main`` does reach a main thread waiting in ``block_until_ready``
(it polls for signals), but the interpreter then never exits: tearing down the runtime waits for
the program that never finishes (tried on jaxlib 0.10.2). ``os._exit`` after flushing the message
is the end that always comes; the run folder's lock is an OS lock and dies with the process, and
the last checkpoint is already on disk.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator

EXIT_STALLED = 3  # the exit status of a run ended by the watchdog (2: usage, 1: diverged)
# A process using less than this share of one core is idle. A stalled jaxlib wait ticks about
# 0.05% (its polling for signals); a computing process on a 2-core machine at load 16 gets ~12%.
IDLE_SHARE = 0.02


class StallWatchdog:
    """Ends the process when it waits ``timeout`` seconds with its CPU time idle.

    ``message(what)`` builds the line printed (``what``: the wait being watched, as given to
    :meth:`waiting`); ``end`` ends the process (``os._exit``; tests give another). A timeout of 0
    watches nothing. :meth:`start` / :meth:`stop` (or a ``with`` block) around the loop,
    :meth:`waiting` around each wait.
    """

    def __init__(
        self,
        timeout: float,
        message: Callable[[str], str],
        end: Callable[[int], None] = os._exit,
    ):
        self.timeout = float(timeout)
        self.message = message
        self.end = end
        # Often enough to end a stall within a tenth of the timeout, rarely enough to cost nothing.
        self.poll = min(5.0, max(0.02, self.timeout / 10))
        self._what: str | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> StallWatchdog:
        """Starts watching (a thread of its own; none for a timeout of 0)."""
        if self.timeout > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="stall-watchdog", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> StallWatchdog:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @contextlib.contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        """Watches the block inside: ``what`` names it in the message."""
        with self._lock:
            self._what = what
        try:
            yield
        finally:
            with self._lock:
                self._what = None

    def _watch(self) -> None:
        watched, idle_since = None, time.monotonic()
        last_wall, last_cpu = idle_since, time.process_time()
        while not self._stop.wait(self.poll):
            now, cpu = time.monotonic(), time.process_time()
            with self._lock:
                what = self._what
            busy = cpu - last_cpu >= IDLE_SHARE * (now - last_wall)
            last_wall, last_cpu = now, cpu
            if what is None or what != watched or busy:
                watched, idle_since = what, now  # a new wait, or progress: the clock restarts
            elif now - idle_since >= self.timeout:
                self._fire(what)
                return

    def _fire(self, what: str) -> None:
        try:
            line = self.message(what)
        except Exception as err:  # the process ends either way; say what is known
            line = f"{what} made no progress for {self.timeout:g} s ({err})"
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        with contextlib.suppress(Exception):
            sys.stderr.write(line.replace("\n", " ") + "\n")
            sys.stderr.flush()
        self.end(EXIT_STALLED)
