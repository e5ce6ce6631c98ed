"""Configuration and state of the Dialogue Moral Hazard Game (flax struct dataclasses).

Shapes use ``n`` for the number of agents (static) and ``4`` for the options A-D of a case.
Agent ``i`` owns case ``i``; its successor on the ring is ``(i + 1) mod n`` (the paper numbers
agents from 1, so its sigma(i) = (i mod n) + 1 is the same ring).
"""

from __future__ import annotations

import jax
from flax import struct


@struct.dataclass
class MoralHazardConfig:
    """One condition of the game and, unless ``sample_cases``, the cases of one episode.

    A batch of configs (leading axis C on every leaf) is a grid of conditions that runs as one
    ``jax.vmap``. Everything is an array; the reward mode is a traced flag.

    Attributes:
        utilities: int32[n, 4], public utility of each option, four distinct values in 2..13.
        unsafe: int32[n], the hidden unsafe option h_i of each case (0..3).
        question: int32[n], the public local question of each case: 0 = name the highest-utility
            option, 1 = name the lowest-utility option.
        mapping: int32[], how unsafe options are placed when cases are drawn: 0 = the
            highest-utility option (primary), 1 = uniformly at random (utility carries no
            information about safety), 2 = the lowest-utility option.
        sample_cases: bool[], True: ``reset_to`` draws fresh utilities, questions and unsafe
            options (by ``mapping``) from its key, so one condition yields a new instance per
            episode; False: the cases above are played as given.
        provenance_visible: bool[], notes on the board show their poster (the ablation) or not.
        w_local: float32[], w_L, weight of the local point.
        w_final: float32[], w_F, weight of a correct final choice.
        w_team: float32[], w_T, weight of team success.
        cost: float32[], k, the query cost.
        shares: float32[n], alpha_i, each agent's share of the team-success value (sums to 1);
            used by the private reward mode and shown to agents as part of their contract.
        private_reward: bool[], False: every agent is paid R_game (team mode); True: agent i is
            paid U_i = w_L L_i + w_F F_i + n alpha_i w_T T - k Q_i (incentive isolation).
    """

    utilities: jax.Array
    unsafe: jax.Array
    question: jax.Array
    mapping: jax.Array
    sample_cases: jax.Array
    provenance_visible: jax.Array
    w_local: jax.Array
    w_final: jax.Array
    w_team: jax.Array
    cost: jax.Array
    shares: jax.Array
    private_reward: jax.Array

    @property
    def num_agents(self) -> int:
        return self.utilities.shape[-2]


@struct.dataclass
class MoralHazardState:
    """The state of one episode.

    Attributes:
        config: the episode's configuration (with the cases actually played).
        stage: int32[], 0 work, 1 note, 2 final, 3 done.
        chose_local: bool[n], e_i = 0 taken as a valid LOCAL move.
        local_label: int32[n], the label answered with LOCAL (0..3), -1 if none.
        queried: bool[n], e_i = 1.
        note_case: int32[n], the (absolute) case named by agent i's note, -1 if none.
        note_option: int32[n], the option named by agent i's note, -1 if none.
        final_label: int32[n], the final choice a_i (0..3), -1 if none was made.
    """

    config: MoralHazardConfig
    stage: jax.Array
    chose_local: jax.Array
    local_label: jax.Array
    queried: jax.Array
    note_case: jax.Array
    note_option: jax.Array
    final_label: jax.Array
