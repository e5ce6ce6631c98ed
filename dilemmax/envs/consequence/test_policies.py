"""Scripted policies: closed-form contributions, rule-dependent outcomes, legality."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.envs.consequence import constants as C
from dilemmax.envs.consequence import policies as P
from dilemmax.envs.consequence.env import ConsequenceEnv
from dilemmax.envs.consequence.generator import make_config
from dilemmax.envs.rollout import observations_for, run_episodes


def _first_actions(player, policy, resources, threshold, rule="RP"):
    state = player.start(resources, threshold, rule)
    views = observations_for(player.env, player.env.get_obs(state), state)
    return [int(policy(jax.random.key(0), views[a])) for a in player.env.agents]


@pytest.mark.slow
def test_round_one_amounts(player):
    # ceil(10 * w_i / 12) for w = (1, 5, 6): 1, 5, 5 (11 >= 10).
    assert _first_actions(player, P.fair_share, (1, 5, 6), 10) == [1, 5, 5]
    # Richest first: C gives 6, B the 4 still missing, A nothing.
    assert _first_actions(player, P.threshold_aware, (1, 5, 6), 10) == [0, 4, 6]
    # Ties in holdings go to the lower seat first: B before C.
    assert _first_actions(player, P.threshold_aware, (2, 5, 5), 7) == [0, 5, 2]
    assert _first_actions(player, P.all_zero, (1, 5, 6), 10) == [0, 0, 0]
    assert _first_actions(player, P.starve_then_cover, (1, 5, 6), 10) == [0, 0, 0]


def test_default_vote_targets_least_contributor(player):
    state = player.start((2, 4, 6), 12, "DV")
    _, state, *_ = player.play(state, (1, 0, 3))
    views = observations_for(player.env, player.env.get_obs(state), state)
    votes = [int(P.all_zero(jax.random.key(0), views[a])) for a in player.env.agents]
    # B gave least; B itself votes for A (gave 1) over C (gave 3).
    assert votes == [1, 0, 1]


@pytest.mark.slow
def test_canonical_instance_outcomes_by_rule():
    """starve_then_cover at w = (1, 5, 6), T = 10: each rule's fate follows from the rules."""
    env = ConsequenceEnv(sorted_agents=True)
    rules = (C.AON, C.DV, C.RP, C.PP)
    configs = jax.tree.map(
        lambda *xs: jnp.stack(xs), *[make_config((1, 5, 6), 10, r) for r in rules]
    )
    _, m = run_episodes(env, P.starve_then_cover, jax.random.key(0), 1, configs=configs)
    m = jax.tree.map(lambda x: np.asarray(x[:, 0]), m)
    # AON: round two is funded, all live. RP: A is sacrificed, B and C fund round two.
    # DV: the vote removes C (most held among the non-givers), 1 + 5 < 10 then dooms everyone.
    # PP: C is removed with the 6 units the group needed: collapse.
    np.testing.assert_allclose(m["fatality"], [0.0, 1.0, 1 / 3, 1.0], rtol=1e-6)
    np.testing.assert_array_equal(m["exploitation"], [0, 0, 1, 0])
    np.testing.assert_array_equal(m["targeted_elimination"], [0, 0, 1, 1])
    np.testing.assert_array_equal(m["success"], [1, 0, 1, 0])
    np.testing.assert_array_equal(m["deaths_by_rank"][2], [1, 0, 0])
    np.testing.assert_array_equal(m["deaths_by_rank"][3], [1, 1, 1])
    np.testing.assert_array_equal(m["round_one_deaths_by_rank"][1], [0, 0, 1])
    np.testing.assert_array_equal(m["cascade"], [0, 1, 0, 1])


@pytest.mark.slow
def test_every_scripted_policy_plays_legally():
    """One seat per policy in a six-agent game (W = 24), every phase and rule sampled."""
    names = list(P.SCRIPTED_POLICIES)
    assert {"random", "all_zero", "fair_share", "threshold_aware"} <= set(names)
    env = ConsequenceEnv(num_agents=len(names), total_resources=24)
    policies = [P.SCRIPTED_POLICIES[n] for n in names]
    rollouts, m = run_episodes(env, policies, jax.random.key(1), 256)
    assert int(jnp.sum(m["invalid_actions"])) == 0
    # The sample reached vote phases and eliminations, so votes were checked too.
    assert bool(jnp.any(rollouts.infos["phase"] == C.PHASE_VOTE))
    assert float(jnp.mean(m["rule_eliminations"])) > 0
