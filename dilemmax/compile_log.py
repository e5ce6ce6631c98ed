"""Counting what JAX compiles: programs, their compile time, and the persistent cache's share.

Compiling, not running, is most of what a short JAX job costs (a test, a CLI command at tiny
sizes, a smoke run). JAX reports every compilation through :mod:`jax.monitoring`; this module
turns those events into a :class:`CompileTally` that can be read at any point:

- ``programs``: backend compilations requested (one per distinct jitted program and argument
  shapes a process meets; a persistent-cache hit still counts, since the program was traced,
  lowered and looked up);
- ``cache_hits``: those of them served from the persistent compilation cache;
- ``compile_s``, ``trace_s``, ``lower_s``: seconds in XLA's compiler (or the cache read), in
  tracing Python to a jaxpr, and in lowering it to StableHLO.

Set ``DILEMMAX_COMPILE_LOG=DIR`` and every process that imports dilemmax appends its events to
``DIR/<pid>.log`` as they happen (:func:`log_to_directory_from_environment`, called by
``dilemmax/__init__.py``); :class:`DirectoryReader` adds them up. The test
suite's cost report sets it, so the programs a command-line subprocess, a notebook kernel or a
second training process compiles count against the test that started it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path

ENV_VAR = "DILEMMAX_COMPILE_LOG"

# jax.monitoring's event names (jax/_src/dispatch.py, jax/_src/compiler.py), each to the tally
# field it adds to.
DURATION_EVENTS = {
    "/jax/core/compile/backend_compile_duration": "compile_s",
    "/jax/core/compile/jaxpr_trace_duration": "trace_s",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
}
PROGRAM_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"


@dataclass
class CompileTally:
    """What one process (or one test, or one file) compiled."""

    programs: int = 0
    cache_hits: int = 0
    compile_s: float = 0.0
    trace_s: float = 0.0
    lower_s: float = 0.0

    def add(self, other: CompileTally) -> None:
        for field in fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

    def minus(self, earlier: CompileTally) -> CompileTally:
        """What was compiled since ``earlier`` (a copy taken from the same running tally)."""
        return CompileTally(
            **{f.name: getattr(self, f.name) - getattr(earlier, f.name) for f in fields(self)}
        )

    def copy(self) -> CompileTally:
        return CompileTally(**{f.name: getattr(self, f.name) for f in fields(self)})

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def record(self, event: str, duration: float | None = None) -> None:
        """Add one jax.monitoring event (a duration event, or the cache-hit count event)."""
        if event == CACHE_HIT_EVENT:
            self.cache_hits += 1
            return
        field = DURATION_EVENTS.get(event)
        if field is None:
            return
        if event == PROGRAM_EVENT:
            self.programs += 1
        setattr(self, field, getattr(self, field) + float(duration or 0.0))


def program_name(fun_name: str) -> str:
    """The jitted function's own name as JAX reports all three stages: tracing names ``step``,
    lowering and compiling name ``jit(step)``."""
    if fun_name.startswith("jit(") and fun_name.endswith(")"):
        return fun_name[4:-1]
    return fun_name or "?"


class ProgramCosts:
    """Compile, trace and lower events per program name (the jitted function's ``__name__``):
    which programs a run's compile time goes to, not only how much. A name can stand for many
    programs (every ``<lambda>``; one function at several shapes), which ``programs`` counts."""

    def __init__(self):
        self._pending: dict[str, CompileTally] = {}

    def record(self, event: str, duration: float, fun_name: str = "") -> None:
        if event in DURATION_EVENTS:
            name = program_name(str(fun_name))
            self._pending.setdefault(name, CompileTally()).record(event, duration)

    def take(self) -> dict[str, dict[str, float]]:
        """The rows recorded since the previous take, by name."""
        taken, self._pending = self._pending, {}
        # Cache hits carry no name: a row has programs and seconds only.
        return {
            name: {k: v for k, v in tally.as_dict().items() if k != "cache_hits"}
            for name, tally in taken.items()
        }


def listen_by_program(costs: ProgramCosts) -> None:
    """Add every compile event of this process to ``costs``, by program name, from now on."""
    import jax.monitoring as monitoring  # here, so that this module stays importable before JAX

    monitoring.register_event_duration_secs_listener(
        lambda event, duration, fun_name="", **_: costs.record(event, duration, fun_name)
    )


def listen(tally: CompileTally) -> None:
    """Add every compile event of this process to ``tally`` from now on."""
    import jax.monitoring as monitoring  # here, so that this module stays importable before JAX

    monitoring.register_event_duration_secs_listener(
        lambda event, duration, **_: tally.record(event, duration)
    )
    monitoring.register_event_listener(lambda event, **_: tally.record(event))


class _FileLog:
    """Appends events as ``<event> <seconds>`` lines to one file, flushed line by line so that a
    process that is killed leaves what it had compiled so far."""

    def __init__(self, path: Path):
        self._file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 (process-long)

    def record(self, event: str, duration: float | None = None) -> None:
        if event == CACHE_HIT_EVENT or event in DURATION_EVENTS:
            self._file.write(f"{event} {float(duration or 0.0)!r}\n")


def log_to_directory_from_environment() -> None:
    """Log this process's compile events to ``$DILEMMAX_COMPILE_LOG/<pid>.log`` when it is set."""
    directory = os.environ.get(ENV_VAR)
    if not directory or not os.path.isdir(directory):
        return
    import jax.monitoring as monitoring  # only when asked: the log is a diagnostic

    log = _FileLog(Path(directory) / f"{os.getpid()}.log")
    monitoring.register_event_duration_secs_listener(
        lambda event, duration, **_: log.record(event, duration)
    )
    monitoring.register_event_listener(lambda event, **_: log.record(event))


class DirectoryReader:
    """Reads the logs other processes write into one directory, each line once.

    Files are only read, from where the last read stopped, so a process still writing loses
    nothing; a line still being written (no newline yet) waits for the next read."""

    def __init__(self, directory: str | os.PathLike, skip_pid: int | None = None):
        self.directory = Path(directory)
        self.skip = f"{skip_pid}.log" if skip_pid is not None else None
        self._offsets: dict[str, int] = {}

    def read(self) -> CompileTally:
        """The events logged since the previous read."""
        tally = CompileTally()
        for path in sorted(self.directory.glob("*.log")):
            if path.name == self.skip:
                continue
            start = self._offsets.get(path.name, 0)
            try:
                with open(path, "rb") as file:
                    file.seek(start)
                    data = file.read()
            except OSError:
                continue
            complete = data[: data.rfind(b"\n") + 1]
            self._offsets[path.name] = start + len(complete)
            for line in complete.decode("utf-8", "replace").splitlines():
                event, _, seconds = line.rpartition(" ")
                try:
                    tally.record(event, float(seconds))
                except ValueError:
                    continue
        return tally
