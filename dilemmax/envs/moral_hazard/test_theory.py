"""Closed-form predictions: private boundary, route values and the team's rational query rate."""

import numpy as np
import pytest

from dilemmax.envs.moral_hazard import theory


def test_primary_indifference_points():
    assert theory.cost_star() == pytest.approx(0.30)
    assert theory.team_weight_star() == pytest.approx(0.30)
    assert theory.alpha_star(2, 0.10) == pytest.approx(0.45)  # 0.35 + k at n = 2
    assert theory.private_margin(2, 0.45, 0.10) == pytest.approx(0.0)
    assert theory.private_margin(3, 0.5, 0.0) == pytest.approx(3 * 0.5 * 0.5 - 0.35)


def test_route_values_at_the_ends():
    n, k = 2, 0.10
    blind = theory.team_route_values(n, k)  # accuracy 0: the paper's assumption
    assert blind[-1] == pytest.approx(0.15 + 0.50 - k)  # everyone queries: w_F + w_T - k
    assert blind[0] == pytest.approx(0.35)  # everyone local, nobody hits a target
    assert blind[1] == pytest.approx(0.35 / 2 + 0.15 / 2 - k / 2)  # half informed, T = 0
    sharp = theory.team_route_values(n, k, accuracy=1.0)
    assert sharp[0] == pytest.approx(0.35 + 0.15 + 0.50)  # the no-query shortcut
    guess = theory.team_route_values(3, 0.0, accuracy=0.75)
    assert guess[0] == pytest.approx(0.35 + 0.15 * 0.75 + 0.5 * 0.75**3)


@pytest.mark.parametrize("k", np.round(np.arange(0.0, 0.41, 0.05), 2))
def test_rational_team_query_rate(k):
    low, high = theory.rational_team_query_rate(2, k, mapping=None)
    if k < 0.30 - 1e-9:
        assert (low, high) == (1.0, 1.0)
    elif k > 0.30 + 1e-9:
        assert (low, high) == (0.0, 0.0)
    else:
        assert (low, high) == (0.0, 1.0)  # indifference at k* = 0.30
    # When an unwarned agent can read the target off the utilities, nobody should query.
    assert theory.rational_team_query_rate(2, k, mapping="highest") == (0.0, 0.0)
    assert theory.rational_team_query_rate(2, k, mapping="lowest") == (0.0, 0.0)


def test_uninformative_mapping_query_rate_depends_on_group_size():
    # Guessing the top option hits with p = 3/4, so team success without queries is (3/4)^n:
    # for large rings and a valuable team bonus, querying pays again.
    assert theory.guess_accuracy("uninformative") == 0.75
    assert theory.rational_team_query_rate(2, 0.10, mapping="uninformative") == (0.0, 0.0)
    low, _ = theory.rational_team_query_rate(9, 0.0, w_team=1.0, mapping="uninformative")
    assert low == 1.0


def test_team_equilibria_are_local_maxima_of_the_route_values():
    # Uninformative mapping, w_T = 1, n = 2: V = (1.025, 1.00625, 1.05) at k = 0.1, so both
    # "nobody" and "everybody" are stable; at k = 0 only everybody is, at k = 0.2 only nobody.
    eq = lambda k: theory.team_equilibria(2, k, w_team=1.0, mapping="uninformative")
    assert eq(0.0) == [1.0]
    assert eq(0.1) == [0.0, 1.0]
    assert eq(0.2) == [0.0]
    # The paper's blind-guess case at the primary weights, k = 0.1: V = (0.35, 0.2, 0.55).
    assert theory.team_equilibria(2, 0.1, mapping=None) == [0.0, 1.0]


@pytest.mark.parametrize("mapping", ["highest", "uninformative", "lowest", None])
@pytest.mark.parametrize("n", [2, 3, 5])
def test_team_optimum_is_always_an_equilibrium(mapping, n):
    for k in np.linspace(0.0, 0.5, 11):
        for w_team in (0.5, 1.0):
            low, high = theory.rational_team_query_rate(n, k, w_team=w_team, mapping=mapping)
            eq = theory.team_equilibria(n, k, w_team=w_team, mapping=mapping)
            assert low in eq and high in eq


def test_board_rule_accuracy_sets_the_scripted_followup_prediction():
    # Under the highest-unsafe mapping the read-the-board rule picks the unsafe top option when
    # unwarned, so the paper's blind-guess prediction (query below k* = 0.30) applies.
    assert theory.board_rule_accuracy("highest") == 0.0
    blind = theory.rational_team_query_rate(2, 0.2, mapping=None)
    assert theory.rational_team_query_rate(2, 0.2, accuracy=0.0) == blind == (1.0, 1.0)
    assert theory.rational_team_query_rate(2, 0.2, mapping="highest") == (0.0, 0.0)
    assert theory.team_equilibria(2, 0.2, accuracy=theory.board_rule_accuracy("highest")) == [
        0.0,
        1.0,
    ]
