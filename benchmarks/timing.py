"""Timing and reporting helpers shared by the benchmark scripts (`python benchmarks/<name>.py`).

Every figure follows one rule: compile once (timed apart), then take the best of ``repeats``
timed calls, each blocked on with ``jax.block_until_ready``.
"""

from __future__ import annotations

import os
import platform
import resource
import time
from collections.abc import Callable
from pathlib import Path

import jax


def _compile(run: Callable, key: jax.Array) -> tuple[Callable, float]:
    """(callable to time, seconds spent compiling it).

    A jitted ``run`` is compiled ahead of time, so the seconds are compilation alone; any other
    callable is timed on its first call, which then counts one run as well.
    """
    start = time.perf_counter()
    if hasattr(run, "lower"):
        run = run.lower(key).compile()
    else:
        jax.block_until_ready(run(key))
    return run, time.perf_counter() - start


def time_compiled(run: Callable[[jax.Array], object], repeats: int = 3) -> tuple[float, float]:
    """(compile seconds, best run seconds) of a jitted ``run(key)``; key 0 is the warm-up call."""
    warm_up = jax.random.key(0)
    run, compile_s = _compile(run, warm_up)
    jax.block_until_ready(run(warm_up))
    best = float("inf")
    for r in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run(jax.random.key(r + 1)))
        best = min(best, time.perf_counter() - start)
    return compile_s, best


def machine() -> str:
    """The device, core count, processor and jax version the figures come from."""
    device = jax.devices()[0]
    cpu = platform.processor() or platform.machine()
    return (
        f"{device.platform} ({device.device_kind}), {os.cpu_count()} CPU cores, {cpu}; "
        f"jax {jax.__version__}"
    )


def load() -> str:
    """The 1 / 5 / 15-minute load averages, to judge how quiet the machine was."""
    return "load average {:.2f} / {:.2f} / {:.2f}".format(*os.getloadavg())


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far, in MiB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def report(text: str, out: Path | None) -> None:
    """Print a results table and, when ``out`` is given, write it there."""
    text = text.rstrip("\n") + "\n"
    print(text, end="")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        print(f"written to {out}")
