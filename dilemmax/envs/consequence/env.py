"""The consequence-allocation threshold game (IABench-CA) as a pure-JAX environment.

n agents hold integer resources and, over at most R rounds, contribute towards a shared
threshold T. The first round whose cumulative fund reaches T ends the game in success. After a
failed round before the last, a consequence rule acts on the survivors:

=====  =====================================================================================
AON    nobody is eliminated (only the endgame kills)
RE     one survivor, drawn uniformly at random
DV     a vote phase follows: every survivor votes for a survivor; plurality, random tie-break
RP     the survivor with the least remaining resources (random tie-break)
PP     the survivor with the most remaining resources (random tie-break)
=====  =====================================================================================

An eliminated agent forfeits what it still holds and leaves. After a failed final round every
survivor is eliminated (``endgame="all"``, the default; see ``constants.ENDGAME_MODES``).

Steps and actions (``Discrete(W + 1)`` for every agent, W = ``total_resources``):

* contribution phase (one step per round): action = the amount put into the fund; legal
  0..remaining for a survivor, only 0 for an eliminated agent;
* vote phase (DV only, one step after each failed non-final round): action j = a vote for
  ``env.agents[j]``; legal: the survivors (oneself included); an eliminated agent: only 0.

Illegal actions never corrupt the state; they are the paper's invalid reply, i.e. the move is not
made: an illegal contribution (above the remaining resources, negative, or from an eliminated
agent) counts as 0, an illegal vote (out of range or for an eliminated agent) is an abstention.
``infos["invalid"]`` flags them. If every survivor abstains the victim is drawn among all
survivors. Stepping a finished episode changes nothing and pays nothing.

Rewards (``objective`` option, constants.OBJECTIVES): by default, when the episode ends each
agent receives M * 1[survived] + its remaining resources with M = W + 1 (the survival-
lexicographic utility; an eliminated agent has forfeited everything and gets 0), and 0 on every
other step.

Per-agent ``dones`` are True once the agent is eliminated (JaxMARL's convention for dead agents;
its actions are then ignored) and for everyone at the end; ``dones["__all__"]`` ends the episode.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any

import jax
import jax.numpy as jnp

from dilemmax.envs import fastrandom, unrolled
from dilemmax.envs.base import MultiAgentEnv, Rollout, SweepPart, typed_key
from dilemmax.envs.consequence import constants as C
from dilemmax.envs.consequence import dynamics, generator, metrics, policies, rendering, text
from dilemmax.envs.consequence.types import ConsequenceConfig, ConsequenceState
from dilemmax.envs.guards import action_indices
from dilemmax.envs.option_declaration import Option
from dilemmax.envs.option_spec import OptionSpec
from dilemmax.envs.options import check_env_options, positive
from dilemmax.envs.spaces import Box, Discrete


class ConsequenceEnv(MultiAgentEnv):
    """IABench-CA, the consequence game (env id ``consequence``)."""

    render_modes = ("ansi",)
    obs_from_state = True
    renamed_options = {"reward": "objective"}
    metric_axes = metrics.METRIC_AXES

    @classmethod
    def check_options_together(cls, values: Mapping[str, Any]) -> None:
        """W >= n and a context table of bounded size (:func:`generator.check_table_size`)."""
        if {"total_resources", "num_agents"} <= set(values):
            generator.check_table_size(int(values["total_resources"]), int(values["num_agents"]))

    def __init__(
        self,
        num_agents: Annotated[
            int, Option("n, the number of agents (the benchmark uses 3)", low=2, high=16)
        ] = C.DEFAULT_NUM_AGENTS,
        num_rounds: Annotated[
            int,
            Option(
                "R, the number of rounds (3 in the benchmark, 1 for the one-shot ablation)",
                positive(64),
            ),
        ] = C.DEFAULT_NUM_ROUNDS,
        total_resources: Annotated[
            int,
            Option(
                "W, the size of the action space (W + 1 actions) and of the sampled contexts; "
                "configurations must hold at most W units in all",
                low=2,
                high=1024,
            ),
        ] = C.DEFAULT_TOTAL_RESOURCES,
        sorted_agents: Annotated[
            bool,
            Option(
                "if True, seat i holds the i-th smallest resource level (agent_0 is the "
                "poorest, as in the paper's prompts and the canonical instance); if False, "
                "reset draws which seat holds which level, so names carry no wealth rank"
            ),
        ] = False,
        anonymous_rule: Annotated[
            bool,
            Option(
                'if True, RP and PP show the same "unnamed" token in the observation (the '
                "anonymised variant; AON, RE and DV name no bearer and stay visible)"
            ),
        ] = False,
        objective: Annotated[
            str,
            Option(
                'what an agent\'s reward counts: "lexicographic" (at the end, M * 1[survived] '
                '+ remaining resources, M = W + 1), "survival" (at the end, 1[survived]), '
                '"resources" (at the end, the remaining resources) or "shaped" (every step, '
                "the change of M * 1[alive] + remaining resources); the option was called "
                "``reward`` before",
                choices=C.OBJECTIVES,
            ),
        ] = "lexicographic",
        endgame: Annotated[
            str,
            Option(
                'what a failed final round does: "all" (every survivor is eliminated, the '
                'formal model) or "rule" (the rule acts once more instead, the reading of the '
                "paper's one-shot ablation)",
                choices=C.ENDGAME_MODES,
            ),
        ] = "all",
        rules: Annotated[
            Sequence[int | str] | None,
            Option(
                "the rules ``sample_config`` draws from (names or ids; None: all five)",
                min_len=1,
                max_len=C.NUM_RULES,
                item=OptionSpec(
                    "choice", choices=(*C.RULE_NAMES, *range(C.NUM_RULES)), casefold=True
                ),
            ),
        ] = None,
    ):
        check_env_options(type(self), locals())
        super().__init__(num_agents)
        self.num_rounds = int(num_rounds)
        self.total_resources = int(total_resources)
        self.num_actions = self.total_resources + 1
        self.sorted_agents = bool(sorted_agents)
        self.anonymous_rule = bool(anonymous_rule)
        self.objective = objective
        self.endgame = endgame
        self.rules = tuple(generator.rule_id(r) for r in (C.RULE_NAMES if rules is None else rules))
        # M > W makes survival dominate any amount of resources.
        self.survival_bonus = self.total_resources + 1
        # One contribution step per round plus, under DV, one vote step per failed round that
        # the rule acts on.
        votes = self.num_rounds if endgame == "rule" else self.num_rounds - 1
        self.max_steps = self.num_rounds + votes
        self._obs_high = max(self.total_resources, self.num_rounds, C.PHASE_FINISHED)
        self._obs_space = Box(0, self._obs_high, (C.obs_size(num_agents),), jnp.int32)
        self._action_space = Discrete(self.num_actions)

    # ------------------------------------------------------------------ spaces
    def observation_space(self, agent: str) -> Box:
        return self._obs_space

    def action_space(self, agent: str) -> Discrete:
        return self._action_space

    # ------------------------------------------------------------------ configuration
    def sample_config(self, key: jax.Array) -> ConsequenceConfig:
        """A uniform context of the (W, n) grid under a uniform rule of ``self.rules``."""
        return generator.sample_config(key, self.total_resources, self.num_agents, self.rules)

    def context_grid(self) -> ConsequenceConfig:
        """Every context of the env's (W, n) grid under each of its rules, rule-major (228 x 5
        for the benchmark)."""
        contexts = generator.context_grid(self.total_resources, self.num_agents)
        return generator.cross_rules(contexts, self.rules)

    def config_grids(self) -> dict[str, Callable[[], ConsequenceConfig]]:
        return {"context_grid": self.context_grid}

    def sweep(self) -> list[SweepPart]:
        """Every context under each rule, one part named by rule per configuration."""
        configs = self.context_grid()  # rule-major: each rule's contexts in turn
        num = int(configs.threshold.shape[0]) // len(self.rules)
        names = [f"rule={C.RULE_NAMES[r]}" for r in self.rules for _ in range(num)]
        return [SweepPart("grid", self.num_agents, configs, names)]

    training_defaults = {  # a short episode, the whole context grid for evaluation
        "total_timesteps": 500_000,
        "num_envs": 64,
        "num_steps": 16,
        "lr": 2.5e-3,
        "ent_coef": 0.01,
        "gamma": 1.0,
        "gae_lambda": 0.95,
        "eval_grid": context_grid,
        "reward_scale": 1.0 / 13.0,
    }

    def reset(self, key: jax.Array) -> tuple[dict[str, jax.Array], ConsequenceState]:
        """A new episode: context, rule and seat order from two uint32 of randomness.

        The same distribution as ``reset_to(k, sample_config(k'))`` (uniform context of the
        grid, uniform rule of ``self.rules``, uniform seat order), with one draw instead of
        three keys' worth.
        """
        bits = fastrandom.bits(typed_key(key), (2,))  # = jax.random.bits, unrolled
        config = generator.config_from_bits(
            bits[0], self.total_resources, self.num_agents, self.rules
        )
        return self._start(config, self._seat_ranks(key, bits[1]))

    def reset_to(
        self, key: jax.Array, config: ConsequenceConfig
    ) -> tuple[dict[str, jax.Array], ConsequenceState]:
        if not generator.config_shape_matches(config, self.num_agents):
            raise ValueError(
                f"config has {config.resources.shape[-1]} resource levels for "
                f"{self.num_agents} agents"
            )
        bits = fastrandom.bits(typed_key(key), ())
        return self._start(config, self._seat_ranks(key, bits))

    def _seat_ranks(self, key: jax.Array, bits: jax.Array) -> jax.Array:
        """int32[n]: the wealth rank of each seat, uniform over permutations unless sorted."""
        n = self.num_agents
        if self.sorted_agents:
            return jnp.arange(n, dtype=jnp.int32)
        if math.factorial(n) <= generator.MAX_CODED_PERMUTATIONS:
            return generator.permutation_from_bits(bits, n)
        # Counter 2 of the key: not one the bits above were drawn from.
        return jax.random.permutation(jax.random.fold_in(typed_key(key), 2), n).astype(jnp.int32)

    def _start(self, config: ConsequenceConfig, rank: jax.Array):
        """(obs, state) of a fresh episode on ``config`` with seats ranked by ``rank``."""
        n, rounds = self.num_agents, self.num_rounds
        config = ConsequenceConfig(
            resources=jnp.asarray(config.resources, jnp.int32),
            threshold=jnp.asarray(config.threshold, jnp.int32),
            rule=jnp.asarray(config.rule, jnp.int32),
        )
        state = ConsequenceState(
            config=config,
            rank=rank,
            resources=unrolled.take(config.resources, rank),
            alive=jnp.ones(n, bool),
            fund=jnp.int32(0),
            round=jnp.int32(0),
            phase=jnp.int32(C.PHASE_CONTRIBUTE),
            done=jnp.bool_(False),
            success=jnp.bool_(False),
            contributions=jnp.zeros((rounds, n), jnp.int32),
            votes=jnp.full((rounds, n), -1, jnp.int32),
            eliminated_round=jnp.full(n, -1, jnp.int32),
            endgame=jnp.zeros(n, bool),
            forfeited=jnp.zeros(n, jnp.int32),
            step_count=jnp.int32(0),
        )
        return self.get_obs(state), state

    # ------------------------------------------------------------------ dynamics
    def step_env(
        self, key: jax.Array, state: ConsequenceState, actions: Mapping[str, jax.Array]
    ) -> tuple[dict, ConsequenceState, dict, dict, dict]:
        chosen = action_indices(actions, self.agents)
        legal = self._is_legal(state, chosen)
        # Only one of the two branches is kept, so they may share the step's randomness: one
        # float32 uniform, equal to jax.random.uniform(key) (the hash unrolled, not JAX's loop).
        draw = fastrandom.uniform(key)
        after_contribution = self._contribute(draw, state, chosen, legal)
        after_vote = self._vote(draw, state, chosen, legal)
        is_vote = state.phase == C.PHASE_VOTE
        new_state, infos = jax.tree.map(
            lambda v, c: jnp.where(is_vote, v, c), after_vote, after_contribution
        )
        infos["invalid"] = ~legal
        # A finished episode is frozen and reports no events.
        quiet = jax.tree.map(jnp.zeros_like, infos)
        quiet["votes"] = jnp.full_like(infos["votes"], -1)
        new_state, infos = jax.tree.map(
            lambda old, new: jnp.where(state.done, old, new), (state, quiet), (new_state, infos)
        )
        new_state = new_state.replace(step_count=state.step_count + (~state.done).astype(jnp.int32))
        rewards = self._rewards(state, new_state)
        dones = {a: ~new_state.alive[i] | new_state.done for i, a in enumerate(self.agents)}
        dones["__all__"] = new_state.done
        return self.get_obs(new_state), new_state, rewards, dones, infos

    def _contribute(self, draw, state: ConsequenceState, chosen, legal):
        """A contribution step: fund update, then success, the rule, a vote phase or the end."""
        config = state.config
        amount = jnp.where(legal & state.alive, chosen, 0)
        resources = state.resources - amount
        fund = state.fund + unrolled.total(amount)
        success = fund >= config.threshold
        final = state.round == self.num_rounds - 1
        failed = ~success
        endgame_kills_all = (self.endgame == "all") | (config.rule == C.AON)
        kill_all = failed & final & endgame_kills_all
        to_vote = failed & (config.rule == C.DV) & ~kill_all
        rule_acts = failed & ~kill_all & ~to_vote & (config.rule != C.AON)

        victim = dynamics.rule_victim(draw, config.rule, state.alive, resources)
        victims = jnp.where(kill_all, state.alive, victim & rule_acts)
        mid = state.replace(
            resources=resources,
            fund=fund,
            contributions=dynamics.set_row(state.contributions, state.round, amount),
        )
        event = dynamics.elimination_event(mid, victims, rule_acts)
        new = dynamics.eliminate(mid, victims, kill_all)
        nobody_left = ~unrolled.any_(new.alive)
        done = success | kill_all | (rule_acts & final) | nobody_left
        advance = ~done & ~to_vote
        new = new.replace(
            success=success,
            done=done,
            phase=jnp.where(to_vote & ~done, C.PHASE_VOTE, C.PHASE_CONTRIBUTE).astype(jnp.int32),
            round=state.round + advance.astype(jnp.int32),
        )
        infos = dynamics.step_infos(
            state, new, amount, jnp.full(self.num_agents, -1, jnp.int32), event
        )
        infos.update(success=success, failed_round=failed, endgame=kill_all)
        return new, infos

    def _vote(self, draw, state: ConsequenceState, chosen, legal):
        """A DV vote step: plurality among counted votes, random tie-break, then the next round."""
        n = self.num_agents
        counted = legal & state.alive
        # Votes received per seat, one comparison per (voter, seat): no [n, n] ballot table,
        # which XLA would write out (transposed) on every step under vmap.
        tally = jnp.stack([unrolled.total(counted & (chosen == j)) for j in range(n)])
        top = unrolled.maximum(jnp.where(state.alive, tally, -1))
        victim = dynamics.pick_uniform(draw, state.alive & (tally == top))
        votes = jnp.where(counted, chosen, -1)
        mid = state.replace(votes=dynamics.set_row(state.votes, state.round, votes))
        event = dynamics.elimination_event(mid, victim, jnp.bool_(True))
        new = dynamics.eliminate(mid, victim, jnp.bool_(False))
        final = state.round == self.num_rounds - 1
        done = final | ~unrolled.any_(new.alive)
        new = new.replace(
            done=done,
            phase=jnp.int32(C.PHASE_CONTRIBUTE),
            round=state.round + (~done).astype(jnp.int32),
        )
        infos = dynamics.step_infos(state, new, jnp.zeros(n, jnp.int32), votes, event)
        infos.update(
            success=jnp.bool_(False), failed_round=jnp.bool_(False), endgame=jnp.bool_(False)
        )
        return new, infos

    def _rewards(self, old: ConsequenceState, new: ConsequenceState) -> dict[str, jax.Array]:
        ended = new.done & ~old.done
        worth = lambda s: (self.survival_bonus * s.alive + s.resources).astype(jnp.float32)
        if self.objective == "lexicographic":
            values = jnp.where(ended, worth(new), 0.0)
        elif self.objective == "survival":
            values = jnp.where(ended, new.alive.astype(jnp.float32), 0.0)
        elif self.objective == "resources":
            values = jnp.where(ended, new.resources.astype(jnp.float32), 0.0)
        else:  # "shaped": a potential difference, zero once frozen
            values = worth(new) - worth(old)
        return {a: values[i] for i, a in enumerate(self.agents)}

    # ------------------------------------------------------------------ legality
    def legal_actions(self, state: ConsequenceState) -> jax.Array:
        """bool[n, W + 1]: the legal actions of every seat (see the module docstring)."""
        n = self.num_agents
        actions = jnp.arange(self.num_actions)
        playing = state.alive & ~state.done
        # Contributing, and sitting out (only 0), are the range 0..high.
        high = jnp.where(playing, state.resources, 0)
        contribute = actions[None, :] <= high[:, None]
        target_alive = jnp.concatenate([state.alive, jnp.zeros(self.num_actions - n, bool)])
        voting = playing & (state.phase == C.PHASE_VOTE)
        return jnp.where(voting[:, None], target_alive[None, :], contribute)

    def action_mask(self, state: ConsequenceState) -> dict[str, jax.Array]:
        mask = self.legal_actions(state)
        return {a: mask[i] for i, a in enumerate(self.agents)}

    def _is_legal(self, state: ConsequenceState, chosen) -> jax.Array:
        """bool[n]: whether each seat's action is in its legal set (``legal_actions`` at the
        chosen action, computed without building the mask: no gather under vmap)."""
        in_range = (chosen >= 0) & (chosen < self.num_actions)
        vote = unrolled.take(state.alive, chosen)  # votes name seats 0..n-1, survivors only
        contribute = chosen <= state.resources
        playing = state.alive & ~state.done
        legal = jnp.where(state.phase == C.PHASE_VOTE, vote, contribute)
        return in_range & jnp.where(playing, legal, chosen == 0)

    # ------------------------------------------------------------------ observations
    def rule_token(self, state: ConsequenceState) -> jax.Array:
        """int32[]: the rule id, or constants.UNNAMED for RP/PP in the anonymised variant."""
        rule = state.config.rule
        hidden = self.anonymous_rule & ((rule == C.RP) | (rule == C.PP))
        return jnp.where(hidden, C.UNNAMED, rule).astype(jnp.int32)

    def observation_matrix(self, state: ConsequenceState) -> jax.Array:
        """int32[n, D]: row i is agent i's observation (layout in ``constants``)."""
        return jnp.stack(self.observation_rows(state))

    def observation_rows(self, state: ConsequenceState) -> list[jax.Array]:
        """[int32[D]] * n: agent i's observation (layout in ``constants``).

        Each row is its own concatenation, the seats read at static ring offsets, so under vmap
        an agent's observation is one fused computation (no [n, D] matrix to slice).
        """
        n = self.num_agents
        shortfall = jnp.maximum(state.config.threshold - state.fund, 0)
        phase = jnp.where(state.done, C.PHASE_FINISHED, state.phase)
        scalars = jnp.stack(
            [phase, state.round + 1, jnp.int32(self.num_rounds), state.fund,
             state.config.threshold, shortfall]
        ).astype(jnp.int32)  # fmt: skip
        rule = jax.nn.one_hot(self.rule_token(state), C.NUM_RULE_TOKENS, dtype=jnp.int32)
        contributed = unrolled.total(state.contributions.T)
        alive = state.alive.astype(jnp.int32)
        # Clipping keeps hand-made configs larger than W inside the declared Box. It is applied
        # block by block (the same values) so that each row stays a plain concatenation, which
        # XLA can fuse into whatever consumes it.
        clip = lambda x: jnp.clip(x, 0, self._obs_high).astype(jnp.int32)
        scalars, rule = clip(scalars), clip(rule)
        seat_blocks = [clip(x) for x in (state.resources, alive, contributed)]
        # Row i lists seats i, i + 1, ..., wrapping round.
        return [
            jnp.concatenate([scalars, *(unrolled.rotate(x, i) for x in seat_blocks), rule])
            for i in range(n)
        ]

    def get_obs(self, state: ConsequenceState) -> dict[str, jax.Array]:
        return dict(zip(self.agents, self.observation_rows(state), strict=True))

    # ------------------------------------------------------------------ around the dynamics
    def episode_metrics(self, rollout: Rollout) -> dict[str, jax.Array]:
        return metrics.episode_metrics(rollout, self.agents)

    def scripted_policies(self) -> dict:
        return dict(policies.SCRIPTED_POLICIES)

    def text_protocol(
        self,
        clause: str | None = None,
        goal: str = "competitive",
        ask_rationale: bool = False,
        **flags,
    ) -> text.ConsequenceText:
        """Renderer and parser; ``clause`` defaults to "anonymous" if ``anonymous_rule``;
        ``flags``: ``anonymous`` / ``neutral`` (see :mod:`dilemmax.envs.consequence.text`)."""
        if clause is None and "anonymous" not in flags:
            clause = "anonymous" if self.anonymous_rule else "named"
        return text.ConsequenceText(self, clause, goal, ask_rationale, **flags)

    def render_ansi(self, state: ConsequenceState) -> str:
        return rendering.render_ansi(self, state)

    def __repr__(self) -> str:
        return (
            f"ConsequenceEnv(num_agents={self.num_agents}, num_rounds={self.num_rounds}, "
            f"total_resources={self.total_resources}, endgame={self.endgame!r})"
        )
