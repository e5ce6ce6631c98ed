"""Scripted agents: the random control against its closed form, the teacher, always_local,
the holmstrom switch, and the incentive-isolation partners."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dilemmax
from dilemmax.envs import run_episodes
from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard import policies
from dilemmax.envs.moral_hazard.conftest import fixed_config
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.moral_hazard.generator import (
    condition_grid,
    incentive_grid,
    make_config,
    stack_configs,
)
from dilemmax.envs.moral_hazard.metrics import random_control_moments
from dilemmax.envs.rollout import Observation

NUM_EPISODES = 20_000
WEIGHTS = ("cost", "w_local", "w_final", "w_team")
OUTCOMES = (
    "local_reward",
    "query_rate",
    "info_transfer",
    "unsafe_choice",
    "team_success",
    "final_accuracy",
    "score",
    "note_rate",
    "correct_note_rate",
)

# (n, conditions): several contracts, mappings, provenances and reward modes per group size.
RANDOM_CONDITIONS = {
    2: [
        {},
        {"cost": 0.35, "w_team": 1.0, "provenance": "visible"},
        {"mapping": "lowest", "w_local": 0.6, "w_final": 0.3},
        {"mapping": "uninformative", "payoff": "private", "shares": (0.8, 0.2)},
    ],
    3: [{}, {"mapping": "uninformative", "w_team": 1.0, "cost": 0.0}],
    4: [{"w_team": 1.0, "payoff": "private", "shares": (0.4, 0.2, 0.2, 0.2)}],
}


@pytest.mark.slow
@pytest.mark.parametrize("n", sorted(RANDOM_CONDITIONS))
def test_random_control_matches_its_closed_form(n):
    options = RANDOM_CONDITIONS[n]
    configs = stack_configs([make_config(n, **o) for o in options])
    env = MoralHazardEnv(n)
    _, metrics = run_episodes(
        env, policies.random_control, jax.random.key(n), NUM_EPISODES, configs
    )
    for ci, option in enumerate(options):
        weights = {k: v for k, v in option.items() if k in WEIGHTS}
        exact = random_control_moments(n, shares=option.get("shares"), **weights)
        for name in OUTCOMES:
            mean, std = exact[name]
            sample = np.asarray(metrics[name][ci], np.float64)
            error = 5 * std / np.sqrt(NUM_EPISODES) + 1e-6
            assert abs(sample.mean() - mean) < error, (n, option, name, sample.mean(), mean)
            # The closed-form spread matches the sample's too (a check on the derivation; loose
            # enough for the sampling error of a rare event's spread).
            assert sample.std() == pytest.approx(std, rel=0.15, abs=1e-3), (n, name)
        assert np.all(np.asarray(metrics["format_validity"][ci]) == 1.0)
        payoff = np.asarray(metrics["private_payoff"][ci], np.float64)
        for i in range(n):
            mean, std = exact[f"private_payoff_{i}"]
            assert abs(payoff[:, i].mean() - mean) < 5 * std / np.sqrt(NUM_EPISODES)


def test_closed_form_reproduces_the_papers_chance_tables():
    # Table 11: 100 E[R] per condition, and team success per group size.
    grid = condition_grid()
    expected = {
        "k=0.00": 11.25, "k=0.05": 8.75, "k=0.10": 6.25, "k=0.20": 1.25, "k=0.35": -6.25,
        "w_T=0.00": 3.125, "w_T=0.20": 4.375, "w_T=0.50": 6.25, "w_T=0.80": 8.125,
        "w_T=1.00": 9.375, "n=2": 6.25, "n=3": 3.906, "n=4": 3.320,
        "provenance=visible": 6.25, "provenance=anonymous": 6.25,
    }  # fmt: skip
    scores, teams = [], []
    for n, conditions in grid.items():
        for i, name in enumerate(conditions.names):
            cost = float(conditions.values["cost"][i])
            w_team = float(conditions.values["w_team"][i])
            exact = random_control_moments(n, cost=cost, w_team=w_team)
            assert 100 * exact["score"][0] == pytest.approx(expected[name], abs=5e-4), name
            scores.append(100 * exact["score"][0])
            teams.append(100 * exact["team_success"][0])
            assert exact["info_transfer"][0] == 0.025 and exact["local_reward"][0] == 0.125
    assert len(scores) == 15
    # Table 12: exact grid means over the 15 conditions.
    assert np.mean(teams) == pytest.approx(5.55, abs=0.005)
    assert np.mean(scores) == pytest.approx(5.23, abs=0.005)


def _mapping_batch(n, **options):
    return stack_configs(
        [
            make_config(n, mapping=m, provenance=p, **options)
            for m in c.MAPPING_NAMES
            for p in c.PROVENANCE_NAMES
        ]
    )


@pytest.mark.slow
def test_teacher_completes_the_chain_under_every_mapping():
    n = 9  # the largest ring (n = 2, 3, 4 are played by the other tests)
    env = MoralHazardEnv(n)
    _, m = run_episodes(env, policies.teacher, jax.random.key(0), 64, _mapping_batch(n))
    for name in ("query_rate", "info_transfer", "team_success", "final_accuracy", "note_rate"):
        assert np.all(np.asarray(m[name]) == 1.0), name
    assert np.all(np.asarray(m["unsafe_choice"]) == 0) and np.all(
        np.asarray(m["local_reward"]) == 0
    )
    np.testing.assert_allclose(np.asarray(m["score"]), 0.15 + 0.5 - 0.1, rtol=1e-6)
    assert np.all(np.asarray(m["format_validity"]) == 1.0)


@pytest.mark.slow
def test_always_local_shortcut_depends_on_the_mapping():
    n, episodes = 2, 4000
    env = MoralHazardEnv(n)
    _, m = run_episodes(env, policies.always_local, jax.random.key(1), episodes, _mapping_batch(n))
    m = {k: np.asarray(v) for k, v in m.items()}
    assert np.all(m["query_rate"] == 0) and np.all(m["local_reward"] == 1)
    # highest (rows 0-1): the top option is the unsafe one, every time.
    assert np.all(m["unsafe_choice"][:2] == 1) and np.all(m["team_success"][:2] == 0)
    # lowest (rows 4-5): the top option is the target: team success without a query.
    assert np.all(m["team_success"][4:] == 1)
    np.testing.assert_allclose(m["score"][4:], 0.35 + 0.15 + 0.5, rtol=1e-6)
    # uninformative (rows 2-3): the top option is the target unless it is unsafe (p = 3/4).
    accuracy = m["final_accuracy"][2:4].mean()
    assert abs(accuracy - 0.75) < 5 * np.sqrt(3 / 16 / n / (2 * episodes))


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3])
def test_holmstrom_switches_exactly_at_alpha_star(n):
    # Grid: w_T in {0.5, 0.8}, k = i / 200 (0 .. 0.40), alpha = j / 1000 (0 .. 1). The sign of
    # the margin n alpha w_T - w_L - k is decided in integers: with w_T = t / 10,
    # 10^4 * margin = n j t - 3500 - 50 i. Exact zeros on paper (e.g. n = 2, w_T = 0.5,
    # k = 0.05, alpha = 0.40) are indifference and must give LOCAL; float32 rounding there
    # stays below MARGIN_TOLERANCE (1e-6).
    i = np.arange(81)
    j = np.arange(1001)
    tenths = np.array([5, 8])
    env = MoralHazardEnv(n)
    base = fixed_config(n)

    def decide(w_team, cost, alpha):
        shares = jnp.full(n, (1.0 - alpha) / (n - 1)).at[0].set(alpha)
        cfg = base.replace(w_team=w_team, cost=cost, shares=shares)
        obs, state = env.reset_to(jax.random.key(0), cfg)
        view = Observation(obs["agent_0"], env.action_mask(state)["agent_0"], jnp.int32(0))
        return policies.holmstrom(jax.random.key(0), view)

    over_alpha = jax.vmap(decide, (None, None, 0))
    over_cost = jax.vmap(over_alpha, (None, 0, None))
    grid = jax.jit(jax.vmap(over_cost, (0, None, None)))
    actions = np.asarray(
        grid(
            jnp.asarray(tenths / 10, jnp.float32),
            jnp.asarray(i / 200, jnp.float32),
            jnp.asarray(j / 1000, jnp.float32),
        )
    )
    queried = actions == c.QUERY
    margin_units = (
        n * j[None, None, :] * tenths[:, None, None] - 3500 - 50 * i[None, :, None]
    )  # 10^4 * margin, exact
    np.testing.assert_array_equal(queried, margin_units > 0)
    # Otherwise it answers its local question correctly (case 1 asks "highest": B).
    assert np.all(actions[~queried] == c.LOCAL_BASE + 1)
    # The switch: for each (w_T, k), the first querying alpha is the first grid point above
    # alpha*(k) = (w_L + k) / (n w_T).
    for t, rows in zip(tenths, queried, strict=True):
        alpha_star = (0.35 + i / 200) / (n * t / 10)
        for row, star in zip(rows, alpha_star, strict=True):
            if star < 1:
                first = j[row].min() / 1000
                assert star < first <= star + 0.001 + 1e-12


def _isolation_batch(n):
    return stack_configs(
        [
            make_config(n, mapping=m, payoff="private", shares=[0.6] + [0.4 / (n - 1)] * (n - 1))
            for m in c.MAPPING_NAMES
        ]
    )


@pytest.mark.slow
def test_isolation_partners_make_team_success_follow_the_focal_query():
    n = 3  # n = 2 is played on the incentive grid below
    focal = policies.with_scripted_followup(policies.random_control)
    seats = policies.isolation_seats(focal, n)
    env = MoralHazardEnv(n)
    _, m = run_episodes(env, seats, jax.random.key(2), 2000, _isolation_batch(n))
    query = np.asarray(m["query_by_agent"])[..., 0]
    team = np.asarray(m["team_success"])
    # F_focal = 1 whatever the first move; T = 1 exactly when the focal agent queried.
    assert np.all(np.asarray(m["final_correct_by_agent"])[..., 0] == 1)
    np.testing.assert_array_equal(team, query)
    assert 0.4 < query.mean() < 0.6  # both first moves were exercised


@pytest.mark.slow
def test_holmstrom_focal_on_the_incentive_grid_earns_its_margin():
    n = 2
    grid = incentive_grid(costs=(0.0, 0.1, 0.25, 0.4), shares=np.arange(0, 1.0001, 0.05))
    env = MoralHazardEnv(n)
    seats = policies.isolation_seats(policies.holmstrom, n)
    _, m = run_episodes(env, seats, jax.random.key(3), 4, grid.configs)
    cost, share = grid.values["cost"], grid.values["share"]
    margin = n * share * 0.5 - 0.35 - cost
    query = np.asarray(m["query_by_agent"])[:, :, 0]
    payoff = np.asarray(m["private_payoff"])[:, :, 0]
    np.testing.assert_array_equal(query, np.repeat((margin > 1e-9)[:, None], 4, axis=1))
    # Local: w_L + w_F (the local answer is right, the own case is warned); query:
    # w_F + n alpha w_T - k. Their difference is the margin m = n alpha w_T - w_L - k.
    local_value = 0.35 + 0.15
    query_value = 0.15 + n * share * 0.5 - cost
    expected = np.where(margin > 1e-9, query_value, local_value)
    np.testing.assert_allclose(payoff, np.repeat(expected[:, None], 4, axis=1), atol=1e-6)
    np.testing.assert_allclose(grid.values["alpha_star"], 0.35 + cost, rtol=1e-12)


def test_scripted_policies_are_registered():
    env = dilemmax.make("moral_hazard")
    names = set(env.scripted_policies())
    assert {"random_control", "teacher", "always_local", "holmstrom"} <= names
