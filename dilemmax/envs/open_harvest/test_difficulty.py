"""The ``stage_orders`` difficulty option of OpenHarvest: validation and the counted rule space."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import dilemmax
from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest import generator


@pytest.mark.parametrize("bad", [0, 7, 2.5, True, "2"])
def test_stage_orders_out_of_range_raise(bad):
    with pytest.raises(ValueError, match="stage_orders"):
        dilemmax.make("open_harvest", stage_orders=bad)


@pytest.mark.parametrize("k", [1, 2, 3, 6])
def test_rule_space_size_is_k_to_the_ten(k):
    assert generator.rule_space_size(k) == k**10
    assert generator.rule_space_size() == 6**10


def test_two_orders_draw_only_the_two_preferred_rows_and_reach_the_whole_space():
    keys = jax.random.split(jax.random.PRNGKey(0), 20_000)
    rules = jax.vmap(lambda k: generator.generate_rule(k, 2))(keys)
    rows = np.concatenate([np.asarray(rules.pay_perm), np.asarray(rules.regrowth_perm)], axis=1)
    assert set(np.unique(rows).tolist()) == set(c.STAGE_ORDER_PREFERENCE[:2])
    assert len(np.unique(rows, axis=0)) == generator.rule_space_size(2)  # all 1024


def test_default_rules_are_the_papers_draws():
    for seed in range(5):
        key = jax.random.PRNGKey(seed)
        k_pay, k_regrow = jax.random.split(key)
        rule = generator.generate_rule(key)
        np.testing.assert_array_equal(rule.pay_perm, jax.random.randint(k_pay, (5,), 0, 6))
        np.testing.assert_array_equal(rule.regrowth_perm, jax.random.randint(k_regrow, (5,), 0, 6))


def test_small_rule_spaces_give_distinct_pools_and_a_disjoint_held_out_split():
    pools = generator.rule_pools(11, 100_000, 0.8, 2)
    as_set = lambda p: {tuple(np.concatenate(r)) for r in zip(
        np.asarray(p.items.pay_perm).tolist(), np.asarray(p.items.regrowth_perm).tolist(),
        strict=True)}  # fmt: skip
    assert len(as_set(pools["all"])) == 1024
    assert not as_set(pools["train"]) & as_set(pools["held_out"])
    single = dilemmax.make("open_harvest", split="held_out", stage_orders=1)
    cfg = single.sample_config(jax.random.PRNGKey(0))
    assert (np.asarray(cfg.rule.pay_perm) == 0).all()  # one rule, nothing hidden
