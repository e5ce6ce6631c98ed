"""Every metric of every env declares its axes (``env.metric_axes``, :mod:`dilemmax.envs.metrics`)
and its traced shape has them; the metrics the experiments and the scenario reports read by name
are declared with the axes they index them by.

Shapes are traced (``jax.eval_shape``), nothing is compiled. The sizes make every axis length
differ (trials != agents), so a per-trial metric declared per agent fails here."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import dilemmax
from dilemmax.envs import metrics as M
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.policies import random_policy
from dilemmax.envs.registry import env_spec, registered_envs
from dilemmax.envs.rollout import run_episode
from dilemmax.experiments.moral_hazard.common import OUTCOMES as MORAL_HAZARD_OUTCOMES
from dilemmax.redteam.statistics import CORE_METRICS
from dilemmax.scenarios.env import ScenarioConfig, ScenarioEnv

# Options that make the trial, agent and rank axes of each game of different lengths.
SIZES = {
    "consequence": {"num_agents": 3},
    "moral_hazard": {"num_agents": 3},
    "open_cleanup": {"num_agents": 3, "num_trials": 2, "num_layouts": 16, "num_rules": 64},
    "open_harvest": {"num_agents": 2, "num_trials": 3, "num_layouts": 8, "num_rules": 64},
}


def traced_metrics(env, config=None) -> dict:
    """name -> the shape of one episode's metric, traced from a two-step episode."""
    rollout = jax.eval_shape(
        lambda key: run_episode(env, random_policy, key, config, 2), jax.random.key(0)
    )
    return {k: v.shape for k, v in jax.eval_shape(env.episode_metrics, rollout).items()}


def assert_declared(env, shapes: dict, lengths: dict) -> None:
    declared = dict(env.metric_axes)
    assert set(shapes) == set(declared), "metrics without axes, or axes without a metric"
    for name, shape in shapes.items():
        assert declared[name] in M.AXES, name
        assert shape == tuple(lengths[axis] for axis in declared[name]), name


@pytest.mark.slow
@pytest.mark.parametrize("env_id", registered_envs())
def test_every_metric_of_every_game_declares_its_axes(env_id):
    env = dilemmax.make(env_id, **SIZES.get(env_id, {}))
    trials = getattr(env, "num_trials", None)
    assert trials != env.num_agents, "the sizes must tell the trial axis from the agent axis"
    lengths = {M.AGENT: env.num_agents, M.RANK: env.num_agents, M.TRIAL: trials}
    assert_declared(env, traced_metrics(env), lengths)


def test_a_scenario_env_declares_its_metrics_axes():
    game = MoralHazardEnv(3)
    env = ScenarioEnv(game, (0,), [[None, random_policy, random_policy]])
    shapes = traced_metrics(env, ScenarioConfig(jnp.int32(0)))
    assert_declared(env, shapes, {M.AGENT: 1, M.BACKGROUND: 2})


def test_an_undeclared_metric_is_named():
    with pytest.raises(M.MetricAxesError, match="'gini_by_moon' declares no axes"):
        M.axes_of(dilemmax.make("open_harvest").metric_axes, "gini_by_moon")
    with pytest.raises(M.MetricAxesError, match=r"'gini' is declared per trial but has shape \(\)"):
        M.axes_of({"gini": M.PER_TRIAL}, "gini", ())


# The metrics the experiments' tables (dilemmax/experiments/) and the scenario reports
# (dilemmax/scenarios/) read by name, with the axes their code indexes them by.
READ_BY_NAME = {
    "open_cleanup": {
        "return_per_trial": M.PER_TRIAL_AGENT,  # open_grid: arena, common, schelling, teams
        "cleaning_per_trial": M.PER_TRIAL_AGENT,  # arena
        "total_cleaning": M.PER_TRIAL,  # arena
        "first_clear_step": M.PER_TRIAL,  # tables (table 3)
        "first_apple_step": M.PER_TRIAL,
        "early_cleaning": M.PER_TRIAL,
        "pickups": M.PER_TRIAL_AGENT,  # tables (table 4)
        "working_tools": M.PER_TRIAL_AGENT,
        "return": M.PER_AGENT,  # scenarios/play.py
    },
    "open_harvest": {
        "return_per_trial": M.PER_TRIAL_AGENT,
        "orchard_lifetime": M.PER_TRIAL,  # arena
        "apples": M.PER_AGENT,  # tables (table 5)
        "payoffs_known": M.PER_AGENT,
        "best_stage_share": M.PER_AGENT,
        "premature_share": M.PER_AGENT,
        "return": M.PER_AGENT,
    },
    "moral_hazard": {
        **dict.fromkeys(MORAL_HAZARD_OUTCOMES, M.SCALAR),
        "query_by_agent": M.PER_AGENT,
        "return": M.PER_AGENT,
    },
    "consequence": {
        **dict.fromkeys(CORE_METRICS, M.SCALAR),
        **dict.fromkeys(("all_zero_opening", "round_one_funding"), M.SCALAR),  # the ablations
        "return": M.PER_AGENT,
    },
}


@pytest.mark.parametrize("env_id", sorted(READ_BY_NAME))
def test_metrics_read_by_name_have_the_axes_their_readers_index(env_id):
    declared = env_spec(env_id).load().metric_axes
    for name, axes in READ_BY_NAME[env_id].items():
        assert M.axes_of(declared, name) == axes, name
    scenario_reads = {"return": M.PER_AGENT, "per_capita": M.SCALAR}
    assert {k: ScenarioEnv.metric_axes[k] for k in scenario_reads} == scenario_reads
    assert ScenarioEnv.metric_axes["background_return"] == M.PER_BACKGROUND
