"""Optional wandb logging: what reaches wandb, offline runs, and a crash still closing the run."""

import sys
import types

import pytest

from dilemmax.train.run import TrainingRun
from dilemmax.train.test_ppo import ToyEnv, toy_config


class RecordingWandb(types.ModuleType):
    """Stands in for the wandb package: records init, log and finish calls."""

    def __init__(self):
        super().__init__("wandb")
        self.inits, self.logs, self.finished = [], [], 0

    def init(self, **kwargs):
        self.inits.append(kwargs)
        module = self

        class Run:
            def finish(self):
                module.finished += 1

        return Run()

    def log(self, data, step):
        self.logs.append((step, dict(data)))


@pytest.fixture
def recording_wandb(monkeypatch):
    fake = RecordingWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    return fake


@pytest.mark.slow
def test_every_chunk_record_reaches_wandb_flattened_at_its_env_step(tmp_path, recording_wandb):
    config = toy_config(wandb=True, wandb_mode="offline", wandb_project="dilemmax-test")
    run = TrainingRun(config, tmp_path / "run", env=ToyEnv())
    run.train()
    (init,) = recording_wandb.inits
    assert init["project"] == "dilemmax-test" and init["mode"] == "offline"
    assert init["dir"] == str(tmp_path / "run") and init["config"]["env"] == "toy"
    records = run.records()
    assert [step for step, _ in recording_wandb.logs] == [r["env_steps"] for r in records]
    for (_, logged), record in zip(recording_wandb.logs, records, strict=True):
        assert logged["return/learners"] == record["return/learners"]
        # Per-agent lists become one scalar series per agent.
        for i, value in enumerate(record["return/per_agent"]):
            assert logged[f"return/per_agent/{i}"] == value
        assert not any(isinstance(v, list) for v in logged.values())
    assert recording_wandb.finished == 1


@pytest.mark.slow
def test_a_crash_mid_run_still_finishes_the_wandb_run(tmp_path, recording_wandb):
    config = toy_config(wandb=True, wandb_mode="offline")
    run = TrainingRun(config, tmp_path / "run", env=ToyEnv())
    chunk = run.chunk
    calls = []

    def crashing_chunk(state):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("simulated crash")
        return chunk(state)

    run.chunk = crashing_chunk
    with pytest.raises(RuntimeError, match="simulated crash"):
        run.train()
    assert len(recording_wandb.logs) == 1 and recording_wandb.finished == 1
    # What was computed before the crash is on disk: one record and its checkpoint.
    assert len(run.records()) == 1
    assert list((tmp_path / "run").glob("checkpoints/ckpt_000000.msgpack"))


def test_missing_wandb_package_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError
    run = TrainingRun(toy_config(wandb=True), tmp_path / "run", env=ToyEnv())
    with pytest.raises(SystemExit, match="pip install 'dilemmax\\[wandb\\]'"):
        run.train()


@pytest.mark.slow
def test_real_wandb_writes_an_offline_run_without_network(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    config = toy_config(wandb=True, wandb_mode="offline")
    TrainingRun(config, tmp_path / "run", env=ToyEnv()).train()
    files = list((tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1 and files[0].stat().st_size > 0
