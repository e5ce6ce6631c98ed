"""Probes of issue #30 for training and trained seats: nonsense in env_config overrides, a
config.json edited below its checkpoint's progress, options whose product cannot fit in memory,
and trained run folders that do not fit the game they are asked to play.

Each ends in a one-line error (exit 2 on the command line) that names the value, before anything
compiles or plays. Values are drawn by Hypothesis where the input is a value (the checks read
shapes only: no JAX compile inside the Hypothesis loops).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import socket
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cli_errors import _fails_cleanly

import dilemmax
from dilemmax.agents.trained import TrainedPolicy, TrainedRunError
from dilemmax.envs.memory import MemoryNeeded
from dilemmax.envs.options import OptionError
from dilemmax.errors import UsageError
from dilemmax.train.configure import make_config
from dilemmax.train.envs import ConfiguredEnv, check_env_config
from dilemmax.train.run import RunFolderError, TrainingRun

TINY = {
    "total_timesteps": 32,
    "num_envs": 4,
    "num_steps": 4,
    "num_minibatches": 1,
    "update_epochs": 1,
    "log_every": 1,
    "eval_every": 0,
    "hidden": 8,
    "num_layers": 1,
    "progress": False,
}


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text and "Traceback" not in text, text
    return text


# ----------------------------------------------------------------------------- env_config values
@pytest.fixture(scope="module")
def moral_hazard():
    return dilemmax.make("moral_hazard")


@pytest.fixture(scope="module")
def consequence():
    return dilemmax.make("consequence")


OUT_OF_UNIT = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, -1e30, 1e30]),
    st.floats(max_value=-1e-6, allow_nan=False),
    st.floats(min_value=1.000001, allow_nan=False),
)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(field=st.sampled_from(["cost", "w_local", "w_final", "w_team"]), value=OUT_OF_UNIT)
def test_env_config_meets_the_range_of_the_env_option_of_its_name(moral_hazard, field, value):
    """env_config.cost=nan is refused exactly as env_kwargs.cost=nan is: by make_config (no env
    built), by the run's check against the built env, and inside a sweep array."""
    for check in (
        lambda: make_config("moral_hazard", "ippo", {"env_config": {field: value}}),
        lambda: check_env_config(moral_hazard, {field: value}),
        lambda: ConfiguredEnv(moral_hazard, {field: np.array([0.1, value, 0.2])}),
    ):
        with pytest.raises(OptionError) as err:
            check()
        assert f"env_config.{field}=" in _one_line(err.value)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(
    field=st.sampled_from(["threshold", "rule", "resources"]),
    value=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True).filter(lambda x: not float(x).is_integer()),
        st.integers(min_value=2**31, max_value=2**70),
        st.text(max_size=8),
    ),
)
def test_env_config_values_fit_their_fields(consequence, field, value):
    """An int field takes integers its dtype holds; text, NaN and 2.5 are named, not cast."""
    with pytest.raises(OptionError) as err:
        check_env_config(consequence, {field: value})
    assert field in _one_line(err.value)


def test_env_config_rule_is_one_of_the_envs_rules_and_good_values_pass(consequence, moral_hazard):
    with pytest.raises(OptionError, match="env_config.rule=7"):
        check_env_config(consequence, {"rule": 7})
    with pytest.raises(OptionError, match="sample_cases=2"):
        check_env_config(moral_hazard, {"sample_cases": 2})
    check_env_config(consequence, {"rule": 3, "threshold": 5})
    check_env_config(moral_hazard, {"cost": 0.5, "sample_cases": True})
    ConfiguredEnv(moral_hazard, {"cost": jnp.asarray([0.0, 0.5, 1.0])})  # a sweep's values
    # Traced values (a vmapped sweep) cannot be read and pass unchecked.
    jax.vmap(lambda c: ConfiguredEnv(moral_hazard, {"cost": c}).overrides["cost"])(jnp.ones(2))


def test_env_config_nan_on_the_command_line_fails_before_training(capsys, tmp_path):
    out = tmp_path / "run"
    argv = ["train", "moral_hazard", "--out", str(out), "--no-progress"]
    for pair in ("env_config.cost=nan", "env_config.w_team=-1e30"):
        err = _fails_cleanly(capsys, [*argv, "--set", pair])
        assert pair.split("=")[0] in err and "[0, 1]" in err
    assert not out.exists()


