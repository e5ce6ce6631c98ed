"""Run folders survive the usual accidents: two writers, killed runs, damaged checkpoints,
partial metric lines, a missing config.json, and a training that diverges (issue #11)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dilemmax.agents import checkpoint
from dilemmax.agents.checkpoint import CheckpointError
from dilemmax.train.configure import make_config
from dilemmax.train.run import (
    METRICS_FILE,
    RunFolderError,
    RunLock,
    TrainingDiverged,
    TrainingRun,
    read_records,
)


# ----------------------------------------------------------------------------- the lock
def test_second_writer_is_refused_while_the_first_holds_the_folder(tmp_path):
    busy = r"in use by another training \(pid \d+\)"
    with RunLock(tmp_path, "training"), pytest.raises(RunFolderError, match=busy):
        RunLock(tmp_path, "play").acquire()
    RunLock(tmp_path, "training").acquire().release()  # free again once released


def test_lock_left_by_a_killed_process_is_not_an_obstacle(tmp_path):
    holder = (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(tmp_path / '.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'pid %d' % os.getpid())\n"
        "print('locked', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        with pytest.raises(RunFolderError, match=f"pid {proc.pid}"):
            RunLock(tmp_path).acquire()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert (tmp_path / ".lock").exists()  # the stale file stays...
    RunLock(tmp_path).acquire().release()  # ...and is no obstacle


# ----------------------------------------------------------------------------- checkpoints
def _tree(seed: int) -> dict:
    return {
        "w": jnp.arange(12, dtype=jnp.float32).reshape(3, 4) + seed,
        "step": jnp.int32(seed),
        "key": jax.random.key(seed),
    }


def _same(a, b) -> bool:
    plain = checkpoint._plain
    return all(
        np.array_equal(x, y)
        for x, y in zip(jax.tree.leaves(plain(a)), jax.tree.leaves(plain(b)), strict=True)
    )


@pytest.fixture()
def three_checkpoints(tmp_path):
    for chunk in range(3):
        checkpoint.save(tmp_path, _tree(chunk), chunk, update=10 * (chunk + 1))
    return tmp_path


def _damage(path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "flip":
        data[len(data) - 20] ^= 0x01  # one bit of the last array's bytes
    elif how == "truncate":
        data = data[: len(data) // 2]
    elif how == "random":
        data = bytearray(np.random.default_rng(0).bytes(len(data)))
    elif how == "empty":
        data = bytearray()
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["flip", "truncate", "random", "empty"])
def test_damaged_latest_checkpoint_is_named_and_the_previous_one_used(three_checkpoints, how):
    latest = checkpoint.latest_checkpoint(three_checkpoints)
    _damage(latest, how)
    with pytest.raises(CheckpointError, match=latest.name):
        checkpoint.restore(latest, _tree(0))
    warnings = []
    state, meta, path = checkpoint.restore_latest_good(three_checkpoints, _tree(0), warnings.append)
    assert path.name == "ckpt_000001.msgpack" and meta == {"chunk": 1, "update": 20}
    assert _same(state, _tree(1))
    assert len(warnings) == 1 and latest.name in warnings[0]


def test_every_damaged_checkpoint_is_an_error_naming_them(three_checkpoints):
    for path in checkpoint.list_checkpoints(three_checkpoints):
        _damage(path, "truncate")
    with pytest.raises(CheckpointError, match="no usable checkpoint"):
        checkpoint.restore_latest_good(three_checkpoints, _tree(0), lambda _: None)


def test_checkpoint_of_another_shape_is_refused(three_checkpoints):
    other = {**_tree(0), "w": jnp.zeros((2, 2), jnp.float32)}
    with pytest.raises(CheckpointError, match="does not fit"):
        checkpoint.restore(checkpoint.latest_checkpoint(three_checkpoints), other)


def test_checkpoint_without_checksum_still_restores(tmp_path):
    from flax import serialization

    state = serialization.to_state_dict(jax.device_get(checkpoint._plain(_tree(4))))
    legacy = serialization.msgpack_serialize({"runner_state": state, "chunk": 4, "update": 50})
    restored, meta = checkpoint.from_bytes(_tree(0), legacy)
    assert meta == {"chunk": 4, "update": 50} and _same(restored, _tree(4))


_GOOD = checkpoint.to_bytes(_tree(7), chunk=7, update=80)


@settings(max_examples=150, deadline=None)
@given(position=st.integers(0, len(_GOOD) - 1), bit=st.integers(0, 7))
def test_any_single_bit_flip_is_detected_or_harmless(position, bit):
    data = bytearray(_GOOD)
    data[position] ^= 1 << bit
    try:
        restored, meta = checkpoint.from_bytes(_tree(0), bytes(data))
    except CheckpointError:
        return
    assert meta == {"chunk": 7, "update": 80} and _same(restored, _tree(7))


def test_save_leaves_no_temporary_file(three_checkpoints):
    names = sorted(p.name for p in (three_checkpoints / "checkpoints").iterdir())
    assert names == [f"ckpt_{i:06d}.msgpack" for i in range(3)]


# ----------------------------------------------------------------------------- metrics
def test_partial_last_metrics_line_is_dropped(tmp_path):
    path = tmp_path / METRICS_FILE
    path.write_text('{"chunk": 0, "x": 1}\n{"chunk": 1, "x": 2}\n{"chunk": 2, "x"')
    warned = []
    assert [r["chunk"] for r in read_records(path, warned.append)] == [0, 1]
    assert "line 3" in warned[0]


# ----------------------------------------------------------------------------- training
def _config(**overrides):
    values = dict(
        total_timesteps=4 * 4 * 3,  # 3 chunks of one update
        num_envs=4,
        num_steps=4,
        num_minibatches=1,
        update_epochs=1,
        log_every=1,
        checkpoint_every=1,
        eval_every=0,
        hidden=8,
        num_layers=1,
        progress=False,
        shard="off",
    )
    values.update(overrides)
    return make_config("toy", "ippo", values)


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    """One TrainingRun (its programs compile once), trained straight to the end."""
    run = TrainingRun(_config(), tmp_path_factory.mktemp("straight"))
    final = run.train()
    return run, final


def _into(run: TrainingRun, folder) -> TrainingRun:
    run.dir = folder
    return run


@pytest.mark.slow
def test_resume_after_a_damaged_checkpoint_and_a_partial_line_is_bit_exact(toy_run, tmp_path):
    run, final = toy_run
    run = _into(run, tmp_path / "crashed")
    run.train(max_chunks=2)  # checkpoints 0 and 1, then a "crash"
    _damage(checkpoint.latest_checkpoint(run.dir), "flip")
    with (run.dir / METRICS_FILE).open("a") as f:
        f.write('{"chunk": 2, "upd')  # killed mid-write
    resumed = run.train(resume=True)
    assert _same(resumed, final)
    assert [r["chunk"] for r in run.records()] == [0, 1, 2]


def test_resume_without_config_json_is_refused(toy_run, tmp_path):
    run = _into(toy_run[0], tmp_path / "gone")
    run.train(max_chunks=1)
    (run.dir / "config.json").unlink()
    with pytest.raises(RunFolderError, match="no config.json"):
        run.train(resume=True)


def test_training_into_a_locked_folder_is_refused_before_it_writes(toy_run, tmp_path):
    run = _into(toy_run[0], tmp_path / "busy")
    with RunLock(run.dir), pytest.raises(RunFolderError, match="in use"):
        run.train()
    assert sorted(p.name for p in run.dir.iterdir()) == [".lock"]


def test_non_finite_parameters_stop_training_and_keep_the_last_good_checkpoint(
    toy_run, tmp_path, monkeypatch
):
    run = _into(toy_run[0], tmp_path / "diverged")
    chunk = run.chunk
    calls = []

    def poisoned(state):
        state, metrics = chunk(state)
        calls.append(1)
        if len(calls) == 2:
            nan = jax.tree.map(lambda x: jnp.full_like(x, jnp.nan), state.params)
            state = state.replace(params=nan)
        return state, metrics

    monkeypatch.setattr(run, "chunk", poisoned)
    with pytest.raises(TrainingDiverged, match=r"chunk 1 .*non-finite parameters.*ckpt_000000"):
        run.train()
    assert [p.name for p in checkpoint.list_checkpoints(run.dir)] == ["ckpt_000000.msgpack"]
    assert [r["chunk"] for r in run.records()] == [0]
    restored, _ = checkpoint.restore(checkpoint.latest_checkpoint(run.dir), run.template())
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(restored.params))


def test_non_finite_loss_is_named(toy_run):
    from dilemmax.train.run import non_finite_losses

    metrics = {"loss/actor": np.array([0.1, np.nan]), "loss/value": 1.0, "return/mean": np.nan}
    assert non_finite_losses(metrics) == ["loss/actor"]
    assert json.loads(json.dumps(non_finite_losses({"loss/x": np.inf}))) == ["loss/x"]


def test_a_fresh_start_under_the_lock_refuses_a_folder_that_holds_a_run(toy_run, tmp_path):
    """The command checks for config.json before it locks; the run checks again once it holds
    the lock, so a run that finished in between keeps its config and metrics."""
    run, _ = toy_run
    run = _into(run, tmp_path / "held")
    run.train(max_chunks=1)
    metrics = (run.dir / METRICS_FILE).read_text()
    with pytest.raises(RunFolderError, match="already holds a run"):
        run.train()
    assert (run.dir / METRICS_FILE).read_text() == metrics
