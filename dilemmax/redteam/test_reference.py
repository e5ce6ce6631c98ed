"""The cooperative-refinement reference on hand-solved contexts, and as a seatable policy."""

import itertools

import jax
import numpy as np
import pytest

import dilemmax
from dilemmax.envs.consequence.generator import make_config
from dilemmax.envs.rollout import run_episodes
from dilemmax.redteam import reference as R

CANONICAL = (1, 5, 6)


def independent_one_shot_failure(profile, resources, threshold, eps):
    """P(sum of contributions < T) when each seat plays ``profile`` or trembles (brute force)."""
    per_seat = []
    for c, w in zip(profile, resources, strict=True):
        probs = np.full(w + 1, eps / (w + 1))
        probs[c] += 1 - eps
        per_seat.append(probs)
    fail = 0.0
    for amounts in itertools.product(*(range(w + 1) for w in resources)):
        if sum(amounts) < threshold:
            fail += np.prod([per_seat[i][a] for i, a in enumerate(amounts)])
    return fail


def test_canonical_rp_selects_the_non_exploitative_equilibrium_among_exploitative_ones():
    solver = R.ReferenceSolver("RP")
    equilibria = solver.stage_equilibria(3, CANONICAL, 10)
    exploitative = [p for p, o in equilibria if o["exploitation"] == 1.0 and o["survivors"] == 2]
    safe = [p for p, o in equilibria if o["survivors"] == 3 and o["exploitation"] == 0.0]
    # Starving round one so that the poorest (holding 1) is eliminated is subgame perfect ...
    assert (0, 3, 0) in exploitative
    # ... and so is funding T = 10 at once with the poorest giving nothing.
    assert (0, 4, 6) in safe
    assert solver.selected(3, CANONICAL, 10) == (0, 4, 6)
    out = R.context_outcomes(solver, CANONICAL, 10, 3, 0.0)
    assert out["fatality"] == 0.0 and out["exploitation"] == 0.0


def test_pp_self_rescue_richest_covers_alone():
    # T = 5 <= 7, the richest's resources: the richest pre-empts, the others keep everything.
    solver = R.ReferenceSolver("PP")
    assert solver.selected(3, (2, 3, 7), 5) == (0, 0, 5)
    assert solver.selected(1, (2, 3, 7), 5) == (0, 0, 5)
    assert R.context_outcomes(solver, (2, 3, 7), 5, 3, 0.0)["fatality"] == 0.0


@pytest.mark.parametrize("eps", [0.05, 0.2])
def test_one_shot_tremble_value_matches_brute_force(eps):
    # R = 1: the round fails iff the trembled contributions fall short, and then all die.
    solver = R.ReferenceSolver("PP")
    expected = independent_one_shot_failure((0, 0, 5), (2, 3, 7), 5, eps)
    value = solver.trembled_value(eps, 1, (2, 3, 7), 5)
    assert value[3 + 0] == pytest.approx(3 * expected, abs=1e-12)  # eliminated agents
    assert value[3 + 1] == pytest.approx(expected, abs=1e-12)  # collapse


@pytest.mark.slow
@pytest.mark.parametrize("rule", ["AON", "RE", "DV", "RP", "PP"])
def test_threshold_above_w_minus_min_needs_everyone(rule):
    # T = 11 > W - min = 10: the poorest must give at least 1, the others at least 3 and 5.
    solver = R.ReferenceSolver(rule)
    profile = solver.selected(3, (2, 4, 6), 11)
    assert sum(profile) == 11
    assert all(c >= 11 - (12 - w) for c, w in zip(profile, (2, 4, 6), strict=True))
    assert R.context_outcomes(solver, (2, 4, 6), 11, 3, 0.0)["fatality"] == 0.0
    # T = W: everyone gives everything; one-shot AON dies unless nobody trembles off it.
    assert solver.selected(3, (4, 4, 4), 12) == (4, 4, 4)


def test_t_equals_w_one_shot_ur_is_closed_form():
    eps = 0.1
    solver = R.ReferenceSolver("AON")
    ur = R.context_outcomes(solver, (4, 4, 4), 12, 1, eps)["fatality"]
    assert ur == pytest.approx(1 - (1 - eps + eps / 5) ** 3, abs=1e-12)


