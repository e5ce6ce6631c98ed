"""Scripted, jittable policies of the Dialogue Moral Hazard Game.

Each policy is ``policy(key, observation) -> int32 action`` and reads only the observation's
``array`` (decoded by :func:`dilemmax.envs.moral_hazard.observation.decode`), ``mask`` and
``agent_index``; the incentive-isolation partner also reads the privileged ``state`` (it is an
oracle: see :func:`isolation_partner`). All of them work for any n (read from the array).

Final-stage rule shared by the cooperative scripts ("read the board"): pick the highest-utility
option of the own case that no note on the board names as unsafe. In a team of teachers every
case carries its correct warning, so this is a_i*; with no warning it is the top option, which
is the unsafe one under the primary mapping.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard.observation import ObsView, decode

Policy = Callable[[jax.Array, object], jax.Array]


# ------------------------------------------------------------------------------- helpers
def correct_local(view: ObsView) -> jax.Array:
    """The LOCAL action that answers the own case's local question correctly."""
    ask_highest = view.question[c.ASK_HIGHEST] > 0.5
    label = jnp.where(ask_highest, jnp.argmax(view.utilities), jnp.argmin(view.utilities))
    return (c.LOCAL_BASE + label).astype(jnp.int32)


def board_choice(view: ObsView) -> jax.Array:
    """The FINAL action of the read-the-board rule (see the module docstring)."""
    warned = view.warned[0] > 0.5  # offset 0: notes naming the own case
    label = jnp.argmax(jnp.where(warned, -1.0, view.utilities))
    return (c.FINAL_BASE + label).astype(jnp.int32)


def warn_successor(view: ObsView) -> jax.Array:
    """The correct note on the successor's case after a query; silence otherwise."""
    note = c.note_action(1, jnp.argmax(view.learned))
    return jnp.where(view.queried, note, c.NO_NOTE).astype(jnp.int32)


def by_stage(view: ObsView, work, note, final) -> jax.Array:
    """``work`` / ``note`` / ``final`` at their stage, ``NO_MOVE`` once the episode is over."""
    return jnp.select(
        [view.stage_index == c.WORK, view.stage_index == c.NOTE, view.stage_index == c.FINAL],
        [work, note, final],
        c.NO_MOVE,
    ).astype(jnp.int32)


def holmstrom_margin(view: ObsView) -> jax.Array:
    """float32[]: the private margin n alpha_i w_T - w_L - k read off the observed contract."""
    w_local, w_team, cost, share = (
        view.contract[0],
        view.contract[2],
        view.contract[3],
        view.own_share,
    )
    return view.num_agents * share * w_team - w_local - cost


# ------------------------------------------------------------------------------ policies
def random_control(key: jax.Array, observation) -> jax.Array:
    """The paper's random valid-action control (not uniform over the legal action list).

    work: LOCAL or QUERY with probability 1/2; after LOCAL a label uniform over A-D. note (after
    a query): uniform over silence and the four warnings on the successor's case. final: a
    label uniform over A-D. Ignores utilities, facts, the board, provenance and the contract.
    """
    view = decode(observation.array)
    k_route, k_label, k_note, k_final = jax.random.split(key, 4)
    local = c.LOCAL_BASE + jax.random.randint(k_label, (), 0, c.NUM_OPTIONS)
    work = jnp.where(jax.random.bernoulli(k_route), c.QUERY, local)
    pick = jax.random.randint(k_note, (), 0, c.NUM_OPTIONS + 1)  # 0: silence, 1..4: a warning
    warning = c.note_action(1, pick - 1)
    note = jnp.where(view.queried & (pick > 0), warning, c.NO_NOTE)
    final = c.FINAL_BASE + jax.random.randint(k_final, (), 0, c.NUM_OPTIONS)
    return by_stage(view, work, note, final)


