"""Issue #30 probes of `dilemmax train`, `evaluate` and `rollout`, and of `env.step`'s actions.

Output paths a command cannot write (a file in the way, ``/proc``, a name with a NUL byte) are one
line naming the option before anything is played or compiled; two starts on one run folder never
delete each other's folder; options that contradict each other are refused, not silently won by
one of them; an actions dict with an agent the env does not have is an error, not ignored.

The CLI runs in-process (``dilemmax.cli.main`` with capsys, through test_cli_errors'
``_fails_cleanly``): every probe fails before any JAX work, and a subprocess would add a jax
import per probe for the same stderr. One subprocess checks the real entry point end to end.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import jax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cli_errors import _fails_cleanly

import dilemmax
from dilemmax.cli import main
from dilemmax.commandline import int_in, output_file, output_folder
from dilemmax.errors import UsageError
from dilemmax.runlock import RunLock
from dilemmax.train import cli as train_cli
from dilemmax.train.configure import make_config
from dilemmax.train.run import TrainingDiverged, TrainingRun
from dilemmax.wrappers.gymnasium import SingleSeatEnv, SingleSeatVectorEnv
from dilemmax.wrappers.legal import MAX_NUM_ENVS, check_count, check_reward
from dilemmax.wrappers.pettingzoo import parallel_env
from dilemmax.wrappers.vec import VecEnv

# Paths no command can write to, each with the words its one-line error must hold.
UNWRITABLE = [
    ("/proc/dilemmax-probe/x", "cannot be written"),
    ("{file}/below", "is a file"),
    ("{file}/two/below", "is a file"),
    ("bad\x00name", "cannot be written"),
]


@pytest.fixture
def a_file(tmp_path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("not a folder\n")
    return path


@pytest.fixture
def nothing_runs(monkeypatch):
    """Fails a probe that gets as far as training, evaluating or playing."""

    def forbidden(*args, **kwargs):
        raise AssertionError("the command got past its checks")

    monkeypatch.setattr(TrainingRun, "train", forbidden)
    monkeypatch.setattr("dilemmax.cli.Arena.run", forbidden)


def _path(template: str, a_file: Path) -> str:
    return template.format(file=a_file)


# ------------------------------------------------------------------ paths and output files
@pytest.mark.slow
@pytest.mark.parametrize(("template", "words"), [*UNWRITABLE, ("{file}", "is a file")])
def test_train_out_that_cannot_be_a_run_folder(capsys, a_file, nothing_runs, template, words):
    out = _path(template, a_file)
    err = _fails_cleanly(capsys, ["train", "consequence", "--out", out, "--no-progress"])
    assert "--out" in err and words in err


@pytest.mark.slow
@pytest.mark.parametrize("option", ["--out", "--json", "--gif"])
@pytest.mark.parametrize(("template", "words"), UNWRITABLE)
def test_rollout_files_are_checked_before_playing(
    capsys, a_file, nothing_runs, option, template, words
):
    env = "open_cleanup" if option == "--gif" else "consequence"
    argv = ["rollout", env, "--episodes", "1", option, _path(template, a_file)]
    err = _fails_cleanly(capsys, argv)
    assert option in err and words in err


@pytest.mark.parametrize("option", ["--out", "--json"])
def test_rollout_refuses_a_folder_where_a_file_goes(capsys, tmp_path, nothing_runs, option):
    err = _fails_cleanly(capsys, ["rollout", "consequence", option, str(tmp_path)])
    assert f"{option} {tmp_path} is a folder" in err


@pytest.mark.parametrize(("option", "value"), [("--gif-scale", "1000000"), ("--fps", "0")])
def test_rollout_gif_numbers_are_bounded(capsys, option, value):
    with pytest.raises(SystemExit) as exit_:
        main(["rollout", "open_cleanup", "--gif", "x.gif", option, value])
    assert exit_.value.code == 2
    assert f"argument {option}: must be an integer in" in capsys.readouterr().err


@pytest.mark.parametrize(("template", "words"), UNWRITABLE)
def test_evaluate_json_is_checked_before_the_checkpoint_is_read(
    capsys, a_file, tmp_path, template, words
):
    argv = ["evaluate", str(tmp_path / "no-run"), "--json", _path(template, a_file)]
    err = _fails_cleanly(capsys, argv)
    assert "--json" in err and words in err


def _fake_run(monkeypatch, ckpt: Path, algo: str = "ippo") -> list:
    """A loaded run (built, nothing trained) whose evaluation must not be reached; returns the
    list its evaluation would append to."""
    evaluated = []
    run = TrainingRun(make_config("consequence", algo), ckpt.parent.parent)
    monkeypatch.setattr(run, "evaluate", lambda *a, **k: evaluated.append(1) or {})
    monkeypatch.setattr(train_cli, "load_run", lambda path: (run, None, ckpt))
    return evaluated


def test_evaluate_default_json_is_checked_before_evaluating(capsys, monkeypatch, a_file):
    evaluated = _fake_run(monkeypatch, a_file / "checkpoints" / "ckpt_000000.msgpack")
    err = _fails_cleanly(capsys, ["evaluate", "somewhere"])
    assert "--json (default <run>/eval.json)" in err and "is a file" in err
    assert not evaluated


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
def test_a_write_that_fails_after_the_check_is_one_line(capsys, monkeypatch):
    """A result that cannot be written once computed (a full disk) names the option."""
    played = SimpleNamespace(summary=lambda: {"return": 1.0})
    monkeypatch.setattr("dilemmax.cli.Arena.run", lambda *a, **k: played)
    err = _fails_cleanly(capsys, ["rollout", "consequence", "--json", "/dev/full"])
    assert "--json /dev/full: writing it failed" in err


@pytest.mark.slow
def test_real_entry_point_names_the_option(tmp_path, a_file):
    """The installed command itself: exit 2, one stderr line, no traceback."""
    cmd = [sys.executable, "-m", "dilemmax.cli", "rollout", "consequence"]
    done = subprocess.run(
        [*cmd, "--json", f"{a_file}/x.json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr
    assert f"--json {a_file}/x.json cannot be written: {a_file} is a file" in done.stderr


_NAMES = st.text(min_size=1, max_size=40).filter(
    lambda s: ".." not in s.split("/") and not s.startswith("/")
)


@settings(max_examples=40, deadline=None)
@given(name=_NAMES, as_folder=st.booleans())
def test_output_checks_are_total(tmp_path_factory, name, as_folder):
    """Any name under a scratch folder (and one under a file) is accepted or refused as a
    UsageError naming the option; nothing else escapes."""
    root = tmp_path_factory.mktemp("names")
    (root / "f").write_text("x")
    for base in (root, root / "f"):
        try:
            if as_folder:
                output_folder(base / name, "--out")
            else:
                output_file(base / name, "--json")
        except UsageError as err:
            assert ("--out" if as_folder else "--json") in str(err)


@settings(max_examples=40, deadline=None)
@given(text=st.text(max_size=30))
def test_bounded_int_refuses_in_argparse_terms(text):
    parse = int_in(1, 8)
    try:
        assert 1 <= parse(text) <= 8
    except argparse.ArgumentTypeError as err:
        assert "must be an integer" in str(err)


# ------------------------------------------------------------------ a race to check
# Another process on the run folder: it takes the flock RunLock takes, on the same file, and
# writes the lock file's "<what> pid <n>" line and its own config.json, then waits for stdin.
_OTHER_PROCESS = """
import fcntl, os, sys
folder = sys.argv[1]
fd = os.open(os.path.join(folder, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, f"training pid {os.getpid()}\\n".encode())
with open(os.path.join(folder, "config.json"), "w") as f:
    f.write("{}\\n")
print("held", flush=True)
sys.stdin.read()
"""


@pytest.fixture(params=["another lock holder", "another process"])
def other_start(monkeypatch, request):
    """Another start on the same folder that takes the lock just before this one does (the
    window between making the folder and locking it), and writes its config there."""
    held, procs = [], []
    real_train = TrainingRun.train

    def train_after_another(self, resume=False, max_chunks=None):
        if request.param == "another process":
            proc = subprocess.Popen(
                [sys.executable, "-c", _OTHER_PROCESS, str(self.dir)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            procs.append(proc)
            assert proc.stdout.readline().strip() == "held"
        else:
            held.append(RunLock(self.dir, "training").acquire())
            (self.dir / "config.json").write_text("{}\n")
        return real_train(self, resume, max_chunks)

    monkeypatch.setattr(TrainingRun, "train", train_after_another)
    yield
    for lock in held:
        lock.release()
    for proc in procs:
        proc.communicate("", timeout=30)


def test_a_start_that_lost_the_lock_leaves_the_other_runs_folder(capsys, tmp_path, other_start):
    out = tmp_path / "run"
    err = _fails_cleanly(capsys, ["train", "consequence", "--out", str(out), "--no-progress"])
    assert "in use by another training" in err
    assert (out / "config.json").read_text() == "{}\n"  # the other run's folder, untouched


def _interrupted(monkeypatch):
    def interrupt(self, resume, max_chunks):
        (self.dir / "metrics.jsonl").write_text("")
        raise KeyboardInterrupt

    monkeypatch.setattr(TrainingRun, "_train", interrupt)


def test_a_failed_start_removes_the_folder_it_made(capsys, tmp_path, monkeypatch):
    _interrupted(monkeypatch)
    out = tmp_path / "run"
    assert main(["train", "consequence", "--out", str(out), "--no-progress"]) == 130
    assert not out.exists()


def test_a_failed_start_keeps_a_folder_it_did_not_make(capsys, tmp_path, monkeypatch):
    _interrupted(monkeypatch)
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    assert main(["train", "consequence", "--out", str(out), "--no-progress"]) == 130
    assert (out / "notes.txt").exists()


def test_output_folder_tells_exactly_one_caller_it_created_the_folder(tmp_path):
    first, second = output_folder(tmp_path / "new"), output_folder(tmp_path / "new")
    assert (first[1], second[1]) == (True, False)


# ------------------------------------------------------------------ nonsense accepted silently
@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--algo", "ippo", "--set", "algo=mappo"], "--set algo=mappo contradicts --algo ippo"),
        (["--algo", "mappo", "--set", "algo=ippo"], "--set algo=ippo contradicts --algo mappo"),
        (["--set", "env=moral_hazard"], "--set env=moral_hazard contradicts the env argument"),
    ],
)
def test_contradicting_options_are_refused(capsys, tmp_path, nothing_runs, extra, words):
    out = tmp_path / "run"
    argv = ["train", "consequence", "--out", str(out), "--no-progress", *extra]
    assert words in _fails_cleanly(capsys, argv)
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("extra", "algo"),
    [(["--set", "algo=mappo"], "mappo"), (["--algo", "mappo", "--set", "algo=mappo"], "mappo")],
)
def test_agreeing_algo_options_train_that_algo(capsys, tmp_path, monkeypatch, extra, algo):
    trained = []

    def record(self, resume=False, max_chunks=None):
        trained.append(self.config.algo)
        raise TrainingDiverged("stopped by the test")

    monkeypatch.setattr(TrainingRun, "train", record)
    argv = ["train", "consequence", "--out", str(tmp_path / "run"), "--no-progress", *extra]
    assert main(argv) == 1
    assert trained == [algo]


def test_evaluate_refuses_to_change_the_runs_algo(capsys, monkeypatch, tmp_path):
    evaluated = _fake_run(monkeypatch, tmp_path / "checkpoints" / "ckpt_000000.msgpack")
    err = _fails_cleanly(capsys, ["evaluate", "somewhere", "--set", "algo=mappo"])
    assert "--set algo=mappo" in err and "trained as ippo" in err
    assert not evaluated


@pytest.mark.parametrize("key", ["env_kwargs", "eval_env_kwargs"])
def test_evaluate_refuses_an_env_the_network_cannot_play(capsys, monkeypatch, tmp_path, key):
    evaluated = _fake_run(monkeypatch, tmp_path / "checkpoints" / "ckpt_000000.msgpack")
    err = _fails_cleanly(capsys, ["evaluate", "somewhere", "--set", f"{key}.num_agents=5"])
    assert "does not fit the run's network" in err and "the evaluation env has 5 agents" in err
    assert not evaluated


@pytest.fixture(scope="module")
def game():
    env = dilemmax.make("consequence")
    return env, env.reset(jax.random.key(0))[1]


_FOREIGN = st.one_of(st.text(max_size=12), st.integers(), st.just("__all__"))


@settings(max_examples=30, deadline=None)
@given(extra=_FOREIGN)
def test_step_refuses_an_agent_the_env_does_not_have(game, extra):
    env, state = game
    if extra in env.agents:
        return
    actions = {**dict.fromkeys(env.agents, 0), extra: 0}
    with pytest.raises(ValueError, match="unknown agent") as err:
        env.step(jax.random.key(1), state, actions)
    assert repr(str(extra)) in str(err.value)


def test_step_names_a_missing_agent_and_checks_under_jit_and_vmap(game):
    env, state = game
    missing = dict.fromkeys(env.agents[1:], 0)
    with pytest.raises(ValueError, match=f"no action for '{env.agents[0]}'"):
        env.step(jax.random.key(1), state, missing)
    extra = {**dict.fromkeys(env.agents, 0), "agent_99": 0}
    with pytest.raises(ValueError, match="'agent_99'"):
        jax.jit(env.step)(jax.random.key(1), state, extra)
    batch = jax.tree.map(lambda x: x[None], state)
    keys = jax.random.split(jax.random.key(1), 1)
    with pytest.raises(ValueError, match="'agent_99'"):
        jax.vmap(env.step)(keys, batch, jax.tree.map(lambda x: jax.numpy.asarray([x]), extra))


# ------------------------------------------------------------------ wrapper options
_NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=5),
)


@settings(max_examples=50, deadline=None)
@given(value=_NUMBERS)
def test_wrapper_counts_and_rewards_are_checked_totally(value):
    try:
        count = check_count("num_envs", value, high=MAX_NUM_ENVS)
        assert isinstance(count, int) and 1 <= count <= MAX_NUM_ENVS
    except ValueError as err:
        assert str(err).startswith("num_envs must be a positive integer")
    try:
        reward = check_reward("illegal_reward", value)
        assert math.isfinite(reward)
    except ValueError as err:
        assert str(err).startswith("illegal_reward must be a finite number")


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (lambda: VecEnv(dilemmax.make("consequence"), 2.5), "num_envs must be"),
        (lambda: VecEnv(dilemmax.make("consequence"), float("nan")), "num_envs must be"),
        (lambda: SingleSeatEnv("consequence", illegal_reward=float("nan")), "illegal_reward"),
        (lambda: SingleSeatVectorEnv("consequence", num_envs=0), "num_envs must be"),
        (lambda: parallel_env("consequence", max_cycles=1.5), "max_cycles must be"),
        (lambda: parallel_env("consequence", illegal_reward="-1"), "illegal_reward"),
    ],
)
def test_wrappers_refuse_nonsense_options(build, words):
    with pytest.raises(ValueError, match=words):
        build()


# ----------------------------------------------------------------- issue #35: --out of others
def _experiment_run(folder: Path) -> Path:
    """A finished experiment run as the folder holds it: its lock record and results.json."""
    folder.mkdir(parents=True)
    with RunLock(folder, "experiment"):
        (folder / "results.json").write_text('{"format": "dilemmax-experiment", "results": {}}')
    return folder


@pytest.mark.parametrize("locked", [True, False])
def test_scenarios_evaluate_refuses_an_out_holding_another_commands_results(
    capsys, tmp_path, monkeypatch, locked
):
    """scenarios evaluate --out <a finished experiment run> would write its summary and
    results.json over the experiment's: refused before anything is scored or written."""
    run = _experiment_run(tmp_path / "run")
    if not locked:  # a copy without its lock file: judged by its results.json
        (run / ".lock").unlink()
    kept = (run / "results.json").read_text()
    monkeypatch.setattr(
        "dilemmax.scenarios.registry.scenario_set", lambda *a: pytest.fail("scored")
    )
    argv = ["scenarios", "evaluate", "--game", "moral_hazard", "--scripted", "teacher",
            "--out", str(run)]  # fmt: skip
    words = "holds the results of another command" if locked else "not a scenarios evaluation"
    assert words in _fails_cleanly(capsys, argv)
    assert (run / "results.json").read_text() == kept and not (run / "summary.md").exists()
