"""Training that used to stall in XLA's CPU runtime (benchmarks/xla_stall/), and what ends a
stall that could still happen.

- ``import dilemmax`` adds ``--xla_cpu_enable_concurrency_optimized_scheduler=false`` to
  XLA_FLAGS before JAX starts a backend, after the user's own flags, and leaves a user's own
  setting of it alone (checked in fresh interpreters: the flags are read once per process).
- The configurations that stalled on a 2-core machine train to the end at tiny sizes: separate
  recurrent parameters per learner, MAPPO with two vmapped seeds, a chunk sharded over 4 forced
  CPU devices. They run in turn in one subprocess with a timeout, so a regression fails instead
  of hanging the suite.
- The watchdog (:mod:`dilemmax.train.watchdog`) ends a chunk that waits with the process idle,
  with one line and exit status 3, keeps a busy chunk however long it computes, and the run
  resumes from the checkpoint the message names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from dilemmax import xla_defaults
from dilemmax.envs.options import OptionError
from dilemmax.train.configure import make_config, parse_sets
from dilemmax.train.run import TrainingRun
from dilemmax.train.test_ppo import ToyEnv, toy_config
from dilemmax.train.watchdog import EXIT_STALLED, StallWatchdog

FLAG = "--xla_cpu_enable_concurrency_optimized_scheduler"
FORCE_4 = "--xla_force_host_platform_device_count=4"
# The suite's cheap-compile flags (conftest.py) without the scheduler flag this process's own
# `import dilemmax` added: each training's `import dilemmax` must add it again.
SUITE_XLA_FLAGS = " ".join(
    flag for flag in os.environ.get("XLA_FLAGS", "").split() if FLAG[2:] not in flag
)
# Subprocesses compile through the suite's cache (JAX_COMPILATION_CACHE_DIR, set by conftest.py),
# so a warm run compiles nothing.
CACHED = dict(os.environ)


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
        (f"--xla_force_host_platform_device_count=2 {FLAG}=false",
         f"--xla_force_host_platform_device_count=2 {FLAG}=false"),
    ],
)  # fmt: skip
def test_the_scheduler_flag_is_added_unless_the_user_set_it(given, expected):
    assert xla_defaults.with_defaults(given) == expected


@pytest.mark.slow
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
    # The user's own setting reaches the backend as it is (the cases of what is kept are
    # test_the_scheduler_flag_is_added_unless_the_user_set_it's; one fresh process shows the
    # import reads and keeps them).
    users = f"--xla_force_host_platform_device_count=2 {FLAG}=true"
    kept = _python(code, 120, {"XLA_FLAGS": users})
    assert kept.returncode == 0, kept.stderr[-2000:]
    assert kept.stdout.strip() == users  # nothing added, nothing changed


@pytest.mark.slow
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


# ----------------------------------------------------------------------------- the watchdog
def _ends(timeout: float, wait, what: str = "chunk 7") -> list[tuple[int, str]]:
    """What a watchdog of ``timeout`` seconds ended with while ``wait(ended_event)`` ran
    (nothing: []); the event is set when the watchdog ends the wait, so an idle wait need not
    outlast it."""
    ended, fired = [], threading.Event()

    def message(waited: str) -> str:
        ended.append(f"{waited} stalled")
        return ended[-1]

    def end(status: int) -> None:
        ended.append(status)
        fired.set()

    with StallWatchdog(timeout, message, end=end) as dog, dog.waiting(what):
        wait(fired)
    return ended


@pytest.mark.slow
def test_an_idle_wait_is_ended_with_the_stall_status_and_a_busy_one_never():
    # Blocked without CPU (an Event: what a stalled program looks like from the process), until
    # the watchdog ends it (5 s: far past its 0.3 s).
    assert _ends(0.3, lambda fired: fired.wait(5)) == ["chunk 7 stalled", EXIT_STALLED]

    def spin(seconds: float) -> None:  # computing: a slow chunk, 6x the timeout
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sum(range(1000))

    assert _ends(0.3, lambda fired: spin(1.8)) == []
    # Outside a wait nothing is watched (4x the timeout), and a timeout of 0 watches nothing
    # (it starts no thread at all).
    with StallWatchdog(0.1, str, end=pytest.fail):
        threading.Event().wait(0.4)
    assert _ends(0, lambda fired: fired.wait(0.3)) == []


STALLING_RUN = """
    import sys, time
    from pathlib import Path
    import jax, jax.numpy as jnp
    from dilemmax.train.run import TrainingRun
    from dilemmax.train.test_ppo import ToyEnv, toy_config

    config = toy_config(total_timesteps=16 * 4 * 3, log_every=1, eval_every=0, stall_timeout=1)
    run = TrainingRun(config, Path(sys.argv[1]), env=ToyEnv())
    chunk = run.chunk

    def never_ready(x):  # runs in XLA's callback thread and never returns: no CPU used
        time.sleep(3600)
        return x

    def stalling_chunk(state):
        state, metrics = chunk(state)
        if int(state.update[0]) == 2:  # the second chunk never becomes ready
            stuck = jax.jit(lambda x: jax.pure_callback(never_ready, x, x))
            metrics = {**metrics, "stuck": stuck(jnp.zeros(()))}
        return state, metrics

    run.chunk = stalling_chunk
    run.train()
    print("trained", [r["chunk"] for r in run.records()])