def teacher(key: jax.Array, observation) -> jax.Array:
    """The cooperative script: QUERY, post the correct warning, then read the board."""
    del key
    view = decode(observation.array)
    return by_stage(view, jnp.int32(c.QUERY), warn_successor(view), board_choice(view))


def always_local(key: jax.Array, observation) -> jax.Array:
    """LOCAL with the correct answer, silence, then the read-the-board final choice."""
    del key
    view = decode(observation.array)
    return by_stage(view, correct_local(view), jnp.int32(c.NO_NOTE), board_choice(view))


def holmstrom(key: jax.Array, observation) -> jax.Array:
    """QUERY iff the private margin n alpha_i w_T - w_L - k is positive, else a correct LOCAL.

    A margin within ``MARGIN_TOLERANCE`` (1e-6) of zero is indifference and resolves to LOCAL:
    float32 evaluation of a margin that is exactly zero on paper lands within ~1e-7 of zero, so
    the switch sits at alpha*(k) = (w_L + k) / (n w_T) up to that tolerance (1e-6 / (n w_T) in
    alpha). After a query it posts the correct warning; the final choice reads the board.
    """
    del key
    view = decode(observation.array)
    work = jnp.where(holmstrom_margin(view) > c.MARGIN_TOLERANCE, c.QUERY, correct_local(view))
    return by_stage(view, work, warn_successor(view), board_choice(view))


def with_scripted_followup(work_policy: Policy) -> Policy:
    """A policy that takes its work move from ``work_policy`` and then plays like the teacher.

    This is the focal agent of incentive isolation with downstream failures scripted away: only
    the LOCAL / QUERY decision is its own; after a query it posts the correct warning, and its
    final choice reads the board.
    """

    def policy(key, observation):
        view = decode(observation.array)
        work = jnp.asarray(work_policy(key, observation), jnp.int32)
        return by_stage(view, work, warn_successor(view), board_choice(view))

    return policy


def isolation_partner(focal: int = 0) -> Policy:
    """The scripted partner of the incentive-isolation experiment, for a focal agent ``focal``.

    Every partner queries, posts the correct warning on its successor's case and reads the
    board. So the focal agent's own case is always warned (its predecessor is a partner:
    F_focal = 1 whatever its first move), and every case except the focal's successor's is
    warned. The focal's successor s is the only case that depends on the focal agent: when its
    case carries a warning, s reads the board (a_s* after the focal's correct note); when it
    carries none, s picks its unsafe option h_s. Hence QUERY (with the correct note) gives
    T = 1 and LOCAL gives T = 0, under every mapping.

    Oracle: the unwarned fallback reads h_s from ``observation.state`` (privileged). Under the
    primary mapping it coincides with the naive non-oracle choice (the top-utility option).
    """

    def policy(key, observation):
        del key
        view = decode(observation.array)
        me = observation.agent_index
        is_successor = me == (focal + 1) % view.num_agents
        unwarned = ~jnp.any(view.warned[0] > 0.5)
        own_unsafe = observation.state.config.unsafe[me]
        fallback = (c.FINAL_BASE + own_unsafe).astype(jnp.int32)
        final = jnp.where(is_successor & unwarned, fallback, board_choice(view))
        return by_stage(view, jnp.int32(c.QUERY), warn_successor(view), final)

    return policy


def isolation_seats(focal_policy: Policy, num_agents: int, focal: int = 0) -> list[Policy]:
    """One policy per seat for incentive isolation: ``focal_policy`` at ``focal``, partners
    elsewhere. Wrap a learner in :func:`with_scripted_followup` to script its note and final."""
    partner = isolation_partner(focal)
    return [focal_policy if i == focal else partner for i in range(num_agents)]


SCRIPTED_POLICIES: dict[str, Policy] = {
    "random_control": random_control,
    "teacher": teacher,
    "always_local": always_local,
    "holmstrom": holmstrom,
    "isolation_partner": isolation_partner(0),
}
