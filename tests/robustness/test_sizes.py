"""Issue #35: sizes nobody can run are refused before the work starts, with the memory estimate
in one line (:mod:`dilemmax.envs.memory`, the estimator training uses too). They used to start
the work (no answer in 45 s) or end in a ``MemoryError`` traceback. Each probe runs under a
deadline, so a regression fails instead of hanging."""

from __future__ import annotations

import contextlib
import json
import signal
from pathlib import Path

import pytest
from test_cli_errors import _fails_cleanly

import dilemmax
from dilemmax.cli import main
from dilemmax.envs import memory as M

# Seconds a refusal may take: tracing one episode's shapes, on a loaded 2-core machine.
DEADLINE = 120
HUGE = "1000000000000"
ZOO_RUN = Path(dilemmax.__file__).parent / "agents" / "zoo_runs" / "moral_hazard" / "ippo"


@contextlib.contextmanager
def deadline(seconds: int = DEADLINE):
    def stop(*_):
        raise TimeoutError(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["rollout", "consequence", "--episodes", HUGE], "rollout (1000000000000 episode(s) x"),
        (["rollout", "moral_hazard", "--episodes", HUGE, "--out", "{tmp}/t.jsonl"],
         "rollout (1000000000000 episodes' metrics"),
        (["scenarios", "evaluate", "--game", "moral_hazard", "--scripted", "teacher",
          "--episodes", HUGE], "scenarios evaluate ("),
        (["redteam", "play", "--policy", "random", "--episodes", "1000000000",
          "--out", "{tmp}/pop"], "redteam play (1140000000000 episode(s)"),
        (["play", "moral_hazard", "--seats", "scripted:teacher", "--envs", "1000000000",
          "--out", "{tmp}/run"], "play (1000000000 env(s) x"),
        (["play", "moral_hazard", "--seats", "scripted:teacher", "--episodes", HUGE,
          "--out", "{tmp}/run"], f"and {HUGE} episode(s) x"),
        # The play session checks for every command it runs: the paper experiments too.
        (["experiment", "moral_hazard/isolation", "--seats", "scripted:teacher",
          "--envs", "1000000000", "--out", "{tmp}/iso"], "experiment (1000000000 env(s) x"),
        # 2 seeds x 13 conditions x the episodes asked, in one batched program.
        (["evaluate", str(ZOO_RUN), "--episodes", "1000000000", "--json", "{tmp}/e.json"],
         "the evaluation (26000000000 episode(s) x"),
    ],
)  # fmt: skip
def test_a_size_nobody_can_run_is_refused_at_once_with_the_estimate(capsys, tmp_path, argv, words):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    with deadline():
        err = _fails_cleanly(capsys, argv)
    assert words in err and "would need" in err and "this machine has" in err, err
    assert "lower --" in err
    assert not any(tmp_path.iterdir())  # nothing was written


def test_the_estimate_is_the_shapes_of_one_episode_times_the_count():
    env = dilemmax.make("consequence")
    per_episode, metrics = M.episode_bytes(env)
    assert 0 < metrics < per_episode
    # A consequence episode keeps at least its actions, rewards and dones (4 bytes each) per
    # seat and step.
    assert per_episode >= env.max_steps * env.num_agents * 3 * 4
    available, _ = M.machine_memory()
    fits = max(1, available // (per_episode + metrics) // 2)
    M.check_episodes_fit(env, fits, "x", "--episodes")
    with pytest.raises(M.MemoryNeeded, match=r"x \(\d+ episode\(s\) x .* would need"):
        M.check_episodes_fit(env, 3 * fits, "x", "--episodes")
    assert M.human_size(999) == "999 B" and M.human_size(1.5e12) == "1.5 TB"


@pytest.mark.slow
def test_a_normal_size_still_runs(capsys, tmp_path):
    """(The other commands' normal sizes run in their own tests: dilemmax/llm/test_cli.py,
    dilemmax/scenarios/test_cli.py, dilemmax/redteam/test_llm_population.py.)"""
    with deadline(600):
        assert (
            main(["rollout", "consequence", "--episodes", "2", "--json", f"{tmp_path}/m.json"]) == 0
        )
    assert json.loads((tmp_path / "m.json").read_text())
    assert "consequence: 2 episode(s)" in capsys.readouterr().out


def test_finetune_evaluate_refuses_a_size_nobody_can_run_before_any_model_loads(capsys, tmp_path):
    model = tmp_path / "model"  # the file names of a model (its checks pass; nothing loads it)
    model.mkdir()
    for name, text in {"config.json": '{"model_type": "llama"}', "model.safetensors": "x",
                       "tokenizer.json": "{"}.items():  # fmt: skip
        (model / name).write_text(text)
    argv = ["finetune", "evaluate", "--model", str(model), "--episodes", HUGE,
            "--out", str(tmp_path / "out")]  # fmt: skip
    with deadline():
        err = _fails_cleanly(capsys, argv)
    assert "finetune evaluate (16 env(s) x" in err and "15000000000000 episode(s)" in err, err
    assert not (tmp_path / "out").exists()
