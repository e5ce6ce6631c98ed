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
