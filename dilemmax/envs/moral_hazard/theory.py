"""Closed-form predictions for rational play: the private margin and the team's best route.

These are what learned agents are compared against (issue 6): the private-share boundary of
incentive isolation, and the query rate that maximises the team score given what an agent can
infer without a warning.
"""

from __future__ import annotations

import numpy as np

from dilemmax.envs.moral_hazard import constants as c


def private_margin(num_agents, share, cost, w_local=c.PRIMARY_W_LOCAL, w_team=c.PRIMARY_W_TEAM):
    """m_i = n alpha_i w_T - w_L - k: U_i(QUERY) - U_i(LOCAL) when partners are scripted so that
    F_i = 1 either way, a query yields T = 1 and LOCAL yields T = 0 (the paper's Eq. 4)."""
    return num_agents * share * w_team - w_local - cost


def alpha_star(num_agents, cost, w_local=c.PRIMARY_W_LOCAL, w_team=c.PRIMARY_W_TEAM):
    """The private indifference share alpha*(k) = (w_L + k) / (n w_T) (0.35 + k at n = 2)."""
    return (w_local + cost) / (num_agents * w_team)


def cost_star(w_local=c.PRIMARY_W_LOCAL, w_final=c.PRIMARY_W_FINAL, w_team=c.PRIMARY_W_TEAM):
    """k* = w_F + w_T - w_L: all-query versus all-local when an unwarned agent always misses."""
    return w_final + w_team - w_local


def team_weight_star(cost=c.PRIMARY_COST, w_local=c.PRIMARY_W_LOCAL, w_final=c.PRIMARY_W_FINAL):
    """w_T* = w_L + k - w_F, the same comparison along the team-reward axis."""
    return w_local + cost - w_final


def guess_accuracy(mapping: str) -> float:
    """Probability that an agent with no warning hits a_i* with its best guess from utilities.

    highest: the unsafe option is the top one, so the second-highest is the target (1.0);
    lowest: the top option is the target (1.0); uninformative: the unsafe option is uniform, so
    the top option is the target unless it is the unsafe one (3/4, the best any guess can do).
    The paper's k* and w_T* assume 0 (an unwarned agent cannot find the target).
    """
    return {"highest": 1.0, "uninformative": 0.75, "lowest": 1.0}[mapping]


def board_rule_accuracy(mapping: str) -> float:
    """Hit probability of the read-the-board rule (``policies.board_choice``) with no warning.

    The rule picks the top-utility option unless a note names it: right under the lowest-unsafe
    mapping (1.0), wrong under the highest-unsafe one (0.0, the paper's assumption), right
    unless the top option is the unsafe one under the uninformative mapping (3/4).
    """
    return {"highest": 0.0, "uninformative": 0.75, "lowest": 1.0}[mapping]


def team_route_values(
    num_agents: int,
    cost: float = c.PRIMARY_COST,
    w_local: float = c.PRIMARY_W_LOCAL,
    w_final: float = c.PRIMARY_W_FINAL,
    w_team: float = c.PRIMARY_W_TEAM,
    accuracy: float = 0.0,
) -> np.ndarray:
    """float64[n + 1]: expected R_game when m = 0..n agents query and everyone else plays well.

    Queriers warn their successors correctly, so m distinct cases are informed and their owners
    pick a_i*; the other n - m agents answer the local question correctly and the n - m
    uninformed owners hit the target with probability ``accuracy`` each (independently):

        V(m) = w_L (n - m) / n + w_F (m + (n - m) a) / n + w_T a^(n - m) - k m / n.
    """
    n = int(num_agents)
    m = np.arange(n + 1)
    a = float(accuracy)
    return (
        w_local * (n - m) / n
        + w_final * (m + (n - m) * a) / n
        + w_team * a ** (n - m)
        - cost * m / n
    )


def _route_values(num_agents, cost, w_local, w_final, w_team, mapping, accuracy=None):
    """V(m) with ``accuracy``, else the guess accuracy of ``mapping`` (None: the paper's 0)."""
    if accuracy is None:
        accuracy = 0.0 if mapping is None else guess_accuracy(mapping)
    return team_route_values(num_agents, cost, w_local, w_final, w_team, accuracy)


def rational_team_query_rate(
    num_agents: int,
    cost: float = c.PRIMARY_COST,
    w_local: float = c.PRIMARY_W_LOCAL,
    w_final: float = c.PRIMARY_W_FINAL,
    w_team: float = c.PRIMARY_W_TEAM,
    mapping: str | None = "highest",
    atol: float = 1e-9,
    accuracy: float | None = None,
) -> tuple[float, float]:
    """The query rate(s) of the team-optimal profile under the team reward R_game.

    Every agent is paid R_game, so the profile that maximises V(m) (:func:`team_route_values`)
    is what a team of rational learners converges to at best. ``mapping`` sets how well an
    unwarned agent can guess (:func:`guess_accuracy`); ``None`` uses the paper's assumption that
    it cannot (accuracy 0, giving the k* = w_F + w_T - w_L switch); ``accuracy`` overrides both
    (say :func:`board_rule_accuracy` when unwarned agents follow the read-the-board rule).

    Returns:
        (low, high): the smallest and largest optimal m / n; they differ only at indifference.
    """
    values = _route_values(num_agents, cost, w_local, w_final, w_team, mapping, accuracy)
    best = np.flatnonzero(values >= values.max() - atol)
    return best.min() / num_agents, best.max() / num_agents


def team_equilibria(
    num_agents: int,
    cost: float = c.PRIMARY_COST,
    w_local: float = c.PRIMARY_W_LOCAL,
    w_final: float = c.PRIMARY_W_FINAL,
    w_team: float = c.PRIMARY_W_TEAM,
    mapping: str | None = "highest",
    atol: float = 1e-9,
    accuracy: float | None = None,
) -> list[float]:
    """The query rates m / n of the pure Nash equilibria of the work decision under R_game.

    The warnings and final choices are taken as played well (as in :func:`team_route_values`;
    ``mapping`` and ``accuracy`` as in :func:`rational_team_query_rate`); only the LOCAL / QUERY
    move is strategic. Everyone is paid the same V(m), so a querier who
    stops moves the team to V(m - 1) and a local answerer who starts moves it to V(m + 1): a
    profile with m queriers is an equilibrium exactly when V(m) is a local maximum over m. The
    team optimum (:func:`rational_team_query_rate`) is always one of them; when V dips in
    between, "nobody queries" can be another, and independent learners may settle on either.

    When the notes and final choices are learned too, "nobody queries, nobody reads the board"
    is an equilibrium of the whole game for every k >= 0 (a babbling equilibrium: an unread
    warning is worth nothing, so a query only forgoes w_L), whatever this function returns.
    """
    values = _route_values(num_agents, cost, w_local, w_final, w_team, mapping, accuracy)
    stable = [
        m
        for m in range(num_agents + 1)
        if (m == 0 or values[m] >= values[m - 1] - atol)
        and (m == num_agents or values[m] >= values[m + 1] - atol)
    ]
    return [m / num_agents for m in stable]
