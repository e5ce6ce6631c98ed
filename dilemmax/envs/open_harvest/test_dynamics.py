"""The orchard's mechanics on hand-built orchards (no env step involved)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest import dynamics
from dilemmax.envs.open_harvest.conftest import DIAMOND_CENTRES, hand_config, tree_at
from dilemmax.envs.open_harvest.types import Orchard

T = c.NUM_TREES
NO_AGENTS = np.zeros(T, bool)


def orchard(apple=None, age=0, length=15, eaten_stage=-1, timer=0) -> Orchard:
    full = lambda v, dtype: jnp.broadcast_to(jnp.asarray(v, dtype), (T,))
    return Orchard(
        apple=full(True if apple is None else apple, bool),
        age=full(age, jnp.int32),
        stage_length=full(length, jnp.int32),
        eaten_stage=full(eaten_stage, jnp.int32),
        regrow_timer=full(timer, jnp.int32),
    )


# One compiled program, vmapped over keys, serves every statistical test.
advance_many = jax.jit(jax.vmap(dynamics.advance_orchard, in_axes=(0, None, None, None)))


@pytest.mark.slow
def test_stage_follows_age_and_the_apple_rots_at_three_lengths():
    ages = jnp.array([0, 14, 15, 29, 30, 44])
    assert dynamics.stage_of(ages, jnp.int32(15)).tolist() == [0, 0, 1, 1, 2, 2]
    assert dynamics.stage_of(jnp.int32(59), jnp.int32(20)) == 2
    # Age 44 of length 15: one step later it reaches 45 = 3 x 15 and rots.
    before = orchard(age=jnp.where(jnp.arange(T) == 0, 44, 43))
    after, events = dynamics.advance_orchard(jax.random.key(0), before, hand_config(), NO_AGENTS)
    assert events.rotted.tolist() == [True] + [False] * (T - 1)
    assert not bool(after.apple[0]) and bool(after.apple[1:].all())
    assert int(after.age[1]) == 44 and int(after.eaten_stage[0]) == -1
    assert c.ROT_REGROW_MIN <= int(after.regrow_timer[0]) <= c.ROT_REGROW_MAX


def test_rotted_cell_regrows_after_its_delay_whatever_is_around_it():
    # Only tree 0 is waiting (3 steps) and nothing hangs anywhere: it still regrows, on the 3rd
    # step, unripe, with a fresh stage length.
    state = orchard(apple=False, eaten_stage=0, timer=jnp.where(jnp.arange(T) == 0, 3, 0))
    state = state.replace(eaten_stage=jnp.where(jnp.arange(T) == 0, -1, 0))
    config = hand_config().replace(base_regrowth=jnp.zeros(4))  # rule out any other growth
    for step in range(1, 4):
        state, events = dynamics.advance_orchard(jax.random.key(step), state, config, NO_AGENTS)
        assert bool(events.regrown_after_rot[0]) == (step == 3)
        assert not bool(events.regrown.any())
    assert bool(state.apple[0]) and int(state.age[0]) == 0 and int(state.regrow_timer[0]) == 0
    assert c.STAGE_LENGTH_MIN <= int(state.stage_length[0]) <= c.STAGE_LENGTH_MAX
    assert not bool(state.apple[1:].any())


def test_rotted_cell_waits_while_an_agent_stands_on_it():
    state = orchard(apple=False, eaten_stage=0, timer=jnp.where(jnp.arange(T) == 0, 1, 0))
    state = state.replace(eaten_stage=jnp.where(jnp.arange(T) == 0, -1, 0))
    occupied = jnp.arange(T) == 0
    config = hand_config().replace(base_regrowth=jnp.zeros(4))
    state, events = dynamics.advance_orchard(jax.random.key(0), state, config, occupied)
    assert not bool(events.regrown_after_rot[0]) and int(state.regrow_timer[0]) == 1
    state, events = dynamics.advance_orchard(jax.random.key(1), state, config, NO_AGENTS)
    assert bool(events.regrown_after_rot[0]) and bool(state.apple[0])


@pytest.mark.slow
def test_rot_delays_and_stage_lengths_cover_their_ranges_uniformly():
    before = orchard(age=44)  # every apple rots this step
    after, events = advance_many(
        jax.random.split(jax.random.key(0), 400), before, hand_config(), NO_AGENTS
    )
    assert bool(events.rotted.all())
    delays = np.asarray(after.regrow_timer).ravel()
    values, counts = np.unique(delays, return_counts=True)
    assert values.tolist() == [2, 3, 4, 5]
    assert np.allclose(counts / delays.size, 0.25, atol=0.01)
    bits = jax.random.bits(jax.random.key(1), (100, T), jnp.uint32)
    laid = dynamics.lay_orchard(dynamics.draw_stage_lengths(bits, hand_config()).reshape(-1))
    assert bool(laid.apple.all()) and not bool(laid.age.any())
    values, counts = np.unique(np.asarray(laid.stage_length), return_counts=True)
    assert values.tolist() == list(range(c.STAGE_LENGTH_MIN, c.STAGE_LENGTH_MAX + 1))
    assert np.allclose(counts / counts.sum(), 1 / 6, atol=0.015)


@pytest.mark.slow
@pytest.mark.parametrize("apples_around", [0, 1, 2, 3, 6])
def test_regrowth_probability_by_neighbour_count_and_multiplier(apples_around):
    # The centre of the first diamond was eaten at each stage; its 12 neighbours are the rest of
    # the diamond. Hang `apples_around` of them, nothing else anywhere.
    r, q = DIAMOND_CENTRES[0]
    centre = tree_at(hand_config(), r, q)
    neighbours = np.asarray(hand_config().layout.neighbours[centre])
    assert (neighbours < T).sum() == 12
    hanging = np.zeros(T, bool)
    hanging[neighbours[:apples_around]] = True
    colour = int(hand_config().tree_colour[centre])
    for stage in range(c.NUM_STAGES):
        eaten = np.where(np.arange(T) == centre, stage, -1)
        before = orchard(apple=hanging, eaten_stage=eaten)
        expected = c.BASE_REGROWTH[min(apples_around, 3)] * float(
            hand_config().regrowth_multiplier[colour, stage]
        )
        p = dynamics.regrowth_probability(
            jnp.int32(apples_around), jnp.int32(colour), jnp.int32(stage), hand_config()
        )
        assert float(p) == pytest.approx(expected)
        n = 20_000
        _, events = advance_many(
            jax.random.split(jax.random.key(stage), n), before, hand_config(), NO_AGENTS
        )
        freq = float(np.mean(events.regrown[:, centre]))
        if expected == 0:
            assert freq == 0
        else:
            sd = np.sqrt(expected * (1 - expected) / n)
            assert abs(freq - expected) < 5 * sd + 1e-4, (stage, freq, expected)
        # Cells that never lost an apple to eating (eaten_stage -1) never regrow this way.
        assert not bool(np.asarray(events.regrown)[:, np.flatnonzero(~hanging & (eaten < 0))].any())


def test_regrowth_multiplier_follows_the_rule_table():
    # Regrowth rows (5, 4, 3, 2, 1) over (x2, x1, x0.5): colour 0 uses row 5 = (2, 1, 0).
    assert np.asarray(hand_config().regrowth_multiplier[0]).tolist() == [0.5, 1.0, 2.0]
    p = dynamics.regrowth_probability(
        jnp.array([3, 3, 3, 2, 1, 0]),
        jnp.zeros(6, jnp.int32),
        jnp.array([0, 1, 2, 2, 2, 2]),
        hand_config(),
    )
    assert np.allclose(p, [0.0125, 0.025, 0.05, 0.01, 0.002, 0.0])


def test_apples_nearby_counts_the_twelve_cell_neighbourhood():
    rng = np.random.default_rng(0)
    apple = rng.random(T) < 0.5
    n = np.asarray(dynamics.apples_nearby(jnp.asarray(apple), hand_config().layout.neighbours))
    trees = np.asarray(hand_config().layout.tree_positions)
    dist = np.abs(trees[:, None] - trees[None]).sum(-1)
    expected = ((dist > 0) & (dist <= 2) & apple[None, :]).sum(1)
    np.testing.assert_array_equal(n, expected)


def test_eating_pays_by_colour_and_stage():
    # Pay permutations (0, 1, 2, 3, 4): colour 0 pays (1, .5, .25), colour 1 (1, .25, .5),
    # colour 2 (.5, 1, .25), ... Trees of patches 0, 1, 2 have colours 0, 1, 2.
    cells = [DIAMOND_CENTRES[0], DIAMOND_CENTRES[1], DIAMOND_CENTRES[2], (14, 5)]
    trees = [tree_at(hand_config(), *cell) for cell in cells[:3]]
    ages = np.zeros(T, np.int32)
    ages[trees] = [3, 15, 44]  # unripe, ripe, over-ripe (length 15)
    before = orchard(age=ages)
    after, ev = dynamics.eat(before, hand_config(), jnp.asarray(cells, jnp.int32))
    assert ev["ate"].tolist() == [True, True, True, False]
    assert ev["ate_colour"].tolist() == [0, 1, 2, -1]
    assert ev["ate_stage"].tolist() == [0, 1, 2, -1]
    assert ev["ate_pay"].tolist() == [1.0, 0.25, 0.25, 0.0]
    expected_pay = [hand_config().pay[0, 0], hand_config().pay[1, 1], hand_config().pay[2, 2]]
    assert np.allclose(ev["ate_pay"][:3], expected_pay)
    assert np.asarray(hand_config().pay).tolist()[:3] == [
        [1, 0.5, 0.25],
        [1, 0.25, 0.5],
        [0.5, 1, 0.25],
    ]
    emptied = np.asarray(ev["emptied_eaten"])
    assert emptied.sum() == 3 and emptied[trees].all()
    assert not np.asarray(after.apple)[trees].any() and np.asarray(after.apple).sum() == T - 3
    assert np.asarray(after.eaten_stage)[trees].tolist() == [0, 1, 2]


def test_dead_orchard_needs_no_apple_and_no_pending_rot():
    empty = orchard(apple=False, eaten_stage=1)
    assert bool(dynamics.orchard_dead(empty))
    assert not bool(
        dynamics.orchard_dead(empty.replace(regrow_timer=empty.regrow_timer.at[5].set(2)))
    )
    assert not bool(dynamics.orchard_dead(empty.replace(apple=empty.apple.at[5].set(True))))
