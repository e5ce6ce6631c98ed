"""Difficulty (curriculum) options of OpenCleanup: validation, rule space, recipes, stations."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dilemmax
from dilemmax.envs.open_cleanup import constants as C
from dilemmax.envs.open_cleanup import generator
from dilemmax.envs.rollout import run_episodes

EASIEST = {"recipe_length": 1, "num_tools": 4, "num_hues": 1}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"recipe_length": 3}, "recipe_length"),
        ({"num_tools": 1}, "num_tools"),
        ({"num_tools": 5}, "num_tools"),
        ({"num_hues": 0}, "num_hues"),
        ({"recipe_length": 1}, "gives 4 recipes, fewer than the 7 effects"),
        ({"num_tools": 2}, "gives 4 recipes, fewer than the 7 effects"),
        ({"num_hues": 2, "skew": 0.5}, "needs skew=1.0"),
    ],
)
def test_impossible_settings_raise_naming_the_option(options, message):
    with pytest.raises(ValueError, match=message):
        dilemmax.make("open_cleanup", **options)


@pytest.mark.parametrize(
    ("length", "tools", "hues", "size"),
    [(2, 4, 5, math.perm(16, 7)), (2, 3, 5, math.perm(9, 7)), (1, 4, 1, 24), (1, 3, 1, 6)],
)
def test_rule_space_size_counts_injective_maps_of_the_effects_in_play(length, tools, hues, size):
    assert C.rule_space_size(length, tools, hues) == size


def _distinct_rules(length, tools, hues, count):
    keys = jax.random.split(jax.random.PRNGKey(0), count)
    rules = jax.jit(jax.vmap(lambda k: generator.sample_rule(k, length, tools, hues)))(keys)
    return np.unique(np.asarray(rules.effect_pairs), axis=0)


@pytest.mark.slow
@pytest.mark.parametrize(("length", "tools", "hues"), [(1, 3, 1), (1, 4, 1), (2, 3, 1)])
def test_the_sampler_reaches_exactly_the_counted_rule_space(length, tools, hues):
    size = C.rule_space_size(length, tools, hues)
    rows = _distinct_rules(length, tools, hues, 40 * size)
    assert len(rows) == size
    in_play, out = (
        rows[:, list(range(hues)) + [C.NUM_HUES, C.NUM_HUES + 1]],
        rows[:, hues : C.NUM_HUES],
    )
    assert (out == C.NUM_PAIRS).all()  # hues out of play have no recipe
    first, second = np.divmod(in_play, C.NUM_TOOLS)
    assert (first < tools).all() and (second < tools).all()
    if length == 1:
        assert (first == second).all()  # stored as the pair (t, t)
    assert all(len(set(r)) == len(r) for r in in_play.tolist())  # injective


def test_default_rules_are_the_papers_draws():
    for seed in range(5):
        key = jax.random.PRNGKey(seed)
        expected = jax.random.permutation(key, C.NUM_PAIRS)[: C.NUM_EFFECTS]
        np.testing.assert_array_equal(generator.sample_rule(key).effect_pairs, expected)


def test_one_pick_up_recipes_depend_on_the_last_tool_only():
    rule = generator.sample_rule(jax.random.PRNGKey(3), 1, 4, 1)
    table = np.asarray(generator.pair_effects(rule, recipe_length=1)).reshape(4, 4)  # [first, last]
    assert (table == table[:1]).all()  # every first pick-up gives the same effect
    tools = np.asarray(rule.effect_pairs)[[0, C.NUM_HUES, C.NUM_HUES + 1]] % C.NUM_TOOLS
    assert table[0, tools].tolist() == [0, C.EFFECT_MID_TO_LIGHT, C.EFFECT_DARK_TO_MID]
    assert sorted(table[0].tolist()) == [0, 5, 6, C.NO_EFFECT]


@pytest.mark.slow
def test_easy_env_pools_stations_and_hue():
    train = dilemmax.make("open_cleanup", split="train", **EASIEST)
    held = dilemmax.make("open_cleanup", split="held_out", **EASIEST)
    rows = lambda env: {tuple(r) for r in np.asarray(env.rule_pool.items.effect_pairs).tolist()}
    assert len(rows(train)) + len(rows(held)) == 24 and not rows(train) & rows(held)
    three = dilemmax.make("open_cleanup", num_tools=3, num_hues=1, num_rules=2000)
    cfgs = jax.jit(jax.vmap(three.sample_config))(jax.random.split(jax.random.PRNGKey(0), 32))
    assert (np.asarray(cfgs.layout.station_tools) == np.arange(8) % 3).all()
    stations = np.asarray(cfgs.initial_grid) >= C.STATION_BASE
    assert (np.asarray(cfgs.initial_grid)[stations] < C.STATION_BASE + 3).all()
    assert (np.asarray(cfgs.dominant_hue) == 0).all()


@pytest.mark.slow
def test_the_informed_cleaner_cleans_at_the_easiest_setting():
    env = dilemmax.make("open_cleanup", num_agents=1, num_trials=1, trial_steps=150, **EASIEST)
    cleaner = env.scripted_policies()["informed_cleaner"]
    _, m = run_episodes(env, [cleaner], jax.random.PRNGKey(1), 2)
    assert (np.asarray(m["cleaning_per_trial"]) > 0).all()
    # Its shots taught it the recipes it used: at most the 3 effects in play.
    known = np.asarray(m["recipes_known"])
    assert (known >= 1).all() and (known <= 3).all()
    assert jnp.issubdtype(m["apples_per_trial"].dtype, jnp.integer)
