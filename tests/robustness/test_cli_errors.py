"""Every user mistake on the command line is one line on stderr and exit status 2, before
anything compiles and without leaving a run folder behind (issue #12, "CLI")."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from dilemmax.cli import main
from dilemmax.train.config import TrainConfig


def _fails_cleanly(capsys, argv) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(
    ("sets", "words"),
    [
        (["lr=fast"], "lr='fast'"),
        (["lr=NaN"], "lr=nan"),
        (["num_envs=-4"], "num_envs=-4"),
        (["num_minibatches=0"], "num_minibatches=0"),
        (["log_every=0"], "log_every=0"),
        (["checkpoint_every=0"], "checkpoint_every=0"),
        (["learner_transform=os:system"], "allowed"),
        (["env_kwargs.num_rounds=2.7"], "num_rounds='2.7'"),
        (["env_kwargs.total_resources=3072"], "total_resources=3072"),
        (["partner_policy=telepathy", "learners=[0]"], "telepathy"),
        (["env_config.no_such_field=1"], "no_such_field"),
        (["env_config.threshold=high"], "threshold='high'"),
    ],
)
def test_bad_training_request_fails_in_one_line_and_leaves_no_folder(capsys, tmp_path, sets, words):
    out = tmp_path / "run"
    argv = ["train", "consequence", "--out", str(out), "--no-progress"]
    for pair in sets:
        argv += ["--set", pair]
    assert words in _fails_cleanly(capsys, argv)
    assert not out.exists()


def test_resume_needs_the_folders_config(capsys, tmp_path):
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    err = _fails_cleanly(capsys, ["train", "consequence", "--out", str(out), "--resume"])
    assert "no config.json" in err


def test_a_second_fresh_training_into_a_run_folder_is_refused(capsys, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text(TrainConfig(env="consequence").to_json())
    assert "--resume" in _fails_cleanly(capsys, ["train", "consequence", "--out", str(out)])


def test_evaluate_refuses_what_is_not_a_run(capsys, tmp_path):
    assert "neither" in _fails_cleanly(capsys, ["evaluate", str(tmp_path / "missing")])
    assert "no config.json" in _fails_cleanly(capsys, ["evaluate", str(tmp_path)])
    (tmp_path / "config.json").write_text(json.dumps({"lr": "fast"}))
    assert "lr='fast'" in _fails_cleanly(capsys, ["evaluate", str(tmp_path)])


def test_evaluate_defaults_to_held_out_configurations():
    from dilemmax.train.cli import _held_out

    trained_on = {"split": "train"}
    run = SimpleNamespace(config=TrainConfig(env="open_harvest", eval_env_kwargs=trained_on))
    assert "held_out" in _held_out(run, "held_out")
    assert run.config.eval_env_kwargs == {"split": "held_out"}
    plain = SimpleNamespace(config=TrainConfig(env="moral_hazard"))
    assert "no held-out split" in _held_out(plain, "held_out")
    assert plain.config.eval_env_kwargs == {}


def test_diverged_training_exits_1_in_one_line(capsys, tmp_path, monkeypatch):
    from dilemmax.train import run as run_module

    def diverge(self, resume=False, max_chunks=None):
        raise run_module.TrainingDiverged("training diverged in chunk 3: non-finite loss/actor")

    monkeypatch.setattr(run_module.TrainingRun, "train", diverge)
    assert main(["train", "consequence", "--out", str(tmp_path / "run"), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "non-finite loss/actor" in err
