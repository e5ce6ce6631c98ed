"""State, configuration and layout dataclasses of OpenCleanup.

``A`` is the number of agents, ``H x W`` the grid. Every field is an array (a pytree leaf), so a
batch of configurations or states is the same dataclass with a leading batch axis.
"""

from __future__ import annotations

import jax
from flax import struct


@struct.dataclass
class OpenCleanupLayout:
    """One map of the layout pool (cells as ``(row, col)``).

    Attributes:
        river: int32[32, 2]; the first 26 cells start polluted, the last 6 start as water. Waste
            lives and reappears only on these cells.
        stream: int32[5, 2], always water (part of the river for the pollution share).
        orchard: int32[48, 2], where apples grow.
        stations: int32[8, 2], in chain order.
        station_tools: int32[8], the base tool (0..3) of each station.
        spawns: int32[7, 2], where agents start each trial.
    """

    river: jax.Array
    stream: jax.Array
    orchard: jax.Array
    stations: jax.Array
    station_tools: jax.Array
    spawns: jax.Array


@struct.dataclass
class OpenCleanupRule:
    """The hidden recipes: which ordered pick-up pair makes which working tool.

    Attributes:
        effect_pairs: int32[7], the pair index (``first * 4 + second``) of each effect: effects
            0..4 clear light waste of hue 0..4, effect 5 turns mid waste into light, effect 6 turns
            dark waste into mid. The seven pairs are distinct.
    """

    effect_pairs: jax.Array


@struct.dataclass
class OpenCleanupConfig:
    """The latent configuration of an episode (fixed for its 5 trials).

    Attributes:
        layout: the :class:`OpenCleanupLayout`.
        rule: the :class:`OpenCleanupRule`.
        pair_effect: int32[16], the effect of each pick-up pair (7 = no effect); derived from
            ``rule`` and kept so a shot is one lookup.
        dominant_hue: int32[], the episode's waste hue (0..4).
        initial_grid: uint8[H, W], the cell codes at the first trial's start (waste colours
            included); later trials keep its waste hues and draw the shades again.
        river_mask: bool[H, W], the river cells (``layout.river``).
        spawn_valid: bool[7], all True (kept for the shared spawn helpers).
        p_spawn: float32[], probability that one waste cell reappears in a step.
        skew: float32[], probability that reappearing waste takes the dominant hue.
        apple_rate: float32[], apple growth probability on a clean river.
        pollution_threshold: float32[], polluted share at which apples stop growing.
        spawn_start: int32[], first trial step at which waste may reappear.
    """

    layout: OpenCleanupLayout
    rule: OpenCleanupRule
    pair_effect: jax.Array
    dominant_hue: jax.Array
    initial_grid: jax.Array
    river_mask: jax.Array
    spawn_valid: jax.Array
    p_spawn: jax.Array
    skew: jax.Array
    apple_rate: jax.Array
    pollution_threshold: jax.Array
    spawn_start: jax.Array


@struct.dataclass
class OpenCleanupState:
    """Everything the dynamics need, plus what a text view shows about the last shot.

    Attributes:
        config: the :class:`OpenCleanupConfig` (unchanged over the episode).
        grid: uint8[H, W], cell codes (see ``constants``); agents are not painted into it.
        positions: int32[A, 2].
        orientations: int32[A], 0 north, 1 east, 2 south, 3 west.
        window: int32[A, 2], the last two pick-ups (tool 0..3, -1 = none yet), oldest first.
        frozen: int32[A], steps an agent still cannot act (zap option; 0 otherwise).
        trial: int32[], 0..4.
        trial_step: int32[], steps already played in this trial (0..399).
        time: int32[], steps already played in the episode.
        last_action: int32[A], the action each agent took last step (-1 at a trial start).
        last_reward: float32[A].
        trial_return: float32[A], apples each agent ate in this trial.
        trial_cleared: int32[A], cells each agent cleared to water in this trial.
        shot_time: int32[A], trial step of the agent's last shot this trial (-1 = none).
        shot_pair: int32[A], pick-up pair held at that shot (-1 = window not full).
        shot_cells: int32[A, 4, 2], the beam cells of that shot.
        shot_before: uint8[A, 4], their codes before the shot (1 = wall for off-grid cells).
        shot_after: uint8[A, 4], their codes after it.
    """

    config: OpenCleanupConfig
    grid: jax.Array
    positions: jax.Array
    orientations: jax.Array
    window: jax.Array
    frozen: jax.Array
    trial: jax.Array
    trial_step: jax.Array
    time: jax.Array
    last_action: jax.Array
    last_reward: jax.Array
    trial_return: jax.Array
    trial_cleared: jax.Array
    shot_time: jax.Array
    shot_pair: jax.Array
    shot_cells: jax.Array
    shot_before: jax.Array
    shot_after: jax.Array
