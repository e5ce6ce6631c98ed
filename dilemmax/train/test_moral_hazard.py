"""Training on a real game: a short IPPO run on moral_hazard learns, saves, loads and evaluates.

The learning check: two IPPO agents on the primary team-reward condition (n = 2, highest-unsafe
mapping). The best team score is 1.0 (both answer the local question and, by reading safety off
the utilities, pick the target without querying: w_L + w_F + w_T); uniform random legal play
scores far less (checked below). A working trainer passes 0.9 within ~25k env steps on every seed
we tried; a broken one (wrong sign, no masking, no bootstrap cut) stays far below.
"""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

import dilemmax
from dilemmax.agents.policy import random_policy
from dilemmax.agents.trained import TrainedPolicy
from dilemmax.envs.rollout import run_episodes
from dilemmax.train.cli import main as cli_main
from dilemmax.train.configure import make_config
from dilemmax.train.ppo import Trainer
from dilemmax.train.run import TrainingRun


def small_config(**overrides):
    values = {
        "env_kwargs": {"num_agents": 2},
        "train_grid": None,  # the primary condition only
        "eval_grid": None,
        "total_timesteps": 64 * 16 * 24,
        "log_every": 8,
        "eval_every": 3,
        "eval_episodes": 64,
        "checkpoint_every": 3,
        "progress": False,
    }
    values.update(overrides)
    return make_config("moral_hazard", "ippo", values)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("mh_run")
    run = TrainingRun(small_config(), out)
    run.train()
    return out, run


def test_random_team_baseline_is_low():
    # Uniform random legal play (the generic random policy) on the primary condition: the
    # learned team must beat it by a wide margin for the check below to mean anything.
    env = dilemmax.make("moral_hazard", num_agents=2)
    _, metrics = run_episodes(env, random_policy, jax.random.PRNGKey(0), 512)
    assert float(np.mean(metrics["score"])) < 0.35


@pytest.mark.slow
def test_ippo_learns_the_primary_condition(trained_run):
    out, run = trained_run
    records = run.records()
    assert len(records) == 3
    first, last = records[0], records[-1]
    assert last["return/learners"] > 0.9 > first["return/learners"]
    assert last["eval/score"] > 0.9
    assert last["eval/format_validity"] == 1.0
    assert (out / "curve.png").exists()


@pytest.mark.slow
def test_trained_policy_loads_from_the_run_and_plays_in_run_episodes(trained_run):
    out, _ = trained_run
    policy = TrainedPolicy.load(out, greedy=True)
    env = dilemmax.make("moral_hazard", num_agents=2)
    _, metrics = run_episodes(env, policy, jax.random.PRNGKey(5), 128)
    assert float(np.mean(metrics["score"])) > 0.9
    assert float(np.mean(metrics["format_validity"])) == 1.0


@pytest.mark.slow
def test_cli_evaluate_writes_the_env_metrics(trained_run, capsys):
    out, _ = trained_run
    assert cli_main(["evaluate", str(out), "--episodes", "8"]) == 0
    saved = json.loads((out / "eval.json").read_text())
    assert {"score", "query_rate", "team_success", "info_transfer"} <= set(saved["metrics"])
    assert "score" in capsys.readouterr().out


@pytest.mark.slow
def test_mappo_critic_reads_the_global_state():
    config = small_config(algo="mappo", num_envs=8, num_steps=6, num_minibatches=2)
    trainer = Trainer(config)
    env = trainer.env
    state = jax.jit(trainer.init)(jax.random.PRNGKey(0))
    # Its shape, traced (run eagerly, the reset compiles each of its ops on its own).
    gs = jax.eval_shape(lambda key: env.global_state(env.reset(key)[1]), jax.random.PRNGKey(0))
    gs_size = gs.shape[0]
    kernel = state.params["critic"]["params"]["Encoder_0"]["body"]["Dense_0"]["kernel"]
    assert kernel.shape[0] == gs_size
    new_state, metrics = jax.jit(trainer.update)(state)
    assert np.isfinite(metrics["loss/total"]) and np.isfinite(metrics["loss/value"])
    assert int(new_state.update) == 1
