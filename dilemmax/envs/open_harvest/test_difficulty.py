"""The difficulty options of OpenHarvest (``stage_orders``, ``pay_levels``,
``shared_pay_order``): validation, the counted rule space, and what an apple pays."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dilemmax
from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest import generator
from dilemmax.envs.open_harvest.conftest import hand_layout, place, tree_at
from dilemmax.envs.open_harvest.types import OpenHarvestRule


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


@pytest.mark.slow
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


# ---------------------------------------------------------------- pay_levels


@pytest.mark.parametrize(
    "bad, why",
    [
        ((1.0, 0.5), "3"),  # one level per stage
        ((1.0, 0.5, 0.25, 0.0), "3"),
        ((0.25, 0.5, 1.0), "best first"),  # worst first
        ((1.0, 1.0, 0.0), "best first"),  # a tie leaves the best stage undefined
        ((1.0, 0.0, float("nan")), "finite"),
        ((1.0, 0.0, float("-inf")), "finite"),
        ("1,0,-1", "list"),
        ((1.0, True, 0.0), "number"),
    ],
)
def test_bad_pay_levels_raise_naming_the_option(bad, why):
    with pytest.raises(ValueError, match="pay_levels") as error:
        dilemmax.make("open_harvest", pay_levels=bad)
    assert why in str(error.value)


def test_pay_levels_validator_returns_floats_and_names_the_order():
    assert generator.validate_pay_levels([1, 0, -0.5]) == (1.0, 0.0, -0.5)
    with pytest.raises(ValueError, match="strictly decreasing"):
        generator.validate_pay_levels((0.0, 0.0, -1.0))


LEVELS = (1.0, 0.0, -0.5)


@pytest.fixture(scope="module")
def costly_env():
    return dilemmax.make(
        "open_harvest", num_layouts=16, num_rules=64, stage_orders=2, pay_levels=LEVELS
    )


@pytest.mark.slow
def test_sampled_pay_tables_put_the_configured_levels_on_the_two_orders(costly_env):
    configs = jax.vmap(costly_env.sample_config)(jax.random.split(jax.random.PRNGKey(3), 32))
    pay = np.asarray(configs.pay)  # [32, C, G]
    unripe_best = np.array(LEVELS)
    over_best = unripe_best[::-1]
    rows_match = (pay == unripe_best).all(-1) | (pay == over_best).all(-1)
    assert rows_match.all()
    assert (pay == unripe_best).all(-1).any() and (pay == over_best).all(-1).any()
    best = np.asarray(configs.best_stage)
    assert set(np.unique(best).tolist()) == {c.UNRIPE, c.OVERRIPE}
    # The levels do not change the counted rule space.
    assert len(costly_env.rule_pool.items.pay_perm) <= generator.rule_space_size(2)


@pytest.fixture(scope="module")
def costly_step(costly_env):
    return jax.jit(costly_env.step_env)


@pytest.mark.slow
def test_eating_at_each_stage_pays_the_configured_level(costly_env, costly_step):
    """A hand-built state: agent 0 walks onto a red apple aged into each stage in turn."""
    # Red (colour 0) takes pay row 0 (unripe best), yellow row 5 (over-ripe best).
    rule = OpenHarvestRule(
        pay_perm=jnp.asarray([0, 5, 0, 5, 0], jnp.int32),
        regrowth_perm=jnp.zeros(5, jnp.int32),
    )
    config = generator.make_config(
        hand_layout(), rule, jnp.asarray([0, 1, 2, 3, 4, 0], jnp.int32), LEVELS
    )
    _, start = costly_env.reset_to(jax.random.key(0), config)
    step = costly_step
    for colour, row, (r, q) in ((0, 0, (4, 3)), (1, 5, (4, 11))):
        tree = tree_at(config, r, q)
        for stage in range(c.NUM_STAGES):
            state = place(start, 0, r + 1, q)
            orchard = state.orchard.replace(
                age=state.orchard.age.at[tree].set(15 * stage + 1),
                stage_length=state.orchard.stage_length.at[tree].set(15),
            )
            actions = {a: jnp.int32(c.STAY) for a in costly_env.agents}
            actions["agent_0"] = jnp.int32(c.NORTH_ACTION)
            _, after, rewards, _, infos = step(
                jax.random.key(1), state.replace(orchard=orchard), actions
            )
            expected = LEVELS[int(c.STAGE_PERMUTATIONS[row, stage])]
            assert int(infos["ate_stage"][0]) == stage and int(infos["ate_colour"][0]) == colour
            assert float(rewards["agent_0"]) == expected
            assert float(after.trial_return[0]) == expected
    assert LEVELS[int(c.STAGE_PERMUTATIONS[5, c.OVERRIPE])] == 1.0  # yellow's best is over-ripe


@pytest.mark.slow
def test_text_protocol_states_costs_and_signs_the_pay(costly_env, costly_step):
    protocol = costly_env.text_protocol()
    assert "COST points" in protocol.system_prompt("agent_0")
    paper = dilemmax.make("open_harvest", num_layouts=16, num_rules=64).text_protocol()
    assert "COST" not in paper.system_prompt("agent_0")
    rule = OpenHarvestRule(pay_perm=jnp.zeros(5, jnp.int32), regrowth_perm=jnp.zeros(5, jnp.int32))
    config = generator.make_config(hand_layout(), rule, jnp.zeros(6, jnp.int32), LEVELS)
    _, state = costly_env.reset_to(jax.random.key(0), config)
    tree = tree_at(config, 4, 3)
    state = place(state, 0, 5, 3).replace(
        orchard=state.orchard.replace(
            age=state.orchard.age.at[tree].set(40),
            stage_length=state.orchard.stage_length.at[tree].set(15),
        )
    )
    actions = {a: jnp.int32(c.STAY) for a in costly_env.agents}
    actions["agent_0"] = jnp.int32(c.NORTH_ACTION)
    _, after, rewards, _, _ = costly_step(jax.random.key(1), state, actions)
    assert float(rewards["agent_0"]) == -0.5
    text = protocol.render(after, "agent_0")
    assert "red over-ripe apple: -0.5 points." in text and "+-" not in text
    assert "red over-ripe -> -0.5" in text


# ---------------------------------------------------------------- shared_pay_order


@pytest.mark.parametrize("k", [1, 2, 3, 6])
def test_shared_pay_order_counts_one_pay_row_and_five_regrowth_rows(k):
    assert generator.rule_space_size(k, shared_pay_order=True) == k**6
    assert generator.rule_space_size(k, shared_pay_order=False) == k**10


def test_shared_pay_order_draws_one_pay_row_for_every_colour_and_reaches_the_whole_space():
    keys = jax.random.split(jax.random.PRNGKey(4), 4_000)
    rules = jax.vmap(lambda k: generator.generate_rule(k, 2, shared_pay_order=True))(keys)
    pay = np.asarray(rules.pay_perm)
    regrowth = np.asarray(rules.regrowth_perm)
    assert (pay == pay[:, :1]).all()  # one order for all colours
    assert set(np.unique(pay).tolist()) == set(c.STAGE_ORDER_PREFERENCE[:2])
    assert (regrowth != regrowth[:, :1]).any(axis=1).mean() > 0.8  # regrowth stays per colour
    distinct = np.unique(np.concatenate([pay[:, :1], regrowth], axis=1), axis=0)
    assert len(distinct) == generator.rule_space_size(2, shared_pay_order=True)  # all 64
    # Off, the draws are exactly the per-colour ones.
    key = jax.random.PRNGKey(9)
    off = generator.generate_rule(key, 2)
    on = generator.generate_rule(key, 2, shared_pay_order=True)
    np.testing.assert_array_equal(off.regrowth_perm, on.regrowth_perm)
    np.testing.assert_array_equal(on.pay_perm, np.full(5, int(off.pay_perm[0])))


@pytest.mark.slow
def test_shared_pay_order_env_holds_out_whole_rules_and_pays_alike_across_colours():
    env = dilemmax.make(
        "open_harvest", num_layouts=16, stage_orders=2, pay_levels=LEVELS, shared_pay_order=True
    )
    assert env.shared_pay_order and not dilemmax.make("open_harvest").shared_pay_order
    pools = generator.rule_pools(env.pool_seed + 1, 100_000, 0.8, 2, True)
    rows = lambda p: {tuple(r) for r in np.concatenate(
        [np.asarray(p.items.pay_perm), np.asarray(p.items.regrowth_perm)], 1).tolist()}  # fmt: skip
    assert len(rows(pools["all"])) == 64
    assert not rows(pools["train"]) & rows(pools["held_out"])
    held_out = dilemmax.make(
        "open_harvest", split="held_out", num_layouts=16, stage_orders=2, pay_levels=LEVELS,
        shared_pay_order=True,
    )  # fmt: skip
    configs = jax.vmap(held_out.sample_config)(jax.random.split(jax.random.PRNGKey(5), 64))
    pay = np.asarray(configs.pay)  # [64, C, G]
    assert (pay == pay[:, :1]).all()
    assert set(np.unique(np.asarray(configs.best_stage)).tolist()) == {c.UNRIPE, c.OVERRIPE}


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_shared_pay_order_rejects_non_booleans_naming_the_option(bad):
    with pytest.raises(ValueError, match="shared_pay_order"):
        dilemmax.make("open_harvest", shared_pay_order=bad)


@pytest.mark.slow
def test_text_protocol_says_when_one_pay_order_holds_for_all_colours():
    shared = dilemmax.make("open_harvest", num_layouts=16, shared_pay_order=True)
    assert "same stage order" in shared.text_protocol().system_prompt("agent_0")
    paper = dilemmax.make("open_harvest", num_layouts=16, num_rules=64)
    assert "same stage order" not in paper.text_protocol().system_prompt("agent_0")
