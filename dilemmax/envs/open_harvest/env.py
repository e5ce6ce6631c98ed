"""OpenHarvest (OpenSocialJax): a common-pool-resource dilemma with hidden pay and regrowth rules.

Five agents eat coloured apples from six orchard patches. An eaten cell regrows only while apples
hang within two cells of it, at a rate scaled by a hidden multiplier of its colour and the stage
its apple was eaten at; what an apple pays depends on a hidden colour x stage rule. Apples ripen
(unripe -> ripe -> over-ripe) and rot. An episode is 5 trials of at most 400 steps on one
configuration (layout, rule, patch colours); a trial ends early once no apple can ever appear
again.

One step, in order:

1. Actions. A frozen agent's action is replaced by STAY; so is an illegal one (ZAP while the
   beam cools down, or a number outside 0-7), which is flagged in ``infos["invalid_action"]``.
2. Turns, then simultaneous absolute moves (:func:`dilemmax.envs.grid.resolve_moves`: walls and
   agents block, ties drawn at random, swaps blocked). Tree cells are walkable.
3. An agent standing on an apple eats it and is paid ``pay[colour, stage]``.
4. Zaps: each firing agent's beam covers the faced cell, the one beyond and the two beside the
   faced cell. Every agent it covers is sent to a free spawn point and frozen for 12 steps,
   standing (and blocking) there. A frozen agent can be hit again, as in the reference: it is
   sent to a spawn point again and its 12 steps restart. The zapper's beam then cools down for
   2 steps (ZAP is illegal on the 2 steps after firing). Zaps cost and pay nothing.
5. The orchard ripens, rots and regrows (:mod:`dilemmax.envs.open_harvest.dynamics`).
6. Trial bookkeeping: the trial ends at 400 steps or when the orchard is dead; then the orchard
   is re-laid (an unripe apple on every tree) and agents go back to spawn points, on the same
   configuration. ``infos["trial_done"]`` marks it; the end of the 5th trial is
   ``dones["__all__"]``.

Actions (``Discrete(8)``): 0 north, 1 south, 2 east, 3 west (absolute moves, facing kept),
4 turn left, 5 turn right, 6 zap, 7 stay.

``infos`` (fixed structure; ``A`` agents, ``T`` trees): ``trial_done`` bool[], ``trial`` and
``trial_step`` int32[] (the step's trial and its 0-based index in it), ``orchard_dead`` bool[],
``num_apples`` int32[] after the step; per agent ``ate`` bool[A], ``ate_tree`` / ``ate_colour``
/ ``ate_stage`` int32[A] (-1 if nothing), ``ate_pay`` float32[A], ``zap_fired`` bool[A],
``zapped`` bool[A] (hit), ``zap_hits`` bool[A, A] ([zapper, target]), ``frozen`` bool[A] (could
not act), ``invalid_action`` bool[A], ``action`` int32[A] (what was actually done); per tree
``emptied_eaten``, ``rotted``, ``regrown`` (an eaten cell grew an apple) and
``regrown_after_rot``, all bool[T].
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import jax
import jax.numpy as jnp

from dilemmax.envs import grid
from dilemmax.envs.base import MultiAgentEnv, Rollout
from dilemmax.envs.guards import action_indices, freeze_finished
from dilemmax.envs.open_harvest import constants as c
from dilemmax.envs.open_harvest import dynamics, generator, metrics, observation, rendering, text
from dilemmax.envs.open_harvest.policies import SCRIPTED_POLICIES
from dilemmax.envs.open_harvest.types import OpenHarvestConfig, OpenHarvestState, TrialStarts
from dilemmax.envs.option_declaration import Option
from dilemmax.envs.option_spec import OptionSpec
from dilemmax.envs.options import (
    FRACTION,
    LAYOUT_POOL,
    OBSERVATION,
    POOL_SEED,
    RULE_POOL,
    SPLIT,
    TRIAL_STEPS,
    TRIALS,
    check_env_options,
)
from dilemmax.envs.osj.training import EVALUATION_OPTIONS, TRAINING_DEFAULTS
from dilemmax.envs.spaces import Box, Discrete

_SHAPE = (c.GRID_HEIGHT, c.GRID_WIDTH)


class OpenHarvestEnv(MultiAgentEnv):
    """OpenHarvest with procedurally generated layouts and hidden rules (env id
    ``open_harvest``)."""

    render_modes = ("ansi", "rgb_array")
    # Episodes of hundreds of steps: a batch step resets the few envs that ended, not all,
    # and builds every observation once, after the reset (reset_to and step_env return
    # get_obs of their state).
    gathered_resets = True
    obs_from_state = True
    evaluation_options = EVALUATION_OPTIONS
    training_defaults = TRAINING_DEFAULTS
    metric_axes = metrics.METRIC_AXES

    @classmethod
    def check_options_together(cls, values: Mapping[str, Any]) -> None:
        """The three pays best first (:func:`generator.validate_pay_levels`)."""
        if "pay_levels" in values:
            generator.validate_pay_levels(values["pay_levels"])

    def __init__(
        self,
        num_agents: Annotated[
            int, Option("the number of agents (the paper uses 5)", low=1, high=c.NUM_SPAWNS)
        ] = c.NUM_AGENTS,
        observation: Annotated[
            str,
            Option(
                '"codes" (uint8[11, 11, 3], see :mod:`.observation`) or "one_hot" '
                "(float32[11, 11, 37])",
                OBSERVATION,
            ),
        ] = "codes",
        split: Annotated[
            str,
            Option(
                'which part of the pools ``sample_config`` draws from: "train", "held_out" or '
                '"all"',
                SPLIT,
            ),
        ] = "train",
        pool_seed: Annotated[int, Option("seed of the layout and rule pools", POOL_SEED)] = 0,
        num_layouts: Annotated[
            int, Option("the size of the layout pool (reference: 256)", LAYOUT_POOL)
        ] = c.DEFAULT_NUM_LAYOUTS,
        num_rules: Annotated[
            int, Option("the size of the rule pool (reference: 100,000)", RULE_POOL)
        ] = c.DEFAULT_NUM_RULES,
        train_fraction: Annotated[
            float, Option("share of each pool in the train split (reference: 0.8)", FRACTION)
        ] = c.DEFAULT_TRAIN_FRACTION,
        num_trials: Annotated[
            int, Option("the trials of an episode (5 in the paper)", TRIALS)
        ] = c.NUM_TRIALS,
        trial_steps: Annotated[
            int, Option("the most steps of a trial (400 in the paper)", TRIAL_STEPS)
        ] = c.TRIAL_STEPS,
        # Difficulty (curriculum) options; the order of the pays: check_options_together.
        stage_orders: Annotated[
            int,
            Option(
                "difficulty (curriculum) option, 6 (the paper) by default: each colour's pay and "
                "regrowth orders over the stages are drawn from this many of the 6 possible, so "
                "``generator.rule_space_size(stage_orders)`` = stage_orders^10 rules are in play "
                "(1: one fixed rule, nothing hidden)",
                low=1,
                high=c.DEFAULT_STAGE_ORDERS,
            ),
        ] = c.DEFAULT_STAGE_ORDERS,
        pay_levels: Annotated[
            tuple[float, float, float],
            Option(
                "difficulty (curriculum) option, the paper's (1, 0.5, 0.25) by default: the three "
                "pays, best first (strictly decreasing), that each colour's hidden pay order "
                "assigns to its stages. Levels such as (1, 0, -1) make the rule worth knowing: an "
                "apple eaten at its colour's worst stage costs a point, so eating without knowing "
                "the order earns about nothing. The rule space is unchanged (the rows permute "
                "three distinct levels either way)",
                item=OptionSpec("float", low=-100.0, high=100.0),
                min_len=c.NUM_STAGES,
                max_len=c.NUM_STAGES,
            ),
        ] = c.PAY_LEVELS,
        shared_pay_order: Annotated[
            bool,
            Option(
                "difficulty (curriculum) option, off (the paper) by default: one pay order holds "
                "for every colour, so the first apple an agent tastes at a stage tells what that "
                "stage pays for all colours (regrowth orders stay per colour; the rule space is "
                "``generator.rule_space_size(stage_orders, True)`` = stage_orders^6)"
            ),
        ] = False,
    ):
        checked = check_env_options(type(self), locals())
        self.stage_orders = int(stage_orders)
        self.pay_levels = tuple(checked["pay_levels"])  # floats, best first
        self.shared_pay_order = bool(shared_pay_order)
        super().__init__(num_agents)
        self.observation_mode = observation
        self.split = split
        self.pool_seed = int(pool_seed)
        self.num_trials = int(num_trials)
        self.trial_steps = int(trial_steps)
        self.max_steps = self.num_trials * self.trial_steps
        self.layout_pool = generator.layout_pools(
            self.pool_seed, int(num_layouts), float(train_fraction)
        )[split]
        self.rule_pool = generator.rule_pools(
            self.pool_seed + 1,
            int(num_rules),
            float(train_fraction),
            self.stage_orders,
            self.shared_pay_order,
        )[split]
        if observation == "codes":
            shape = (c.VIEW_HEIGHT, c.VIEW_WIDTH, c.OBS_CHANNELS)
            self._obs_space = Box(0, c.OBS_HIGH, shape, jnp.uint8)
        else:
            shape = (c.VIEW_HEIGHT, c.VIEW_WIDTH, observation_one_hot_channels())
            self._obs_space = Box(0.0, 1.0, shape, jnp.float32)
        self._action_space = Discrete(c.NUM_ACTIONS)

    # ------------------------------------------------------------------ configuration
    def sample_config(self, key: jax.Array) -> OpenHarvestConfig:
        """A layout and a hidden rule from this env's split of the pools; fresh patch colours."""
        return generator.sample_config(key, self.layout_pool, self.rule_pool, self.pay_levels)

    def reset_to(self, key: jax.Array, config: OpenHarvestConfig):
        a = self.num_agents
        state = OpenHarvestState(
            config=config,
            agent_pos=jnp.zeros((a, 2), jnp.int32),
            agent_dir=jnp.zeros((a,), jnp.int32),
            frozen=jnp.zeros((a,), jnp.int32),
            cooldown=jnp.zeros((a,), jnp.int32),
            orchard=dynamics.lay_orchard(jnp.ones(config.layout.tree_patch.shape, jnp.int32)),
            trial=jnp.int32(0),
            trial_step=jnp.int32(0),
            time=jnp.int32(0),
            trial_return=jnp.zeros((a,), jnp.float32),
            trial_eaten=jnp.zeros((a,), jnp.int32),
            last_action=jnp.full((a,), c.STAY, jnp.int32),
            last_ate_colour=jnp.full((a,), -1, jnp.int32),
            last_ate_stage=jnp.full((a,), -1, jnp.int32),
            last_pay=jnp.zeros((a,), jnp.float32),
            last_hit_by=jnp.full((a,), -1, jnp.int32),
            known_pay=jnp.zeros((a, c.NUM_COLOURS, c.NUM_STAGES), bool),
            done=jnp.bool_(False),
            starts=self._draw_trial_starts(key, config),
        )
        state = self._start_trial(state, jnp.int32(0))
        return self.get_obs(state), state

    def _draw_trial_starts(self, key: jax.Array, config: OpenHarvestConfig) -> TrialStarts:
        """Spawn cells, facings and apple stage lengths of all the episode's trial starts."""
        key_spawn, key_bits = jax.random.split(key)
        layout = config.layout
        a, k, num_trees = self.num_agents, self.num_trials, layout.tree_patch.shape[0]
        spawn_valid = jnp.ones(layout.spawn_points.shape[0], bool)
        positions = jax.vmap(grid.sample_spawn_positions, in_axes=(0, None, None, None))(
            jax.random.split(key_spawn, k), layout.spawn_points, spawn_valid, a
        )
        bits = jax.random.bits(key_bits, (k, num_trees + a), jnp.uint32)
        return TrialStarts(
            agent_pos=positions,
            agent_dir=(bits[:, num_trees:] % 4).astype(jnp.int32),
            stage_length=dynamics.draw_stage_lengths(bits[:, :num_trees], config),
        )

    def _start_trial(self, state: OpenHarvestState, trial: jax.Array) -> OpenHarvestState:
        """``state`` at the start of ``trial``: orchard re-laid, agents on their spawn cells."""
        a = self.num_agents
        return state.replace(
            agent_pos=state.starts.agent_pos[trial],
            agent_dir=state.starts.agent_dir[trial],
            frozen=jnp.zeros((a,), jnp.int32),
            cooldown=jnp.zeros((a,), jnp.int32),
            orchard=dynamics.lay_orchard(state.starts.stage_length[trial]),
            trial=jnp.asarray(trial, jnp.int32),
            trial_step=jnp.int32(0),
            trial_return=jnp.zeros((a,), jnp.float32),
            trial_eaten=jnp.zeros((a,), jnp.int32),
        )

    # ------------------------------------------------------------------ dynamics
    def legal_actions(self, state: OpenHarvestState) -> jax.Array:
        """bool[A, 8]: a frozen agent may only STAY; ZAP needs a cooled-down beam."""
        free = state.frozen == 0
        mask = jnp.broadcast_to(free[:, None], (self.num_agents, c.NUM_ACTIONS))
        mask = mask.at[:, c.ZAP].set(free & (state.cooldown == 0))
        return mask.at[:, c.STAY].set(True)

    def step_env(self, key: jax.Array, state: OpenHarvestState, actions: Mapping[str, jax.Array]):
        key_move, key_spawn, key_orchard = jax.random.split(key, 3)
        config, layout = state.config, state.config.layout
        chosen = action_indices(actions, self.agents)
        free = state.frozen == 0
        in_range = (chosen >= 0) & (chosen < c.NUM_ACTIONS)
        legal = (
            in_range
            & self.legal_actions(state)[
                jnp.arange(self.num_agents), jnp.clip(chosen, 0, c.NUM_ACTIONS - 1)
            ]
        )
        action = jnp.where(legal & free, chosen, c.STAY)

        # Turns, then simultaneous absolute moves.
        agent_dir = grid.turn(state.agent_dir, jnp.asarray(c.ACTION_TURN)[action])
        targets = grid.propose_moves(state.agent_pos, jnp.asarray(c.ACTION_MOVE_DIR)[action])
        positions = grid.resolve_moves(key_move, state.agent_pos, targets, ~layout.walls)

        orchard, eaten = dynamics.eat(state.orchard, config, positions)

        # Zaps: every agent hit goes to a free spawn point, a frozen one too (as in the reference:
        # it is sent back again and its 12 steps restart).
        firing = action == c.ZAP
        hits = grid.beam_hits_agents(positions, agent_dir, firing, _SHAPE)
        hit = jnp.any(hits, axis=0)
        spawn_valid = jnp.ones(layout.spawn_points.shape[0], bool)
        positions, _ = grid.respawn_positions(
            key_spawn, positions, hit, layout.spawn_points, spawn_valid
        )
        frozen = jnp.where(hit, config.freeze_steps, jnp.maximum(state.frozen - 1, 0))
        cooldown = jnp.where(firing, config.zap_cooldown, jnp.maximum(state.cooldown - 1, 0))

        tree_under = layout.tree_index[positions[:, 0], positions[:, 1]]
        num_trees = orchard.apple.shape[0]
        occupied = (
            jnp.zeros((num_trees,), bool)
            .at[jnp.where(tree_under >= 0, tree_under, num_trees)]
            .set(True, mode="drop")
        )
        orchard, grown = dynamics.advance_orchard(key_orchard, orchard, config, occupied)

        pay = eaten["ate_pay"]
        ate = eaten["ate"]
        learned = (
            jax.nn.one_hot(eaten["ate_colour"], c.NUM_COLOURS, dtype=bool)[:, :, None]
            & jax.nn.one_hot(eaten["ate_stage"], c.NUM_STAGES, dtype=bool)[:, None, :]
        )
        trial_step = state.trial_step + 1
        dead = dynamics.orchard_dead(orchard)
        trial_done = (trial_step >= self.trial_steps) | dead
        episode_done = trial_done & (state.trial >= self.num_trials - 1)

        played = state.replace(
            agent_pos=positions,
            agent_dir=agent_dir,
            frozen=frozen,
            cooldown=cooldown,
            orchard=orchard,
            trial_step=trial_step,
            time=state.time + 1,
            trial_return=state.trial_return + pay,
            trial_eaten=state.trial_eaten + ate.astype(jnp.int32),
            last_action=action,
            last_ate_colour=eaten["ate_colour"],
            last_ate_stage=eaten["ate_stage"],
            last_pay=pay,
            last_hit_by=jnp.where(hit, jnp.argmax(hits, axis=0), -1).astype(jnp.int32),
            known_pay=state.known_pay | learned,
            done=episode_done,
        )
        next_trial = self._start_trial(played, jnp.minimum(state.trial + 1, self.num_trials - 1))
        new_trial = trial_done & ~episode_done
        next_state = jax.tree.map(lambda n, p: jnp.where(new_trial, n, p), next_trial, played)

        rewards = {a: pay[i] for i, a in enumerate(self.agents)}
        dones = {a: episode_done for a in self.agents}
        dones["__all__"] = episode_done
        infos = {
            "trial_done": trial_done,
            "trial": state.trial,
            "trial_step": state.trial_step,
            "orchard_dead": dead,
            "num_apples": jnp.sum(orchard.apple, dtype=jnp.int32),
            "ate": ate,
            "ate_tree": eaten["ate_tree"],
            "ate_colour": eaten["ate_colour"],
            "ate_stage": eaten["ate_stage"],
            "ate_pay": pay,
            "emptied_eaten": eaten["emptied_eaten"],
            "rotted": grown.rotted,
            "regrown": grown.regrown,
            "regrown_after_rot": grown.regrown_after_rot,
            "zap_fired": firing,
            "zap_hits": hits,
            "zapped": hit,
            "frozen": ~free,
            "invalid_action": ~legal,
            "action": action,
        }
        next_state, rewards, dones, infos = freeze_finished(
            state.done, state, next_state, rewards, dones, infos
        )
        return self.get_obs(next_state), next_state, rewards, dones, infos

    # ------------------------------------------------------------------ observations
    def get_obs(self, state: OpenHarvestState) -> dict[str, jax.Array]:
        obs = observation.observe(state)
        if self.observation_mode == "one_hot":
            obs = observation.one_hot(obs)
        return {a: obs[i] for i, a in enumerate(self.agents)}

    def action_mask(self, state: OpenHarvestState) -> dict[str, jax.Array]:
        mask = self.legal_actions(state)
        return {a: mask[i] for i, a in enumerate(self.agents)}

    def observation_space(self, agent: str) -> Box:
        return self._obs_space

    def action_space(self, agent: str) -> Discrete:
        return self._action_space

    def global_state(self, state: OpenHarvestState) -> jax.Array:
        """float32[H * W * 3 + 2 * A]: the whole map's three code channels (agents in absolute
        orientation), plus every agent's frozen and cooldown counters."""
        layers = observation.map_layers(state).reshape(-1).astype(jnp.float32)
        timers = jnp.concatenate([state.frozen, state.cooldown]).astype(jnp.float32)
        return jnp.concatenate([layers, timers])

    # ------------------------------------------------------------------ extras
    def episode_metrics(self, rollout: Rollout) -> dict[str, jax.Array]:
        return metrics.episode_metrics(rollout, self.agents, self.num_trials)

    def scripted_policies(self) -> dict:
        return dict(SCRIPTED_POLICIES)

    def text_protocol(self, **options):
        return text.OpenHarvestText(self, **options)

    def render_ansi(self, state: OpenHarvestState) -> str:
        return rendering.render_ansi(state)

    def render_rgb(self, state: OpenHarvestState):
        return rendering.render_rgb(state)

    def __repr__(self) -> str:
        return (
            f"OpenHarvestEnv(num_agents={self.num_agents}, observation={self.observation_mode!r},"
            f" split={self.split!r}, pool_seed={self.pool_seed})"
        )


def observation_one_hot_channels() -> int:
    """Channels of the one-hot observation: 22 cell + 6 who + 9 agent-info codes."""
    return observation.ONE_HOT_CHANNELS