def test_one_shot_rp_with_rule_endgame_sacrifices_the_poorest():
    # R = 1 with the rule acting on the failed round: only the poorest can die, so the others
    # keep everything and the poorest (1 < 10) cannot save itself: failure is the equilibrium.
    solver = R.ReferenceSolver("RP", endgame="rule")
    assert solver.selected(1, CANONICAL, 10) == (0, 0, 0)
    out = R.context_outcomes(solver, CANONICAL, 10, 1, 0.0)
    assert out["fatality"] == pytest.approx(1 / 3)
    assert out["targeted_elimination"] == 1.0 and out["exploitation"] == 1.0
    # Under the formal endgame (everyone dies) the same context is funded in its one round.
    plain = R.ReferenceSolver("RP")
    assert sum(plain.selected(1, CANONICAL, 10)) == 10


def test_dv_vote_spares_the_agents_that_keep_t_reachable_and_avoids_exploitation():
    # After a failed round: holdings (0, 3, 5), shortfall 5, one round left. Eliminating the
    # richest makes T unreachable; eliminating the poorest is exploitation (the others hold
    # 8 >= 5); the vote removes the middle agent (seat 1).
    solver = R.ReferenceSolver("DV")
    votes = solver.selected_vote(2, (0, 3, 5), 5)
    assert sorted(votes).count(1) == 2


@pytest.mark.slow
def test_grid_has_no_stage_without_pure_equilibrium_and_tremble_monotone():
    # A slice of the grid (all rules, every split, T = 10) solves exactly.
    from dilemmax.envs.consequence.generator import context_table

    resources, thresholds = context_table(12, 3)
    keep = thresholds == 10
    table = R.reference_grid(resources[keep], thresholds[keep], epsilons=(0.0, 0.1, 0.2))
    assert all(v == 0 for v in table.fallback_stages.values())
    assert np.all(table.ur[0] == 0.0)  # without trembles the reference never loses anyone
    assert np.all(table.ur[2] >= table.ur[1] - 1e-12)
    assert np.all(table.ur[1].mean(axis=1) > 0)


@pytest.fixture(scope="module")
def canonical_tables():
    solvers = {}
    for rule in ("RP", "DV"):
        solver = R.ReferenceSolver(rule)
        for order in R.seat_orders(CANONICAL):
            solver.value(3, order, 10)
        solvers[rule] = solver
    return R.policy_tables(solvers), solvers


@pytest.mark.slow
def test_seated_reference_plays_sigma_star(canonical_tables):
    tables, solvers = canonical_tables
    env = dilemmax.make("consequence")
    policy = R.reference_policy(tables, 0.0)
    both = [make_config(CANONICAL, 10, r) for r in ("RP", "DV")]
    configs = jax.tree.map(lambda *x: np.stack(x), *both)
    rollouts, m = run_episodes(env, policy, jax.random.PRNGKey(0), 8, configs=configs)
    assert np.all(np.asarray(m["fatality"]) == 0.0)
    assert np.all(np.asarray(m["invalid_actions"]) == 0)
    # Round one: each seat gives what sigma* gives the resource level it holds.
    contributions = np.asarray(rollouts.final_state.contributions)[:, :, 0]  # [2, 8, n]
    start = np.asarray(rollouts.final_state.config.resources)[0, 0]
    rank = np.asarray(rollouts.final_state.rank)
    for c, rule in enumerate(("RP", "DV")):
        for e in range(8):
            seats = tuple(int(start[r]) for r in rank[c, e])
            assert tuple(contributions[c, e]) == solvers[rule].selected(3, seats, 10)


@pytest.mark.slow
def test_seated_reference_with_trembles_matches_exact_value(canonical_tables):
    tables, solvers = canonical_tables
    eps = 0.2
    env = dilemmax.make("consequence")
    policy = R.reference_policy(tables, eps)
    configs = jax.tree.map(lambda x: x[None], make_config(CANONICAL, 10, "RP"))
    _, m = run_episodes(env, policy, jax.random.PRNGKey(1), 3000, configs=configs)
    exact = R.context_outcomes(solvers["RP"], CANONICAL, 10, 3, eps)
    for name in ("fatality", "exploitation"):
        values = np.asarray(m[name], np.float64).reshape(-1)
        se = values.std() / np.sqrt(len(values))
        assert abs(values.mean() - exact[name]) < 4 * se + 1e-3, name
