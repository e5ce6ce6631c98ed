"""OpenCleanup (OpenSocialJax): clean a polluted river with tools of hidden recipes so apples grow.

A public-goods dilemma: an agent is paid only for the apples it eats (+1 each), apples grow only
while the shared river is clean enough, and cleaning needs working tools whose recipes (ordered
pairs of pick-ups) are hidden and differ from episode to episode. An episode plays 5 trials of
400 steps on one configuration (layout, rule, dominant waste hue); ``infos["trial_done"]`` marks
the end of a trial, ``dones["__all__"]`` the end of the episode.

Order of events in a step (all agents act at once):

1. Actions: an out-of-range action, an illegal one (pick up off a station; anything but stay for
   a frozen agent) is replaced by stay and flagged in ``infos["invalid_action"]``.
2. Turning; then compass moves (facing unchanged), resolved without overlap by
   :func:`dilemmax.envs.grid.resolve_moves` (walls and the grid edge block).
3. Eating: an agent that stands on an apple eats it (+1 to that agent only).
4. Pick-ups: an agent on a station that picks up pushes that tool into its window.
5. Fire: beams of all firing agents act on the waste under them, as the held pair dictates
   (:func:`dilemmax.envs.open_cleanup.dynamics.fire`). With ``zap=True``, zap beams send the
   agents they hit to a free spawn point and freeze them for 12 steps.
6. Waste reappears (from trial step 50 on), then apples grow from the resulting pollution.
7. After the 400th step of a trial the map is re-laid: same layout, rule and dominant hue, the
   river polluted again on the same cells with the same hues but freshly drawn shades (as in the
   reference), hands empty, apples gone, agents at spawn points.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Annotated, Any

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.envs import grid as G
from dilemmax.envs import pool_store, pools
from dilemmax.envs.base import MultiAgentEnv, Rollout
from dilemmax.envs.guards import action_indices, freeze_finished
from dilemmax.envs.open_cleanup import constants as C
from dilemmax.envs.open_cleanup import dynamics as D
from dilemmax.envs.open_cleanup import generator, metrics, observation, policies, rendering, text
from dilemmax.envs.open_cleanup.types import OpenCleanupConfig, OpenCleanupState
from dilemmax.envs.option_declaration import Option
from dilemmax.envs.options import (
    FRACTION,
    LAYOUT_POOL,
    OBSERVATION,
    POOL_SEED,
    RULE_POOL,
    SPLIT,
    TRIAL_STEPS,
    TRIALS,
    UNIT,
    check_env_options,
)
from dilemmax.envs.osj.training import EVALUATION_OPTIONS, TRAINING_DEFAULTS
from dilemmax.envs.rare import rare_cond
from dilemmax.envs.spaces import Box, Discrete


@functools.lru_cache(maxsize=8)
@pool_store.stored_as(generator.LAYOUTS_LIKE)  # built once, then read by every process
def _layout_pool(seed: int, size: int, height: int, width: int) -> pools.Pool:
    return generator.build_layout_pool(seed, size, height, width)


@functools.lru_cache(maxsize=8)
@pool_store.stored_as(generator.RULES_LIKE)
def _rule_pool(seed: int, size: int, recipe_length: int, num_tools: int, num_hues: int):
    return generator.build_rule_pool(seed, size, recipe_length, num_tools, num_hues)


class OpenCleanupEnv(MultiAgentEnv):
    """OpenCleanup with procedurally generated layouts and hidden tool recipes (env id
    ``open_cleanup``)."""

    render_modes = ("ansi", "rgb_array")
    # Episodes of hundreds of steps: a batch step resets the few envs that ended, not all,
    # and builds every observation once, after the reset (reset_to and step_env return
    # get_obs of their state).
    gathered_resets = True
    obs_from_state = True
    # The pool sizes' names before 0.x's one layout for every game (open_harvest's names).
    renamed_options = {"layout_pool_size": "num_layouts", "rule_pool_size": "num_rules"}
    evaluation_options = EVALUATION_OPTIONS
    training_defaults = TRAINING_DEFAULTS
    metric_axes = metrics.METRIC_AXES

    @classmethod
    def check_options_together(cls, values: Mapping[str, Any]) -> None:
        """Difficulty settings that cannot be played (:func:`generator.validate_difficulty`)."""
        if {"recipe_length", "num_tools", "num_hues", "skew"} <= set(values):
            generator.validate_difficulty(
                values["recipe_length"],
                values["num_tools"],
                values["num_hues"],
                float(values["skew"]),
            )

    def __init__(
        self,
        num_agents: Annotated[
            int,
            Option(
                "the number of agents (the layouts have 7 spawn points); the paper plays 5",
                low=1,
                high=C.NUM_SPAWNS,
            ),
        ] = C.NUM_AGENTS,
        observation: Annotated[
            str,
            Option(
                '``"codes"`` (uint8[11, 11, 4], see :mod:`dilemmax.envs.open_cleanup.observation`)'
                ' or ``"one_hot"`` (float32[11, 11, 49])',
                OBSERVATION,
            ),
        ] = "codes",
        split: Annotated[
            str,
            Option(
                "which part of the layout and rule pools ``sample_config`` draws from: "
                '``"train"`` (the first ``train_fraction``), ``"held_out"`` (the rest) or '
                '``"all"``',
                SPLIT,
            ),
        ] = "train",
        pool_seed: Annotated[
            int, Option("seed of the layout pool; the rule pool uses ``pool_seed + 1``", POOL_SEED)
        ] = C.LAYOUT_POOL_SEED,
        num_layouts: Annotated[
            int, Option("the size of the layout pool", LAYOUT_POOL)
        ] = C.DEFAULT_NUM_LAYOUTS,
        num_rules: Annotated[
            int, Option("the size of the rule pool", RULE_POOL)
        ] = C.DEFAULT_NUM_RULES,
        train_fraction: Annotated[
            float, Option("the share of each pool in the train split", FRACTION)
        ] = C.DEFAULT_TRAIN_FRACTION,
        p_spawn: Annotated[
            float,
            Option(
                "the chance per step (from a trial's step 50 on) that waste reappears on a "
                "clean river cell (paper: 0.1); stored in each configuration",
                UNIT,
            ),
        ] = C.P_SPAWN,
        skew: Annotated[
            float,
            Option(
                "the chance that reappearing waste has the dominant hue, else any of the 15 "
                "kinds (paper: 1.0); stored in each configuration",
                UNIT,
            ),
        ] = C.SKEW,
        zap: Annotated[bool, Option("add the reference's agent-zapping beam as action 9")] = False,
        clean_reward: Annotated[
            float,
            Option(
                "training-signal shaping, not in the paper (0 by default): each shade of waste an "
                "agent's beam removes (a cell lightened, or cleared to water) adds this to its "
                "reward. Apples stay the game's payoff: ``trial_return`` and the episode metrics "
                "count apples only. Random play clears under one river cell per trial (0.4 on the "
                "held-out split; ``benchmarks/results/learning_open_cleanup_individual.md``) and "
                "apples need 12 or more, so a learner from scratch sees almost no reward without "
                "it",
                low=-100.0,
                high=100.0,
            ),
        ] = 0.0,
        num_trials: Annotated[
            int, Option("the trials of an episode (5 in the paper)", TRIALS)
        ] = C.NUM_TRIALS,
        trial_steps: Annotated[
            int, Option("the steps of a trial (400 in the paper)", TRIAL_STEPS)
        ] = C.TRIAL_STEPS,
        # The layout generator's walks need at least the default map; beyond 24 x 32 its
        # all-pairs distance table grows past a few hundred MB.
        height: Annotated[
            int, Option("the grid's rows (12 in the paper)", low=C.GRID_HEIGHT, high=24)
        ] = C.GRID_HEIGHT,
        width: Annotated[
            int, Option("the grid's columns (16 in the paper)", low=C.GRID_WIDTH, high=32)
        ] = C.GRID_WIDTH,
        # Difficulty (curriculum) options, the paper's game by default; the rule space is
        # C.rule_space_size(recipe_length, num_tools, num_hues) and the combinations that
        # cannot be played are refused by check_options_together.
        recipe_length: Annotated[
            int,
            Option(
                "difficulty (curriculum) option, the paper's 2 by default: a recipe is the last "
                "``recipe_length`` pick-ups (the rule space: "
                "``C.rule_space_size(recipe_length, num_tools, num_hues)``, see "
                "``generator.sample_rule``)",
                kind="choice",
                choices=C.RECIPE_LENGTHS,
            ),
        ] = C.RECIPE_LENGTH,
        num_tools: Annotated[
            int,
            Option(
                "difficulty (curriculum) option, the paper's 4 by default: the stations offer "
                "``num_tools`` kinds of tool",
                low=C.MIN_TOOLS,
                high=C.NUM_TOOLS,
            ),
        ] = C.NUM_TOOLS,
        num_hues: Annotated[
            int,
            Option(
                "difficulty (curriculum) option, the paper's 5 by default: waste comes in "
                "``num_hues`` hues; settings that cannot be played raise ValueError",
                low=1,
                high=C.NUM_HUES,
            ),
        ] = C.NUM_HUES,
    ):
        check_env_options(type(self), locals())
        super().__init__(num_agents)
        self.difficulty = {
            "recipe_length": int(recipe_length),
            "num_tools": int(num_tools),
            "num_hues": int(num_hues),
        }
        self.observation_kind = observation
        self.split = split
        self.height, self.width = int(height), int(width)
        self.zap = bool(zap)
        self.clean_reward = float(clean_reward)
        self.num_actions = C.NUM_BASE_ACTIONS + int(self.zap)
        self.num_trials, self.trial_steps = int(num_trials), int(trial_steps)
        self.max_steps = self.num_trials * self.trial_steps
        self.p_spawn, self.skew = float(p_spawn), float(skew)
        self.layout_pool = generator.select_split(
            _layout_pool(int(pool_seed), int(num_layouts), self.height, self.width),
            split,
            train_fraction,
        )
        self.rule_pool = generator.select_split(
            _rule_pool(int(pool_seed) + 1, int(num_rules), *self.difficulty.values()),
            split,
            train_fraction,
        )
        # River + stream cells: the denominator of the polluted share.
        self.num_water_cells = C.NUM_RIVER + C.NUM_STREAM
        if observation == "codes":
            self._obs_space = Box(0, observation_high(), observation_shape("codes"), jnp.uint8)
        else:
            self._obs_space = Box(0.0, 1.0, observation_shape("one_hot"), jnp.float32)
        self._act_space = Discrete(self.num_actions)

    # ------------------------------------------------------------------ configuration
    def sample_config(self, key: jax.Array) -> OpenCleanupConfig:
        """A layout and a rule from the pools (of ``split``), then hue and waste colours."""
        k_layout, k_rule, k_rest = jax.random.split(key, 3)
        layout = pools.sample_from_pool(k_layout, self.layout_pool)
        rule = pools.sample_from_pool(k_rule, self.rule_pool)
        return self.make_config(k_rest, layout, rule)

    def make_config(self, key, layout, rule, dominant_hue=None) -> OpenCleanupConfig:
        """A configuration on a given layout and rule (this env's p_spawn and skew)."""
        return generator.make_config(
            key,
            layout,
            rule,
            self.height,
            self.width,
            p_spawn=self.p_spawn,
            skew=self.skew,
            dominant_hue=dominant_hue,
            **self.difficulty,
        )

    # ------------------------------------------------------------------ reset
    def _trial_start(self, key, config: OpenCleanupConfig, trial, time) -> OpenCleanupState:
        """The state at the start of a trial: the initial map, agents at random spawn points."""
        k_spawn, k_face = jax.random.split(key)
        a = self.num_agents
        positions = G.sample_spawn_positions(k_spawn, config.layout.spawns, config.spawn_valid, a)
        return OpenCleanupState(
            config=config,
            grid=config.initial_grid,
            positions=positions,
            orientations=jax.random.randint(k_face, (a,), 0, 4, dtype=jnp.int32),
            window=jnp.full((a, C.WINDOW), C.EMPTY_SLOT, jnp.int32),
            frozen=jnp.zeros((a,), jnp.int32),
            trial=jnp.asarray(trial, jnp.int32),
            trial_step=jnp.int32(0),
            time=jnp.asarray(time, jnp.int32),
            last_action=jnp.full((a,), -1, jnp.int32),
            last_reward=jnp.zeros((a,), jnp.float32),
            trial_return=jnp.zeros((a,), jnp.float32),
            trial_cleared=jnp.zeros((a,), jnp.int32),
            shot_time=jnp.full((a,), -1, jnp.int32),
            shot_pair=jnp.full((a,), -1, jnp.int32),
            shot_cells=jnp.zeros((a, 4, 2), jnp.int32),
            shot_before=jnp.zeros((a, 4), jnp.uint8),
            shot_after=jnp.zeros((a, 4), jnp.uint8),
        )

    def _next_trial(self, key: jax.Array, played: OpenCleanupState) -> OpenCleanupState:
        """The start of the trial after ``played``'s: the map re-laid with the waste shades drawn
        again (hues kept, as in the reference), agents at fresh spawn points."""
        k_start, k_shade = jax.random.split(key)
        config = played.config
        fresh = self._trial_start(k_start, config, played.trial + 1, played.time)
        return fresh.replace(grid=D.redraw_shades(k_shade, config.initial_grid))

    def reset_to(self, key: jax.Array, config: OpenCleanupConfig):
        state = self._trial_start(key, config, 0, 0)
        return self.get_obs(state), state

    # ------------------------------------------------------------------ step
    def _legal(self, state: OpenCleanupState) -> jax.Array:
        """bool[A, num_actions]: pick up only on a station; a frozen agent may only stay."""
        here = state.grid[state.positions[:, 0], state.positions[:, 1]]
        on_station = here >= C.STATION_BASE
        legal = jnp.ones((self.num_agents, self.num_actions), bool)
        legal = legal.at[:, C.PICK_UP_ACTION].set(on_station)
        frozen = (state.frozen > 0)[:, None]
        only_stay = jnp.arange(self.num_actions) == C.STAY_ACTION
        return jnp.where(frozen, only_stay[None, :], legal)

    def action_mask(self, state: OpenCleanupState) -> dict[str, jax.Array]:
        legal = self._legal(state)
        return {agent: legal[i] for i, agent in enumerate(self.agents)}

    def step_env(self, key: jax.Array, state: OpenCleanupState, actions: Mapping[str, jax.Array]):
        config = state.config
        height, width = self.height, self.width
        k_move, k_zap, k_spawn, k_apple, k_reset = jax.random.split(key, 5)

        raw = action_indices(actions, self.agents)
        in_range = (raw >= 0) & (raw < self.num_actions)
        legal = self._legal(state)[jnp.arange(self.num_agents), jnp.clip(raw, 0, None)]
        legal = legal & in_range
        act = jnp.where(legal, raw, C.STAY_ACTION)

        # Turning, then compass moves.
        orientations = G.turn(state.orientations, jnp.asarray(C.ACTION_TURN)[act])
        targets = G.propose_moves(state.positions, jnp.asarray(C.ACTION_MOVE_DIR)[act])
        positions = G.resolve_moves(k_move, state.positions, targets, state.grid != C.WALL)

        # Eating and picking up act on the cell an agent stands on after moving.
        grid = state.grid
        here = grid[positions[:, 0], positions[:, 1]]
        ate = here == C.APPLE
        grid = grid.at[positions[:, 0], positions[:, 1]].set(
            jnp.where(ate, jnp.uint8(C.ORCHARD), here)
        )
        picking = (act == C.PICK_UP_ACTION) & (here >= C.STATION_BASE)
        tool = here.astype(jnp.int32) - C.STATION_BASE
        window = D.pick_up(state.window, tool, picking)
        pair = D.window_pair(window)
        effect = jnp.where(pair >= 0, config.pair_effect[jnp.clip(pair, 0, None)], C.NO_EFFECT)
        made_tool = picking & (effect != C.NO_EFFECT)

        # Cleaning beams.
        firing = act == C.FIRE_ACTION
        grid, cells, before, after, cleared, lightened = D.fire(
            grid, positions, orientations, firing, effect
        )

        frozen = jnp.maximum(state.frozen - 1, 0)
        zapped = jnp.zeros((self.num_agents,), bool)
        if self.zap:
            zapping = act == C.ZAP_ACTION
            zapped = jnp.any(G.beam_hits_agents(positions, orientations, zapping, grid.shape), 0)
            positions, moved = G.respawn_positions(
                k_zap, positions, zapped, config.layout.spawns, config.spawn_valid
            )
            zapped = zapped & moved
            frozen = jnp.where(zapped, C.ZAP_FREEZE_STEPS, frozen)

        # Waste reappears, then apples grow from the pollution that results.
        occupied = G.occupancy(positions, (height, width))
        grid, spawned = D.spawn_waste(
            k_spawn,
            grid,
            config.river_mask,
            occupied,
            state.trial_step >= config.spawn_start,
            config.p_spawn,
            config.dominant_hue,
            config.skew,
        )
        share = D.pollution(grid, config.river_mask, self.num_water_cells)
        probability = D.apple_probability(share, config.apple_rate, config.pollution_threshold)
        grid, grown = D.grow_apples(k_apple, grid, occupied, probability)

        apples = ate.astype(jnp.float32)
        rewards_arr = apples + self.clean_reward * (cleared + lightened).astype(jnp.float32)
        trial_done = state.trial_step + 1 >= self.trial_steps
        episode_done = trial_done & (state.trial + 1 >= self.num_trials)
        next_state = state.replace(
            grid=grid,
            positions=positions,
            orientations=orientations,
            window=window,
            frozen=frozen,
            trial_step=state.trial_step + 1,
            time=state.time + 1,
            last_action=act,
            last_reward=rewards_arr,
            trial_return=state.trial_return + apples,
            trial_cleared=state.trial_cleared + cleared,
            shot_time=jnp.where(firing, state.trial_step, state.shot_time),
            shot_pair=jnp.where(firing, pair, state.shot_pair),
            shot_cells=jnp.where(firing[:, None, None], cells, state.shot_cells),
            shot_before=jnp.where(firing[:, None], before, state.shot_before),
            shot_after=jnp.where(firing[:, None], after, state.shot_after),
        )
        # A new trial re-lays the map; the configuration stays. Behind rare_cond, so a batch
        # pays for the re-lay only on the steps where some env starts a trial.
        relay = trial_done & ~episode_done
        next_state = rare_cond(
            relay, self._next_trial, lambda key, played: played, k_reset, next_state
        )

        infos = {
            "trial_done": trial_done,
            "trial": state.trial,
            "trial_step": state.trial_step,
            "invalid_action": ~legal,
            "picked_up": jnp.where(picking, tool, -1),
            "made_tool": made_tool,
            "fired": firing,
            "shot_pair": jnp.where(firing, pair, -1),
            "beam_cells": cells,
            "beam_before": before,
            "beam_after": after,
            "shot_at_waste": firing & jnp.any(D.is_waste(before), axis=-1),
            "cleared": cleared,
            "lightened": lightened,
            "ate": ate,
            "zapped": zapped,
            "pollution": share,
            "apples_grown": grown,
            "waste_spawned": spawned,
        }
        rewards = {a: rewards_arr[i] for i, a in enumerate(self.agents)}
        dones = {a: episode_done for a in self.agents}
        dones["__all__"] = episode_done
        was_done = state.time >= self.max_steps
        next_state, rewards, dones, infos = freeze_finished(
            was_done, state, next_state, rewards, dones, infos
        )
        return self.get_obs(next_state), next_state, rewards, dones, infos

    # ------------------------------------------------------------------ observations
    def observe_all(self, state: OpenCleanupState) -> jax.Array:
        """uint8[A, 11, 11, 4] codes, or float32[A, 11, 11, 49] with ``observation="one_hot"``."""
        obs = observation.observe(state)
        return observation.one_hot(obs) if self.observation_kind == "one_hot" else obs

    def get_obs(self, state: OpenCleanupState) -> dict[str, jax.Array]:
        obs = self.observe_all(state)
        return {agent: obs[i] for i, agent in enumerate(self.agents)}

    def observation_space(self, agent: str) -> Box:
        return self._obs_space

    def action_space(self, agent: str) -> Discrete:
        return self._act_space

    def global_state(self, state: OpenCleanupState) -> jax.Array:
        """float32[H * W + A * 5]: the map codes plus every agent's cell, facing and window."""
        agents = jnp.concatenate(
            [state.positions, state.orientations[:, None], state.window], axis=-1
        )
        return jnp.concatenate([state.grid.reshape(-1), agents.reshape(-1)]).astype(jnp.float32)

    # ------------------------------------------------------------------ metrics, policies, views
    def episode_metrics(self, rollout: Rollout) -> dict[str, jax.Array]:
        return metrics.episode_metrics(rollout, self.agents, self.num_trials)

    def scripted_policies(self) -> dict:
        return dict(policies.SCRIPTED_POLICIES)

    def text_protocol(self, **options):
        return text.OpenCleanupText(self, **options)

    def render_ansi(self, state: OpenCleanupState) -> str:
        return rendering.render_ansi(state)

    def render_rgb(self, state: OpenCleanupState) -> np.ndarray:
        return rendering.render_rgb(state)


def observation_shape(kind: str) -> tuple[int, int, int]:
    channels = observation.NUM_CHANNELS if kind == "codes" else observation.ONE_HOT_CHANNELS
    return (*observation.VIEW_SIZE, channels)


def observation_high() -> int:
    return observation.CODES_HIGH