# ----------------------------------------------------------------------------- memory
@pytest.mark.slow
@pytest.mark.parametrize(
    ("env", "sets"),
    [
        ("open_cleanup", {"num_envs": 2**20, "num_steps": 100_000, "num_minibatches": 1}),
        ("moral_hazard", {"num_envs": 2**20, "num_steps": 100_000, "num_seeds": 64}),
    ],
)
def test_a_rollout_that_cannot_fit_is_refused_with_its_estimate(tmp_path, env, sets):
    config = make_config(env, "ippo", sets)
    with pytest.raises(MemoryNeeded) as err:
        TrainingRun(config, tmp_path / "run")
    text = _one_line(err.value)
    assert re.search(r"rollout buffer would need [\d.]+ [TP]B", text) and "this machine has" in text
    assert f"num_envs={sets['num_envs']}" in text and "num_steps=100000" in text
    assert not (tmp_path / "run").exists()


def test_memory_is_refused_on_the_command_line_before_a_folder(capsys, tmp_path):
    out = tmp_path / "run"
    argv = ["train", "moral_hazard", "--out", str(out), "--no-progress"]
    argv += ["--set", "num_envs=1048576", "--set", "num_steps=100000"]
    assert "rollout buffer would need" in _fails_cleanly(capsys, argv)
    assert not out.exists()


