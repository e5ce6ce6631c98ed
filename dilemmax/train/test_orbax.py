"""Orbax checkpoints on one process: bit-exact resume, damage named and skipped, a foreign run
refused, and trained policies, warm starts and ``dilemmax evaluate`` reading them (the format
several processes write; ``test_distributed`` runs them on two)."""

from __future__ import annotations

import json
import shutil

import jax
import numpy as np
import pytest

from dilemmax.agents import checkpoint
from dilemmax.agents.trained import TrainedPolicy
from dilemmax.envs import registry
from dilemmax.envs.registry import EnvSpec
from dilemmax.train.run import TrainingRun, load_run
from dilemmax.train.test_ppo import ToyEnv, toy_config
from dilemmax.train.warm_start import warm_start_params


def _leaves(state):
    return [np.asarray(x) for x in jax.tree.leaves(state)]


@pytest.fixture(scope="module")
def orbax_runs(tmp_path_factory):
    """One run object (its programs compiled once) trained into two folders: uninterrupted,
    and stopped after a chunk and resumed."""
    root = tmp_path_factory.mktemp("orbax")
    config = toy_config(total_timesteps=16 * 4 * 5 * 3, eval_every=0, checkpointer="orbax")
    with pytest.MonkeyPatch.context() as patch:
        # The toy env by name, so that its run folders load as a user's do (config.json).
        patch.setitem(registry._REGISTRY, "toy", EnvSpec("toy", f"{__name__}:ToyEnv", "toy"))
        run = TrainingRun(config, root / "full", env=ToyEnv())
        states = {"full": run.train()}
        run.dir = root / "resumed"
        run.train(max_chunks=1)
        states["resumed"] = run.train(resume=True)
        yield run, root, states


@pytest.mark.slow
def test_orbax_resume_is_bit_exact_and_keeps_the_newest(orbax_runs):
    run, root, states = orbax_runs
    for a, b in zip(_leaves(states["full"]), _leaves(states["resumed"]), strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    names = [p.name for p in checkpoint.list_checkpoints(root / "full")]
    assert names == ["ckpt_000000", "ckpt_000001", "ckpt_000002"]
    restored, meta = run.restore(root / "full" / "checkpoints" / "ckpt_000002")
    assert meta == {"chunk": 2, "update": 15}
    for a, b in zip(_leaves(restored), _leaves(states["full"]), strict=True):
        assert np.array_equal(a, b)


@pytest.mark.slow
def test_a_damaged_orbax_checkpoint_is_named_and_the_previous_one_used(orbax_runs, tmp_path):
    run, root, _ = orbax_runs
    shutil.copytree(root / "full", tmp_path / "run")
    newest = tmp_path / "run" / "checkpoints" / "ckpt_000002"
    meta_file = newest / "meta" / "metadata"
    meta = json.loads(meta_file.read_text())
    name = sorted(meta["leaves"])[0]
    meta["leaves"][name]["hash"] = "0" * 16  # as if the array had changed
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(checkpoint.CheckpointError, match=f"checksum mismatch in {name}"):
        run.restore(newest)
    warnings = []
    found = checkpoint.restore_latest_good(tmp_path / "run", run.abstract_state(), warnings.append)
    assert found[2].name == "ckpt_000001" and found[1]["chunk"] == 1
    assert len(warnings) == 1 and "ckpt_000002" in warnings[0]
    # Bytes of a stored array flipped: unreadable or a checksum mismatch, never silent.
    older = tmp_path / "run" / "checkpoints" / "ckpt_000001"
    for data in (older / "state").rglob("d/*"):
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0x10
        data.write_bytes(bytes(raw))
    with pytest.raises(checkpoint.CheckpointError, match="ckpt_000001"):
        run.restore(older)


def test_an_orbax_checkpoint_of_another_network_is_refused_by_leaf(orbax_runs, tmp_path):
    _, root, _ = orbax_runs
    other = TrainingRun(toy_config(hidden=16, checkpointer="orbax"), tmp_path, env=ToyEnv())
    with pytest.raises(checkpoint.CheckpointError, match=r"leaf .*params.* does not fit this run"):
        other.restore(root / "full" / "checkpoints" / "ckpt_000002")


def test_trained_policies_warm_starts_and_evaluation_read_both_formats(orbax_runs, tmp_path):
    run, root, states = orbax_runs
    ckpt = root / "full" / "checkpoints" / "ckpt_000002"
    assert checkpoint.find_checkpoint(ckpt) == (ckpt, root / "full")
    assert json.loads((root / "full" / "config.json").read_text())["checkpointer"] == "orbax"
    # The same state as a msgpack run folder (the old format).
    (tmp_path / "old").mkdir()
    shutil.copy(root / "full" / "config.json", tmp_path / "old" / "config.json")
    checkpoint.save(tmp_path / "old", states["full"], 2, 15)

    env = ToyEnv()
    old = TrainedPolicy.load(tmp_path / "old", env=env)
    new = TrainedPolicy.load(root / "full", env=env)
    for a, b in zip(jax.tree.leaves(old.params), jax.tree.leaves(new.params), strict=True):
        assert np.array_equal(a, b)
    raw = checkpoint.read_raw(ckpt)
    assert (raw["chunk"], raw["update"]) == (2, 15)
    warm = warm_start_params(states["full"].params, ckpt, 1)
    for a, b in zip(jax.tree.leaves(warm), jax.tree.leaves(states["full"].params), strict=True):
        assert np.array_equal(a, b)
    # `dilemmax evaluate <run or orbax folder>` restores through load_run.
    for path in (root / "full", ckpt):
        _, restored, found = load_run(path)
        assert found == ckpt
        for a, b in zip(_leaves(restored), _leaves(states["full"]), strict=True):
            assert np.array_equal(a, b)
