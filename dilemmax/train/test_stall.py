"""Training that used to stall in XLA's CPU runtime (benchmarks/xla_stall/), and what ends a
stall that could still happen.

- ``import dilemmax`` adds ``--xla_cpu_enable_concurrency_optimized_scheduler=false`` to
  XLA_FLAGS before JAX starts a backend, after the user's own flags, and leaves a user's own
  setting of it alone (checked in fresh interpreters: the flags are read once per process).
- The configurations that stalled on a 2-core machine train to the end at tiny sizes: separate
  recurrent parameters per learner, MAPPO with two vmapped seeds, a chunk sharded over 4 forced
  CPU devices. Each runs in a subprocess with a timeout, so a regression fails instead of
  hanging the suite.
- The watchdog (:mod:`dilemmax.train.watchdog`) ends a chunk that waits with the process idle,
  with one line and exit status 3, keeps a busy chunk however long it computes, and the run
  resumes from the checkpoint the message names.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from dilemmax import xla_defaults

FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler"
FORCE_4 = "--xla_force_host_platform_device_count=4"


def _python(code: str, timeout: float, env: dict | None = None, cwd=None):
    """Runs ``code`` in a fresh interpreter; past ``timeout`` seconds (a hang) the test fails."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


# ----------------------------------------------------------------------------- XLA_FLAGS default
@pytest.mark.parametrize(
    "given, expected",
    [
        ("", f"{FLAG}=false"),
        (FORCE_4, f"{FORCE_4} {FLAG}=false"),
        (f"{FLAG}=true", f"{FLAG}=true"),
        (f"  {FLAG}=false ", f"{FLAG}=false"),
        (f"--xla_dump_to=/tmp/x {FLAG}", f"--xla_dump_to=/tmp/x {FLAG}"),
        (f"--no{FLAG[2:]}", f"--no{FLAG[2:]}"),
    ],
)  # fmt: skip
def test_the_scheduler_flag_is_added_unless_the_user_set_it(given, expected):
    assert xla_defaults.with_defaults(given) == expected


def test_import_dilemmax_sets_the_flag_before_jax_starts_and_keeps_the_users():
    code = """
        import os, jax
        import dilemmax
        from jax._src import xla_bridge
        assert not xla_bridge.backends_are_initialized()  # importing starts no backend
        print(os.environ["XLA_FLAGS"])
    """
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    plain = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
        timeout=120,
    )  # fmt: skip
    assert plain.returncode == 0, plain.stderr[-2000:]
    assert plain.stdout.split() == [f"{FLAG}=false"]
    for users in (f"{FLAG}=true", f"--xla_force_host_platform_device_count=2 {FLAG}=false"):
        kept = _python(code, 120, {"XLA_FLAGS": users})
        assert kept.returncode == 0, kept.stderr[-2000:]
        assert kept.stdout.strip() == users  # nothing added, nothing changed


def test_a_backend_started_before_dilemmax_is_named_in_a_warning():
    code = """
        import os, warnings, jax, jax.numpy as jnp
        jnp.zeros(2).block_until_ready()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import dilemmax
        print(os.environ.get("XLA_FLAGS", ""))
        print(" | ".join(str(w.message) for w in caught))
    """
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    flags, warning = proc.stdout.splitlines()
    assert flags == ""  # too late to take effect: not set, and said so
    assert "started its CPU backend" in warning and f"{FLAG}=false" in warning
