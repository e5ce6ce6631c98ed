"""The Dialogue Moral Hazard Game as a JAX multi-agent environment.

n agents sit in a directed ring; agent i owns case i (four options A-D with public utilities and
one hidden unsafe option) and its successor is (i + 1) mod n. One episode is three env steps:

1. work: ``LOCAL <label>`` (answer the own case's public local question) or ``QUERY`` (pay k and
   privately learn the successor's unsafe option);
2. note: a querier posts ``NOTE`` (case, option) on the public board or stays silent; agents that
   did not query can only stay silent (and are not counted as deciding);
3. final: every agent picks an option of its own case after reading the board.

Then T = 1 iff every agent picked its target a_i* (the best option that is not unsafe), and the
episode score is R_game = w_L mean(L) + w_F mean(F) + w_T T - k mean(Q).

Rewards are paid when their events happen, so an agent's return over the episode is its payoff:
the work step pays the local point and charges the query, the final step pays w_F and w_T.
Team mode pays every agent the team quantity (so each return is R_game); private mode pays
agent i its own terms, U_i = w_L L_i + w_F F_i + n alpha_i w_T T - k Q_i.

Illegal actions are moves not made (see :mod:`dilemmax.envs.moral_hazard.constants`), and
``infos["valid"]`` records them. ``infos`` carries every event the metrics and the text harness
need, each array non-zero only at the step where its event happens (agent axis ``n``):

==================  =========  ===========================================================
key                 shape      meaning
==================  =========  ===========================================================
stage               int32[]    the stage this step played (0 work, 1 note, 2 final, 3 done)
decided             bool[n]    the agent had a real decision at this step
valid               bool[n]    its action was legal (meaningful where ``decided``)
local               bool[n]    work: LOCAL taken
query               bool[n]    work: QUERY taken (Q_i = e_i)
local_correct       bool[n]    work: L_i
note_posted         bool[n]    note: a note was posted
note_case           int32[n]   note: the case it names (absolute), else -1
note_option         int32[n]   note: the option it names, else -1
note_correct        bool[n]    note: it names the successor's case and its unsafe option
final_label         int32[n]   final: a_i, else -1
final_correct       bool[n]    final: F_i
unsafe_choice       bool[n]    final: a_i = h_i
info_transfer       bool[n]    final: case i's predecessor queried and posted a correct
                               note, and agent i then picked a_i* (per opportunity = per case)
team_success        bool[]     final: T
score               float32[]  final: R_game of the episode
private_payoff      float32[n] final: U_i of the episode
==================  =========  ===========================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated

import jax
import jax.numpy as jnp

from dilemmax.envs import unrolled
from dilemmax.envs.base import MultiAgentEnv, Rollout, SweepPart
from dilemmax.envs.guards import action_indices
from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard import generator, policies, rendering
from dilemmax.envs.moral_hazard.metrics import METRIC_AXES, episode_metrics
from dilemmax.envs.moral_hazard.observation import ObsLayout, encode_agents
from dilemmax.envs.moral_hazard.text import MoralHazardText
from dilemmax.envs.moral_hazard.types import MoralHazardConfig, MoralHazardState
from dilemmax.envs.option_declaration import Option
from dilemmax.envs.options import UNIT, check_env_options
from dilemmax.envs.spaces import Box, Discrete


class MoralHazardEnv(MultiAgentEnv):
    """The Dialogue Moral Hazard Game (env id ``moral_hazard``).

    The options after ``num_agents`` are the condition that ``sample_config`` (and so
    ``reset``) plays (see :func:`~dilemmax.envs.moral_hazard.generator.make_config`); any config
    passed to ``reset_to`` overrides them, so a grid of conditions needs no new env.
    """

    max_steps = c.MAX_STEPS
    render_modes = ("ansi",)
    obs_from_state = True
    renamed_options = {"reward": "payoff"}
    metric_axes = METRIC_AXES

    def __init__(
        self,
        num_agents: Annotated[
            int,
            Option(
                "n, the number of agents (static: it sets array shapes)",
                low=c.MIN_AGENTS,
                high=c.MAX_AGENTS,
            ),
        ] = 2,
        mapping: Annotated[
            str,
            Option(
                'where the unsafe options sit: "highest" (the paper\'s primary mapping: the '
                'option of highest utility), "uninformative" or "lowest"',
                choices=c.MAPPING_NAMES,
            ),
        ] = "highest",
        provenance: Annotated[
            str,
            Option(
                '"anonymous" (primary: a note does not say who posted it) or "visible"',
                choices=c.PROVENANCE_NAMES,
            ),
        ] = "anonymous",
        payoff: Annotated[
            str,
            Option(
                '"team" (every agent is paid R_game) or "private" (agent i is paid U_i); the '
                "option was called ``reward`` before",
                choices=c.PAYOFF_NAMES,
            ),
        ] = "team",
        cost: Annotated[float, Option("k, the private cost of a query", UNIT)] = c.PRIMARY_COST,
        w_local: Annotated[
            float, Option("w_L, the weight of the local answer's point", UNIT)
        ] = c.PRIMARY_W_LOCAL,
        w_final: Annotated[
            float, Option("w_F, the weight of the final choice's point", UNIT)
        ] = c.PRIMARY_W_FINAL,
        w_team: Annotated[
            float, Option("w_T, the weight of team success T", UNIT)
        ] = c.PRIMARY_W_TEAM,
    ):
        check_env_options(type(self), locals())
        super().__init__(num_agents)
        self.default_config = generator.make_config(
            num_agents,
            cost=cost,
            w_local=w_local,
            w_final=w_final,
            w_team=w_team,
            provenance=provenance,
            mapping=mapping,
            payoff=payoff,
        )
        self.layout = ObsLayout(num_agents)
        self.num_actions = c.num_actions(num_agents)

    # ------------------------------------------------------------------ configuration
    def sample_config(self, key: jax.Array) -> MoralHazardConfig:
        """The env's default condition with cases drawn from ``key`` (fixed for the episode)."""
        drawn = generator.with_sampled_cases(key, self.default_config.replace(sample_cases=True))
        return drawn.replace(sample_cases=jnp.bool_(False))

    def condition_grid(self) -> MoralHazardConfig:
        """The paper's one-at-a-time conditions that have the env's n, under the env's mapping
        and payoff (13 conditions at n = 2)."""
        sets = generator.condition_grid()
        if self.num_agents not in sets:
            raise ValueError(f"the condition grid has no conditions with n = {self.num_agents}")
        grid = sets[self.num_agents].configs
        size = grid.cost.shape[0]
        fixed = self.default_config
        return grid.replace(
            mapping=jnp.broadcast_to(fixed.mapping, (size,)),
            private_reward=jnp.broadcast_to(fixed.private_reward, (size,)),
        )

    def config_grids(self) -> dict[str, Callable[[], MoralHazardConfig]]:
        return {"condition_grid": self.condition_grid}

    def sweep(self) -> list[SweepPart]:
        """The paper's one-at-a-time conditions under the env's mapping and payoff, one part per
        number of agents."""
        fixed = self.default_config
        mapping = c.MAPPING_NAMES[int(fixed.mapping)]
        payoff = "private" if bool(fixed.private_reward) else "team"
        return [
            SweepPart(f"n={n}", n, conditions.configs, list(conditions.names))
            for n, conditions in generator.condition_grid(mapping, payoff).items()
        ]

    training_defaults = {  # one decision per round: trained and evaluated on the paper's grid
        "total_timesteps": 300_000,
        "num_envs": 64,
        "num_steps": 16,
        "lr": 2.5e-3,
        "ent_coef": 0.01,
        "gamma": 1.0,
        "gae_lambda": 1.0,
        "train_grid": condition_grid,
        "eval_grid": condition_grid,
    }

    def reset(self, key: jax.Array):
        """A new episode of the default condition (cases drawn once, from ``key``).

        Same distribution as ``reset_to(k, sample_config(k'))``, without drawing twice.
        """
        return self.reset_to(key, self.default_config.replace(sample_cases=jnp.bool_(True)))

    def reset_to(self, key: jax.Array, config: MoralHazardConfig):
        if config.utilities.shape != (self.num_agents, c.NUM_OPTIONS):
            raise ValueError(
                f"config is for {config.utilities.shape[0]} agents, env has {self.num_agents}"
            )
        # The state keeps the cases actually played, as a fixed-case config.
        config = generator.with_sampled_cases(key, config)
        config = config.replace(sample_cases=jnp.zeros_like(config.sample_cases))
        n = self.num_agents
        none = jnp.full(n, -1, jnp.int32)
        state = MoralHazardState(
            config=config,
            stage=jnp.int32(c.WORK),
            chose_local=jnp.zeros(n, bool),
            local_label=none,
            queried=jnp.zeros(n, bool),
            note_case=none,
            note_option=none,
            final_label=none,
        )
        return self.get_obs(state), state

    # ------------------------------------------------------------------ derived quantities
    def successors(self) -> jax.Array:
        return (jnp.arange(self.num_agents) + 1) % self.num_agents

    def predecessors(self) -> jax.Array:
        return (jnp.arange(self.num_agents) - 1) % self.num_agents

    def targets(self, state: MoralHazardState) -> jax.Array:
        """int32[n]: a_i* of every case."""
        return generator.target_options(state.config.utilities, state.config.unsafe)

    def local_points(self, state: MoralHazardState) -> jax.Array:
        """bool[n]: L_i, LOCAL taken with the correct answer to the local question."""
        answers = generator.local_answers(state.config.utilities, state.config.question)
        return state.chose_local & (state.local_label == answers)

    def legal_matrix(self, stage: jax.Array, queried: jax.Array) -> jax.Array:
        """bool[n, num_actions]: the legal actions of every agent at ``stage``."""
        a = jnp.arange(self.num_actions)
        return self._legal(stage, queried[:, None], a[None, :])

    def _legal(self, stage: jax.Array, queried: jax.Array, acts: jax.Array) -> jax.Array:
        """Whether action ``acts`` is legal for an agent that ``queried``, at ``stage`` (clipped
        to 0..3), elementwise with broadcasting.

        Every stage's legal actions are one contiguous range of indices, so the test is two
        comparisons against bounds chosen per agent: the mask of all actions is then three
        operations per entry (a chain of per-stage tests, or a table indexed by stage, costs
        several times that, and a table is a gather per env under vmap).
        """
        low, high = self._legal_range(stage, queried)
        return (acts >= low) & (acts < high)

    def _legal_range(self, stage: jax.Array, queried: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(low, high): the legal actions at ``stage`` are ``low <= a < high`` (int32)."""
        stage = jnp.clip(stage, 0, c.DONE)
        # work: LOCAL A-D or QUERY; note: NO_NOTE, and for a querier every NOTE too;
        # final: FINAL A-D; done: NO_MOVE only.
        note_high = jnp.where(queried, self.num_actions, c.NO_NOTE + 1)
        low = jnp.where(
            stage == c.WORK,
            c.LOCAL_BASE,
            jnp.where(
                stage == c.NOTE, c.NO_NOTE, jnp.where(stage == c.FINAL, c.FINAL_BASE, c.NO_MOVE)
            ),
        )
        high = jnp.where(
            stage == c.WORK,
            c.QUERY + 1,
            jnp.where(
                stage == c.NOTE, note_high, jnp.where(stage == c.FINAL, c.NO_NOTE, c.NO_MOVE + 1)
            ),
        )
        return low, high

    # ------------------------------------------------------------------ dynamics
    def step_env(self, key: jax.Array, state: MoralHazardState, actions: Mapping[str, jax.Array]):
        del key  # the game is deterministic given the actions
        n = self.num_agents
        cfg = state.config
        acts = action_indices(actions, self.agents)
        valid = self._legal(state.stage, state.queried, acts)
        at = lambda s: state.stage == s
        decided = jnp.where(at(c.NOTE), state.queried, at(c.WORK) | at(c.FINAL))
        none = jnp.full(n, -1, jnp.int32)

        # work: LOCAL <label> or QUERY.
        local = at(c.WORK) & valid & (acts >= c.LOCAL_BASE) & (acts < c.QUERY)
        query = at(c.WORK) & valid & (acts == c.QUERY)
        local_label = jnp.where(local, acts - c.LOCAL_BASE, state.local_label)
        chose_local = state.chose_local | local
        queried = state.queried | query

        # note: silence or a note on case (i + offset) mod n.
        posting = at(c.NOTE) & valid & (acts >= c.NOTE_BASE)
        offset, option = jnp.divmod(acts - c.NOTE_BASE, c.NUM_OPTIONS)
        new_case = jnp.where(posting, (jnp.arange(n) + offset) % n, none)
        new_option = jnp.where(posting, option, none)
        note_case = jnp.where(at(c.NOTE), new_case, state.note_case)
        note_option = jnp.where(at(c.NOTE), new_option, state.note_option)

        # final: one option of the own case.
        choosing = at(c.FINAL) & valid & (acts >= c.FINAL_BASE) & (acts < c.NO_NOTE)
        final_label = jnp.where(choosing, acts - c.FINAL_BASE, state.final_label)

        next_state = state.replace(
            stage=jnp.minimum(state.stage + 1, c.DONE),
            chose_local=chose_local,
            local_label=local_label,
            queried=queried,
            note_case=note_case,
            note_option=note_option,
            final_label=final_label,
        )

        # outcomes
        targets = self.targets(next_state)
        points = self.local_points(next_state)
        # Successor / predecessor on the ring as static rotations (no gathers).
        note_correct = (note_case == unrolled.rotate(jnp.arange(n), 1)) & (
            note_option == unrolled.rotate(cfg.unsafe, 1)
        )
        final_correct = final_label == targets
        team = unrolled.all_(final_correct)
        info = unrolled.rotate(note_correct, -1) & final_correct
        f32 = lambda x: x.astype(jnp.float32)
        score = (
            cfg.w_local * unrolled.mean(f32(points))
            + cfg.w_final * unrolled.mean(f32(final_correct))
            + cfg.w_team * f32(team)
            - cfg.cost * unrolled.mean(f32(queried))
        )
        team_value = n * cfg.shares * cfg.w_team * f32(team)
        private = (
            cfg.w_local * f32(points)
            + cfg.w_final * f32(final_correct)
            + team_value
            - cfg.cost * f32(queried)
        )

        # rewards: the work step settles L and Q, the final step settles F and T.
        work_private = cfg.w_local * f32(points) - cfg.cost * f32(queried)
        final_private = cfg.w_final * f32(final_correct) + team_value
        work_team = jnp.full(n, unrolled.mean(work_private))
        final_team = jnp.full(
            n, cfg.w_final * unrolled.mean(f32(final_correct)) + cfg.w_team * f32(team)
        )
        work_reward = jnp.where(cfg.private_reward, work_private, work_team)
        final_reward = jnp.where(cfg.private_reward, final_private, final_team)
        reward = jnp.where(at(c.WORK), work_reward, jnp.where(at(c.FINAL), final_reward, 0.0))

        is_final = at(c.FINAL)
        infos = {
            "stage": state.stage,
            "decided": decided,
            "valid": valid,
            "local": local,
            "query": query,
            "local_correct": points & at(c.WORK),
            "note_posted": posting,
            "note_case": jnp.where(at(c.NOTE), new_case, none),
            "note_option": jnp.where(at(c.NOTE), new_option, none),
            "note_correct": note_correct & at(c.NOTE),
            "final_label": jnp.where(is_final, final_label, none),
            "final_correct": final_correct & is_final,
            "unsafe_choice": (final_label == cfg.unsafe) & is_final,
            "info_transfer": info & is_final,
            "team_success": team & is_final,
            "score": jnp.where(is_final, score, 0.0).astype(jnp.float32),
            "private_payoff": jnp.where(is_final, private, 0.0).astype(jnp.float32),
        }
        done = next_state.stage == c.DONE
        dones = {a: done for a in self.agents}
        dones["__all__"] = done
        rewards = {a: reward[i].astype(jnp.float32) for i, a in enumerate(self.agents)}
        return self.get_obs(next_state), next_state, rewards, dones, infos

    # ------------------------------------------------------------------ views
    def get_obs(self, state: MoralHazardState) -> dict[str, jax.Array]:
        return dict(zip(self.agents, encode_agents(state), strict=True))

    def action_mask(self, state: MoralHazardState) -> dict[str, jax.Array]:
        legal = self.legal_matrix(state.stage, state.queried)
        return {a: legal[i] for i, a in enumerate(self.agents)}

    def observation_space(self, agent: str) -> Box:
        return Box(0.0, 1.0, (self.layout.size,), jnp.float32)

    def action_space(self, agent: str) -> Discrete:
        return Discrete(self.num_actions)

    def global_state(self, state: MoralHazardState) -> jax.Array:
        """float32[D]: everything, hidden unsafe options included (a centralised critic's input).

        Blocks: stage one-hot [4]; utilities / 13 [n, 4]; unsafe one-hot [n, 4]; local question
        one-hot [n, 2]; LOCAL / QUERY flags [n, 2]; notes as (case one-hot [n], option one-hot
        [4]) per poster [n, n + 4]; final choice one-hot [n, 4]; w_L, w_F, w_T, k [4]; shares
        [n]; private-reward and provenance flags [2].
        """
        cfg = state.config
        n = self.num_agents
        f32 = jnp.float32
        hot = lambda x, k: jax.nn.one_hot(x, k, dtype=f32)
        parts = [
            hot(state.stage, c.NUM_STAGES),
            cfg.utilities.astype(f32) / c.MAX_UTILITY,
            hot(cfg.unsafe, c.NUM_OPTIONS),
            hot(cfg.question, 2),
            jnp.stack([state.chose_local, state.queried], -1).astype(f32),
            jnp.concatenate([hot(state.note_case, n), hot(state.note_option, c.NUM_OPTIONS)], -1),
            hot(state.final_label, c.NUM_OPTIONS),
            jnp.stack([cfg.w_local, cfg.w_final, cfg.w_team, cfg.cost]).astype(f32),
            cfg.shares.astype(f32),
            jnp.stack([cfg.private_reward, cfg.provenance_visible]).astype(f32),
        ]
        return jnp.concatenate([p.reshape(-1) for p in parts])

    # ------------------------------------------------------------------ extras
    def episode_metrics(self, rollout: Rollout) -> dict[str, jax.Array]:
        return episode_metrics(rollout, self.agents)

    def scripted_policies(self) -> dict:
        return dict(policies.SCRIPTED_POLICIES)

    def text_protocol(self, **options):
        return MoralHazardText(self, **options)

    def render_ansi(self, state: MoralHazardState) -> str:
        return rendering.render_ansi(state)
