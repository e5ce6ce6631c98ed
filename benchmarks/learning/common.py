"""Helpers shared by the learning benchmarks: timing, machine notes, markdown tables."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np

from dilemmax.train.run import TrainingRun

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


def time_chunk(config, repeats: int) -> tuple[float, float]:
    """(env-steps/s, compile s) of a training chunk of ``config``: one compiling call, then
    ``repeats`` calls timed together and blocked on. The run folder is a scratch one."""
    run = TrainingRun(config, "/tmp/dilemmax-time-chunk")
    state = run.init_state()
    t0 = time.perf_counter()
    state, metrics = run.chunk(state)
    jax.block_until_ready((state, metrics))
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(repeats):
        state, metrics = run.chunk(state)
    jax.block_until_ready((state, metrics))
    seconds = (time.perf_counter() - t0) / repeats
    return config.num_envs * config.num_steps * config.log_every / seconds, compile_s


def run_grid(train_run, eval_run, keys, env_config, log=print) -> dict:
    """Trains and evaluates one run per (group g, seed s), one at a time.

    Args:
        train_run: ``(key, env_config) -> (runner_state, {name: scalar})``.
        eval_run: ``(params, env_config, key) -> {name: scalar}``.
        keys: uint32[G, S, 2]; env_config: leaves with leading axis G.

    Returns:
        {name: float64[G, S]}.

    Each function is jitted once (the env configuration is an argument, so every run reuses
    the compiled program). Runs are not vmapped into one program: on the 2-core CPU, large
    vmapped training programs deadlocked inside the XLA CPU runtime of jax 0.10 (0% CPU, every
    thread in a futex wait), while the single-run program never did.
    """
    train_j, eval_j = jax.jit(train_run), jax.jit(eval_run)
    groups, seeds = keys.shape[:2]
    out: dict = {}
    for g in range(groups):
        config = jax.tree.map(lambda x, g=g: x[g], env_config)
        for s in range(seeds):
            state, extra = train_j(keys[g, s], config)
            values = {**extra, **eval_j(state.params, state.env_config, keys[g, s])}
            for name, value in jax.device_get(values).items():
                out.setdefault(name, np.zeros((groups, seeds)))[g, s] = float(value)
        if log:
            log(f"  group {g + 1}/{groups} done", flush=True)
    return out
