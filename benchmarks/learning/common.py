"""Helpers shared by the learning benchmarks: timing, machine notes, markdown tables."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import jax

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def machine_note() -> str:
    """One line on where the numbers were measured (load matters on a shared machine)."""
    try:
        load = os.getloadavg()
        load_text = f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    except OSError:
        load_text = "load unknown"
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        commit = "?"
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU(s), "
        f"jax {jax.__version__} on {jax.default_backend()} ({jax.device_count()} device(s)), "
        f"{load_text}, commit {commit}, {time.strftime('%Y-%m-%d %H:%M')}"
    )


def command_line() -> str:
    script = Path(sys.argv[0]).resolve()
    name = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script
    return "python " + " ".join([str(name)] + sys.argv[1:])


def table(header: list[str], rows: list[list]) -> str:
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.3f}"
        return str(v)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


class Timer:
    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start
