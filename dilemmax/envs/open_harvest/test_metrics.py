"""episode_metrics on a hand-written rollout whose every number is worked out by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.envs.base import Rollout
from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest.conftest import hand_config
from dilemmax.envs.open_harvest.metrics import episode_metrics

AGENTS = ["agent_0", "agent_1", "agent_2"]
# Pay rows: colour 0 uses permutation 4 -> (.25, 1, .5), colour 1 permutation 2 -> (.5, 1, .25):
# both pay most when ripe. Only colours 0 and 1 are on the map, so 6 pays can be learned.
RULE = {"pay_perm": (4, 2, 0, 0, 0), "colours": (0, 0, 1, 1, 0, 0)}  # hand_config makes it
U, R, OVER = c.UNRIPE, c.RIPE, c.OVERRIPE


class _Final:
    @property
    def config(self):
        return hand_config(**RULE)


def _rollout() -> Rollout:
    """Two trials: trial 0 is steps 0-2 and ends with a dead orchard, trial 1 is steps 3-6 and
    is cut (not dead); step 7 is padding whose events must be ignored."""
    T, A = 8, 3
    eats = {  # step: (agent, colour, stage)
        0: (0, 0, R), 1: (1, 0, U), 2: (0, 1, OVER), 3: (2, 1, R), 4: (0, 0, R), 6: (1, 1, U),
        7: (2, 0, R),
    }  # fmt: skip
    pay = np.asarray(hand_config(**RULE).pay)
    ate = np.zeros((T, A), bool)
    colour = np.full((T, A), -1)
    stage = np.full((T, A), -1)
    rewards = np.zeros((T, A), np.float32)
    for t, (a, col, st) in eats.items():
        ate[t, a], colour[t, a], stage[t, a], rewards[t, a] = True, col, st, pay[col, st]
    fired = np.zeros((T, A), bool)
    hit = np.zeros((T, A), bool)
    fired[1, 2], hit[1, 0] = True, True
    fired[5, 2], hit[5, 1] = True, True
    fired[7, 0], hit[7, 2] = True, True  # padding
    infos = {
        "trial": jnp.array([0, 0, 0, 1, 1, 1, 1, 1]),
        "trial_step": jnp.array([0, 1, 2, 0, 1, 2, 3, 4]),
        "trial_done": jnp.array([0, 0, 1, 0, 0, 0, 1, 0], bool),
        "orchard_dead": jnp.array([0, 0, 1, 0, 0, 0, 0, 0], bool),
        "ate": jnp.asarray(ate),
        "ate_colour": jnp.asarray(colour, jnp.int32),
        "ate_stage": jnp.asarray(stage, jnp.int32),
        "zap_fired": jnp.asarray(fired),
        "zapped": jnp.asarray(hit),
    }
    valid = jnp.arange(T) < 7
    return Rollout(
        actions={a: jnp.zeros(T, jnp.int32) for a in AGENTS},
        rewards={a: jnp.asarray(rewards[:, i]) for i, a in enumerate(AGENTS)},
        dones={a: jnp.zeros(T, bool) for a in AGENTS + ["__all__"]},
        infos=infos,
        valid=valid,
        final_state=_Final(),
    )


@pytest.fixture(scope="module")
def metrics():
    return jax.device_get(episode_metrics(_rollout(), AGENTS, num_trials=2))


@pytest.mark.slow
def test_returns_apples_and_trials(metrics):
    np.testing.assert_allclose(metrics["return_per_trial"], [[1.25, 0.25, 0.0], [1.0, 0.5, 1.0]])
    np.testing.assert_allclose(metrics["return"], [2.25, 0.75, 1.0])
    np.testing.assert_allclose(metrics["mean_return_per_trial"], [0.5, 2.5 / 3])
    assert metrics["apples_per_trial"].tolist() == [[2, 1, 0], [1, 1, 1]]
    assert metrics["apples"].tolist() == [3, 2, 1]
    assert int(metrics["trials_played"]) == 2 and int(metrics["length"]) == 7


def test_orchard_lifetime_is_the_death_step_or_the_trial_length(metrics):
    assert metrics["orchard_lifetime"].tolist() == [3, 4]
    assert metrics["orchard_died"].tolist() == [True, False]


def test_gini_of_returns_within_each_trial(metrics):
    # (1.25, .25, 0): sum over ordered pairs |xi - xj| = 5, over 2 * n * sum = 9.
    # (1, .5, 1): 2 / 15.
    np.testing.assert_allclose(metrics["gini_per_trial"], [5 / 9, 2 / 15], rtol=1e-6)
    np.testing.assert_allclose(metrics["gini"], (5 / 9 + 2 / 15) / 2, rtol=1e-6)


def test_payoffs_known_count_only_colours_on_the_map(metrics):
    np.testing.assert_allclose(
        metrics["payoffs_known_per_trial"], [[2 / 6, 1 / 6, 0.0], [2 / 6, 2 / 6, 1 / 6]]
    )
    np.testing.assert_allclose(metrics["payoffs_known"], [2 / 6, 2 / 6, 1 / 6])


def test_best_stage_premature_and_points_per_apple(metrics):
    np.testing.assert_allclose(metrics["best_stage_share"], [2 / 3, 0.0, 1.0])
    np.testing.assert_allclose(metrics["premature_share"], [0.0, 1.0, 0.0])
    np.testing.assert_allclose(metrics["best_stage_share_team"], 3 / 6)
    np.testing.assert_allclose(metrics["premature_share_team"], 2 / 6)
    np.testing.assert_allclose(metrics["points_per_apple"], [0.75, 0.375, 1.0])
    np.testing.assert_allclose(metrics["points_per_apple_team"], 4.0 / 6)


def test_zaps_fired_and_received(metrics):
    assert metrics["zaps_fired"].tolist() == [0, 0, 2]
    assert metrics["zaps_received"].tolist() == [1, 1, 0]


def test_metrics_jit_and_vmap_over_episodes(metrics):
    rollout = _rollout()
    batch = jax.tree.map(lambda x: jnp.stack([x, x]), rollout.replace(final_state=None))

    def one(r):
        return episode_metrics(r.replace(final_state=_Final()), AGENTS, num_trials=2)

    out = jax.jit(jax.vmap(one))(batch)
    for name, value in metrics.items():
        np.testing.assert_allclose(np.asarray(out[name])[1], value, rtol=1e-6, err_msg=name)