"""


@pytest.mark.slow
def test_a_stalled_chunk_ends_the_run_in_one_line_and_resume_continues(tmp_path):
    out = tmp_path / "run"
    start = time.monotonic()
    # The stall in a process of its own: the watchdog ends the process, which is what is tested
    # (a stalled program cannot be cancelled; in this process it would end the test run).
    stalled = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(STALLING_RUN), str(out)],
        capture_output=True, text=True, timeout=300, env=CACHED,
    )  # fmt: skip
    assert stalled.returncode == EXIT_STALLED, stalled.stderr[-3000:]
    line = stalled.stderr.strip().splitlines()[-1]
    assert line.startswith("dilemmax train: chunk 1 made no progress for 1 s with the process idle")
    assert "the last checkpoint, ckpt_000000.msgpack, is on disk" in line
    assert "--resume" in line and "trained" not in stalled.stdout
    assert time.monotonic() - start < 240
    # The resume needs no process of its own: the stalled one's lock died with it. Its watchdog
    # is off here (stall_timeout is display-only, so the folder's config still matches), so
    # this process is never the one ended.
    config = toy_config(total_timesteps=16 * 4 * 3, log_every=1, eval_every=0, stall_timeout=0)
    resumed = TrainingRun(config, out, env=ToyEnv())
    resumed.train(resume=True)
    assert [r["chunk"] for r in resumed.records()] == [0, 1, 2]


# ----------------------------------------------------------------------------- formerly stalling
TINY = [
    "num_envs=8", "num_steps=4", "num_minibatches=1", "update_epochs=1", "log_every=1",
    "total_timesteps=64", "eval_every=0", "hidden=8", "num_layers=1", "checkpoint_every=1",
]  # fmt: skip
STALLED_BEFORE = {
    # Separate recurrent parameters per learner: vmapped orthogonal inits, batched QRs.
    "recurrent_separate": ["moral_hazard", "--set", "recurrent=True", "--set",
                           "shared_params=False", "--set", "gru_hidden=8"],
    # A chunk sharded over 4 CPU devices.
    "sharded_1x4": ["moral_hazard", "--set", "shard=on", "--set", "num_seeds=2", "--set",
                    "recurrent=True", "--set", "shared_params=False", "--set", "gru_hidden=8"],
    # MAPPO with two seeds in one program (the zoo trained these one seed per program). Two
    # agents, not the game's five: the stalling calls were the QRs of the seeds' initialisers
    # (one parameter set for every learner: batched over the seeds whatever the team size), and
    # a team of two's chunk compiles in about half the time of five's.
    "mappo_two_seeds": ["open_harvest", "--algo", "mappo", "--set", "num_seeds=2", "--set",
                        "conv_features=[]", "--set", "embed_dim=2", "--set", "eval_episodes=1",
                        "--set", "env_kwargs.num_agents=2"],
}  # fmt: skip
# The three train in turn in one process, with the 4 forced CPU devices the sharded chunk needs;
# the other two keep to one device (shard=off, which their own process of one device would
# choose), so each compiles and runs the program it would alone. Where the stall happened, the
# intra-op thread pool, is the process's whatever its device count (sized from its CPU
# affinity; the sharded chunk stalled with its 4 devices' executions all waiting in it:
# benchmarks/xla_stall/README.md). One process instead of three: one start-up, and the programs
# the two moral_hazard runs share compiled once.
ONE_DEVICE = ["--set", "shard=off"]
TRAIN_IN_TURN = """
    import json, sys
    from dilemmax.cli import main

    for case, argv in json.loads(sys.argv[1]).items():
        print(f"== {case} starts", flush=True)
        status = main(argv)
        print(f"== {case} ended with {status}", flush=True)
        if status:
            sys.exit(status)
"""


@pytest.fixture(scope="module")
def trained_in_turn(tmp_path_factory):
    """(run folders' root, the finished process) of the three trainings."""
    root = tmp_path_factory.mktemp("stalled-before")
    sets = [x for pair in TINY for x in ("--set", pair)]
    commands = {
        case: ["train", *args, *([] if case == "sharded_1x4" else ONE_DEVICE), *sets,
               "--no-progress", "--stall-timeout", "120", "--out", str(root / case)]
        for case, args in STALLED_BEFORE.items()
    }  # fmt: skip
    # The suite's cheap-compile flags (conftest.py) plus the 4 devices: the stall needs no
    # optimised program (benchmarks/xla_stall/repro.py stalls under them too without dilemmax's
    # scheduler flag), and the trainings compile in a fraction of the time.
    env = dict(CACHED, JAX_PLATFORMS="cpu", XLA_FLAGS=f"{SUITE_XLA_FLAGS} {FORCE_4}".strip())
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(TRAIN_IN_TURN), json.dumps(commands)],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    return root, proc


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(STALLED_BEFORE))
def test_configurations_that_stalled_train_to_the_end(case, trained_in_turn):
    root, proc = trained_in_turn
    # A stall ends with the watchdog's line (exit 3) well before the process's timeout, and the
    # cases after it never start.
    assert f"== {case} ended with 0" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]
    own = proc.stdout.split(f"== {case} starts")[1].split(f"== {case} ended")[0]
    assert "done: 64 env steps" in own
    records = [json.loads(x) for x in (root / case / "metrics.jsonl").read_text().splitlines()]
    assert [r["chunk"] for r in records] == [0, 1]


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "1e9", "soon"])
def test_a_stall_timeout_out_of_range_is_refused_naming_it(value):
    with pytest.raises(OptionError, match="stall_timeout"):
        make_config("moral_hazard", "ippo", parse_sets([f"stall_timeout={value}"]))
    assert make_config("moral_hazard", "ippo", parse_sets(["stall_timeout=0"])).stall_timeout == 0
