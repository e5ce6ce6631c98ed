"""Ctrl-C ends every command with one line and status 130 (issue #44), wherever it lands.

- During a cold XLA compile: the interrupt stopped the wait for the compile but not the
  compile, and the interpreter's teardown under XLA's compile threads crashed (SIGSEGV, in
  about half the tries of the probe below before the fix: a race, so it is tried twice). A
  separate ``dilemmax view`` process (its own exit is what is tested) replays a hand-written
  3-step moral_hazard rollout with a fresh compilation cache and gets SIGINT just after JAX has
  lowered the replay and handed it to XLA (``JAX_LOG_COMPILES`` says when).
- In a garbage-collector callback (JAX runs one at every collection, so a Ctrl-C while JAX
  traces often lands there): Python only reports it ("Exception ignored in ...") and the
  command ran on to exit 0. Raised there on purpose, in-process.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from dilemmax.commandline import INTERRUPTED, run_parsed

START = {"env": "moral_hazard", "options": {}, "key": [0, 3], "config": None}
STEP = {"actions": {"agent_0": 5, "agent_1": 5}}
ROLLOUT = [{"episode": 0, "start": START}, *({"episode": 0, "t": t, **STEP} for t in range(3))]
LOWERED = "Finished jaxpr to MLIR module conversion jit(replay)"  # XLA's compile comes next
TIMEOUT_S = 120


def _sigint_as_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a runner that ignores SIGINT passes that on


# How long after that line the interrupt comes (the cold compile takes seconds).
@pytest.mark.slow
@pytest.mark.parametrize("in_compile_s", [0.1, 0.3])
def test_a_ctrl_c_during_a_cold_xla_compile_ends_with_status_130(tmp_path, in_compile_s):
    rollout = tmp_path / "rollout.jsonl"
    rollout.write_text("".join(json.dumps(row) + "\n" for row in ROLLOUT))
    env = {**os.environ, "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "cache"),
           "JAX_LOG_COMPILES": "1"}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "dilemmax", "view", str(rollout)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=_sigint_as_default,
    )  # fmt: skip
    watchdog = threading.Timer(TIMEOUT_S, proc.kill)
    watchdog.start()
    try:
        lowered = False
        for line in proc.stderr:
            if line.startswith(LOWERED):
                lowered = True
                time.sleep(in_compile_s)
                proc.send_signal(signal.SIGINT)
                break
        out, err = proc.communicate()
    finally:
        watchdog.cancel()
    assert lowered, "the replay was never compiled"
    said = [line for line in err.splitlines() if not line.startswith(("Compiling", "Finished"))]
    assert proc.returncode == INTERRUPTED, (proc.returncode, said[-5:])
    assert said == ["dilemmax view: interrupted"]  # no traceback
    assert out == "" and not rollout.with_suffix(".html").exists()


@pytest.fixture
def ctrl_c_raises():
    """Python's own Ctrl-C handler while the test runs. A runner started with SIGINT ignored (a
    background job of a shell script, and the pytest-xdist workers it starts) passes that on,
    and then the interrupt the command delivers again (``_thread.interrupt_main``) is ignored
    too, as a real Ctrl-C would be: the test failed in such a run and passed in a terminal."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_swallowed_by_a_gc_callback_still_interrupts_the_command(capsys, ctrl_c_raises):
    def raise_once(phase, info):
        gc.callbacks.remove(raise_once)
        raise KeyboardInterrupt

    def command(args) -> int:
        gc.callbacks.append(raise_once)
        gc.collect()  # Python reports the interrupt as "ignored" and carries on
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # a command's work, which the Ctrl-C should stop
            time.sleep(0.01)
        return 0

    assert run_parsed(argparse.Namespace(command="probe", func=command)) == INTERRUPTED
    assert capsys.readouterr().err == "dilemmax probe: interrupted\n"
