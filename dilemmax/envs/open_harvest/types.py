"""State, configuration and layout of OpenHarvest (flax struct dataclasses of arrays).

Shapes use ``A`` agents, ``T`` = 64 tree cells, ``S`` = 20 spawn cells, ``K`` = 12 neighbourhood
slots, ``H x W`` = 16 x 22 map, ``C`` = 5 colours, ``G`` = 3 stages, ``P`` = 6 patches.

Apples live on trees, so the orchard is stored per tree (``[T]`` arrays) rather than per map
cell: each step touches 64 entries instead of 352, and a tree's 12-cell neighbourhood is a
precomputed table of tree indices.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from dilemmax.envs.open_harvest import constants as c


@struct.dataclass
class OpenHarvestLayout:
    """One map of the layout pool.

    Attributes:
        tree_positions: int32[T, 2], (row, col) of each tree cell; trees of patch p are the
            contiguous block ``tree_patch == p`` (patches in the order of ``PATCH_SIZES``).
        tree_patch: int32[T], the patch of each tree.
        neighbours: int32[T, K], the trees within Manhattan distance 1-2 of each tree; unused
            slots hold ``T`` (a padding index that always reads "no apple").
        tree_index: int32[H, W], the tree on each cell, or -1.
        walls: bool[H, W], impassable cells (the generator's maps have none inside; off-map
            cells are walls in every view).
        spawn_points: int32[S, 2], the cells agents start on and are zapped back to.
        spawn_row: int32[], the row of the spawn cells.
        patch_turns: int32[P], how many quarter turns each patch shape was rotated by.
    """

    tree_positions: jax.Array
    tree_patch: jax.Array
    neighbours: jax.Array
    tree_index: jax.Array
    walls: jax.Array
    spawn_points: jax.Array
    spawn_row: jax.Array
    patch_turns: jax.Array


@struct.dataclass
class OpenHarvestRule:
    """One hidden rule of the rule pool.

    Attributes:
        pay_perm: int32[C], per colour a row of ``STAGE_PERMUTATIONS``: stage g pays
            ``PAY_LEVELS[STAGE_PERMUTATIONS[pay_perm[colour], g]]``.
        regrowth_perm: int32[C], per colour a row of ``STAGE_PERMUTATIONS`` for the regrowth
            multiplier of a cell whose apple was eaten at stage g.
    """

    pay_perm: jax.Array
    regrowth_perm: jax.Array


@struct.dataclass
class OpenHarvestConfig:
    """The latent configuration of an episode, fixed across its trials.

    The pay and multiplier tables are carried as values (derived from ``rule`` by the generator)
    so a sweep can also set them directly; the dynamics read only the values.

    Attributes:
        layout: the map.
        rule: the hidden rule's permutation indices (its identity).
        patch_colours: int32[P], colour of each patch (drawn with replacement).
        pay: float32[C, G], points paid by an apple of colour c eaten at stage g.
        regrowth_multiplier: float32[C, G], factor on the base regrowth probability of a cell of
            colour c whose apple was eaten at stage g.
        base_regrowth: float32[4], base regrowth probability by min(n, 3) apples nearby.
        stage_length_min, stage_length_max: int32[], inclusive range of an apple's stage length.
        rot_regrow_min, rot_regrow_max: int32[], inclusive range of a rotted cell's delay.
        freeze_steps: int32[], steps a zapped agent cannot act.
        zap_cooldown: int32[], steps after firing during which the beam cannot fire.
    """

    layout: OpenHarvestLayout
    rule: OpenHarvestRule
    patch_colours: jax.Array
    pay: jax.Array
    regrowth_multiplier: jax.Array
    base_regrowth: jax.Array
    stage_length_min: jax.Array
    stage_length_max: jax.Array
    rot_regrow_min: jax.Array
    rot_regrow_max: jax.Array
    freeze_steps: jax.Array
    zap_cooldown: jax.Array

    @property
    def tree_colour(self) -> jax.Array:
        """int32[T]: the colour of each tree (its patch's colour)."""
        return self.patch_colours[self.layout.tree_patch]

    @property
    def best_stage(self) -> jax.Array:
        """int32[C]: the stage that pays most for each colour."""
        return jnp.argmax(self.pay, axis=-1).astype(jnp.int32)


@struct.dataclass
class Orchard:
    """The trees of one map.

    Attributes:
        apple: bool[T], an apple hangs on the tree.
        age: int32[T], steps since the apple appeared (meaningful where ``apple``).
        stage_length: int32[T], the apple's stage length; stage = min(age // length, 2).
        eaten_stage: int32[T], the stage at which the cell's last apple was eaten (sets its
            regrowth multiplier); -1 when the cell's apple rotted or it has never been eaten.
        regrow_timer: int32[T], steps until a ROTTED cell grows its new apple (0 = not waiting).
    """

    apple: jax.Array
    age: jax.Array
    stage_length: jax.Array
    eaten_stage: jax.Array
    regrow_timer: jax.Array

    @property
    def stage(self) -> jax.Array:
        """int32[T]: the ripeness stage of each tree's apple (meaningful where ``apple``)."""
        return jnp.minimum(self.age // self.stage_length, c.NUM_STAGES - 1).astype(jnp.int32)


@struct.dataclass
class TrialStarts:
    """Where every trial of the episode starts, drawn once at reset so a step never spends
    random numbers on a reset it rarely needs (``K`` trials).

    Attributes:
        agent_pos: int32[K, A, 2], distinct spawn cells.
        agent_dir: int32[K, A], orientations.
        stage_length: int32[K, T], the stage lengths of the apples laid at each trial start.
    """

    agent_pos: jax.Array
    agent_dir: jax.Array
    stage_length: jax.Array


@struct.dataclass
class OpenHarvestState:
    """The full state of an OpenHarvest episode.

    Attributes:
        config: the episode's configuration.
        agent_pos: int32[A, 2], (row, col).
        agent_dir: int32[A], orientation (NORTH=0, EAST=1, SOUTH=2, WEST=3).
        frozen: int32[A], steps the agent still cannot act (0 = free).
        cooldown: int32[A], steps before the agent's beam can fire again (0 = ready).
        orchard: the trees (:class:`Orchard`).
        trial: int32[], the current trial (0-based).
        trial_step: int32[], steps played in the current trial.
        time: int32[], steps played in the episode.
        trial_return: float32[A], points earned this trial.
        trial_eaten: int32[A], apples eaten this trial.
        last_action: int32[A], the action each agent actually took on the last step (an illegal
            or frozen agent's action counts as STAY).
        last_ate_colour, last_ate_stage: int32[A], what the agent ate on the last step (-1 none).
        last_pay: float32[A], what that apple paid (0 if none).
        last_hit_by: int32[A], the agent whose beam sent this one to spawn on the last step (the
            lowest index if several), or -1.
        known_pay: bool[A, C, G], colour-stage pairs the agent has eaten this episode (what it
            can know of the pay rule).
        done: bool[], the episode is over.
        starts: the pre-drawn trial starts (:class:`TrialStarts`).
    """

    config: OpenHarvestConfig
    agent_pos: jax.Array
    agent_dir: jax.Array
    frozen: jax.Array
    cooldown: jax.Array
    orchard: Orchard
    trial: jax.Array
    trial_step: jax.Array
    time: jax.Array
    trial_return: jax.Array
    trial_eaten: jax.Array
    last_action: jax.Array
    last_ate_colour: jax.Array
    last_ate_stage: jax.Array
    last_pay: jax.Array
    last_hit_by: jax.Array
    known_pay: jax.Array
    done: jax.Array
    starts: TrialStarts