# ----------------------------------------------------------------------------- trained runs
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two finished tiny runs: moral_hazard (2 agents) and consequence."""
    root = tmp_path_factory.mktemp("runs")
    for name in ("moral_hazard", "consequence"):
        TrainingRun(make_config(name, "ippo", TINY), root / name).train()
    return root


@pytest.mark.slow
def test_a_config_edited_below_its_checkpoint_is_refused_on_resume(runs, tmp_path, capsys):
    for key, value, words in (
        ("total_timesteps", 16, "total_timesteps=16"),
        ("log_every", 2, "log_every=2"),
    ):
        run = tmp_path / key
        shutil.copytree(runs / "moral_hazard", run)
        config = json.loads((run / "config.json").read_text())
        (run / "config.json").write_text(json.dumps({**config, key: value}))
        argv = ["train", "moral_hazard", "--out", str(run), "--resume", "--no-progress"]
        err = _fails_cleanly(capsys, argv)
        assert words in err and "already trained 2 updates" in err
        with pytest.raises(RunFolderError):
            TrainingRun(make_config("moral_hazard", "ippo", {**TINY, key: value}), run).train(
                resume=True
            )


@pytest.mark.slow
def test_a_trained_seat_is_checked_against_the_game_it_plays(runs):
    mh = runs / "moral_hazard"
    assert TrainedPolicy.load(mh, env=dilemmax.make("moral_hazard")).env_id == "moral_hazard"
    cases = [
        (dilemmax.make("moral_hazard", num_agents=3), "trained with 2 agents"),
        (dilemmax.make("consequence"), "trained on moral_hazard, not consequence"),
    ]
    for env, words in cases:
        with pytest.raises(TrainedRunError) as err:
            TrainedPolicy.load(mh, env=env)
        assert words in _one_line(err.value) and str(mh) in str(err.value)


def test_a_foreign_checkpoint_inside_a_run_folder_is_named(runs, tmp_path):
    run = tmp_path / "foreign"
    shutil.copytree(runs / "moral_hazard", run)
    for ckpt in (run / "checkpoints").iterdir():
        ckpt.unlink()
    theirs = sorted((runs / "consequence" / "checkpoints").iterdir())[-1]
    shutil.copy(theirs, run / "checkpoints" / theirs.name)
    with pytest.raises(UsageError) as err:
        TrainedPolicy.load(run)
    assert theirs.name in _one_line(err.value) and "does not fit" in str(err.value)


@settings(max_examples=25, deadline=None)
@given(
    edit=st.sampled_from(
        [
            ("env", 3),
            ("env", "no_such_env"),
            ("env_kwargs", {"num_agents": 99}),
            ("env_kwargs", [1]),
            ("learners", [7]),
            ("learners", "0"),
            ("hidden", 16),
            ("activation", "softsign"),
        ]
    ),
    seed=st.sampled_from([0, 1, -1]),
)
def test_damaged_run_configs_are_named(runs, tmp_path_factory, edit, seed):
    run = tmp_path_factory.mktemp("edited") / "run"
    shutil.copytree(runs / "moral_hazard", run)
    key, value = edit
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, key: value}))
    with pytest.raises(UsageError) as err:
        TrainedPolicy.load(run, seed=seed)
    assert str(run) in _one_line(err.value)


@settings(max_examples=25, deadline=None)
@given(data=st.binary(max_size=200))
def test_a_config_of_random_bytes_is_named(runs, tmp_path_factory, data):
    run = tmp_path_factory.mktemp("bytes") / "run"
    shutil.copytree(runs / "moral_hazard", run)
    (run / "config.json").write_bytes(data)
    try:
        TrainedPolicy.load(run)
    except UsageError as err:
        assert str(run) in _one_line(err)


# ----------------------------------------------------------------------------- several processes
def _train_command(tmp_path, *options: str) -> list[str]:
    return [sys.executable, "-m", "dilemmax.cli", "train", "moral_hazard", "--out",
            str(tmp_path / "run"), "--no-progress", *options]  # fmt: skip


def _train_process(tmp_path, *options: str, timeout: float = 120) -> tuple[int, str, float]:
    """(exit status, stderr, seconds) of `dilemmax train` with the cluster ``options``, in a
    subprocess: what it guards against is a crash (a segmentation fault) or an abort."""
    start = time.monotonic()
    proc = subprocess.run(
        _train_command(tmp_path, *options), capture_output=True, text=True, timeout=timeout
    )
    return proc.returncode, proc.stderr.strip(), time.monotonic() - start


@pytest.mark.slow
def test_a_coordinator_port_another_server_holds_is_refused_in_one_line(tmp_path):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        status, err, _ = _train_process(
            tmp_path, "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
            "--process-id", "0",
        )  # fmt: skip
    assert status == 2, err  # not -11 (jaxlib's service crashed on the taken port)
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert f"port {port}" in err and "another program listens on that port" in err
    assert not (tmp_path / "run").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_a_missing_process_is_named_within_the_init_timeout(tmp_path):
    """Both lone processes wait at the same time, each for --init-timeout 1 (the least the
    option takes; the default stays 300 s)."""
    # Process 1 of 2 with nobody at the coordinator's address: process 0 is missing.
    port, alone_port = _free_port(), _free_port()
    cluster = ["--num-processes", "2", "--init-timeout", "1"]
    start = time.monotonic()
    waiting_for_0, serving_alone = (
        subprocess.Popen(
            _train_command(tmp_path / name, "--coordinator", f"127.0.0.1:{p}", *cluster, *me),
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
        )
        for name, p, me in (("one", port, ["--process-id", "1"]),
                            ("zero", alone_port, ["--process-id", "0"]))
    )  # fmt: skip
    try:
        err = waiting_for_0.communicate(timeout=120)[1].strip()
        alone_err = serving_alone.communicate(timeout=120)[1].strip()
    finally:
        for proc in (waiting_for_0, serving_alone):
            proc.kill()  # a no-op for one that ended; one that hangs must not outlive the test
    seconds = time.monotonic() - start
    assert waiting_for_0.returncode == 2, err
    waiting, error = err.splitlines()  # what it waits for, said at once; then who is missing
    assert waiting.startswith("dilemmax train: process 1 of 2: waiting up to 1 s for process 0")
    assert "process 1 of 2: process 0 (the coordinator) is missing" in error
    assert f"127.0.0.1:{port} within 1 s" in err
    # Process 0 of 2 alone: the coordinator serves, process 1 never comes.
    assert serving_alone.returncode == 2, alone_err  # not JAX's abort (134) blaming "another task"
    last = alone_err.splitlines()[-1]
    assert last.startswith("dilemmax train: error: process 0 of 2: process 1 did")
    assert "within 1 s" in alone_err and "Check failure" not in alone_err
    assert seconds < 60  # bounded by --init-timeout, not JAX's 5 minutes
