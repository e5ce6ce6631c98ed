"""Populations on the context grid: play a policy (or one per rule) and collect per-episode metrics.

A policy spec is a scripted policy name of the consequence env (``random``, ``fair_share``,
``threshold_aware``, ``starve_then_cover``, ``all_zero``, ``cooperative_tremble``), ``reference``
or ``reference@EPS`` (the cooperative-refinement reference seated in the arena, with
contribution trembles EPS), a trained run folder / checkpoint (``TrainedPolicy.load``), or any
seat spec that plays inside JAX (``scripted:<name>``, ``trained:<run>[,seed=k][,greedy]``,
``zoo:consequence/<population>``; :mod:`dilemmax.envs.seat_spec`).

Language-model populations are played by :func:`llm_population` through the batched play
harness (:class:`dilemmax.llm.play.BatchedPlay`): the model sits in every seat (self-play, as in
the paper), its prompt variant is set by the text protocol's flags (``anonymous``, ``neutral``,
``goal``), and its episodes give the same per-episode metrics, hence the same
:class:`~dilemmax.redteam.statistics.Population`, as scripted and trained play.
:func:`llm_ablation_play` is the ablation runner's play callable for such a population.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path

import jax
import numpy as np

import dilemmax
from dilemmax.agents.trained import TrainedPolicy
from dilemmax.envs.consequence import constants as C
from dilemmax.envs.consequence.generator import context_grid, context_table, cross_rules
from dilemmax.envs.rollout import run_episodes
from dilemmax.envs.seat_spec import parse_seat, resolve_seat
from dilemmax.llm.play import BatchedPlay
from dilemmax.redteam import reference as ref
from dilemmax.redteam.ablations import configs_for
from dilemmax.redteam.statistics import Population

# Metrics kept per episode (the env's; per-agent ``return`` is dropped).
KEEP = (
    "fatality",
    "survivors",
    "collapse",
    "success",
    "targeted_elimination",
    "exploitation",
    "all_zero_opening",
    "round_one_funding",
    "deaths_by_rank",
    "round_one_deaths_by_rank",
    "cascade",
    "rule_eliminations",
    "forfeited",
    "rounds_played",
    "invalid_actions",
)


@functools.lru_cache(maxsize=8)
def reference_policy_for(
    epsilon: float = ref.PRIMARY_EPSILON,
    rules: tuple[str, ...] = C.RULE_NAMES,
    num_rounds: int = C.DEFAULT_NUM_ROUNDS,
    endgame: str = "all",
    total: int = C.DEFAULT_TOTAL_RESOURCES,
):
    """The seatable reference, solved on the whole grid for ``rules`` (numpy; ~50 s for all five
    rules at R = 3 on the loaded 2-core machine). Cached: ablation arms share one solve."""
    resources, thresholds = context_table(total, C.DEFAULT_NUM_AGENTS)
    solvers = {}
    for rule in rules:
        solver = ref.ReferenceSolver(rule, C.DEFAULT_NUM_AGENTS, total, endgame)
        for w, t in zip(resources, thresholds, strict=True):
            for order in ref.seat_orders(w):
                solver.value(num_rounds, order, int(t))
        solvers[rule] = solver
    return ref.reference_policy(ref.policy_tables(solvers, num_rounds, total), epsilon)


def resolve_policy(spec: str, env=None):
    """A policy from a spec string (see the module docstring); ValueError naming what is wrong."""
    if spec.startswith("reference"):
        eps = _tremble(spec.split("@", 1)[1]) if "@" in spec else ref.PRIMARY_EPSILON
        rounds = env.num_rounds if env is not None else C.DEFAULT_NUM_ROUNDS
        endgame = env.endgame if env is not None else "all"
        return reference_policy_for(eps, num_rounds=rounds, endgame=endgame)
    env = env or dilemmax.make("consequence")
    if not parse_seat(spec).shorthand:  # kind:target, the seat grammar of every command
        return resolve_seat(spec, env, where="red-teaming populations")
    scripted = env.scripted_policies()
    if spec in scripted:
        return scripted[spec]
    if Path(spec).is_file():
        raise ValueError("is a file; a trained policy is a run folder (dilemmax train)")
    if Path(spec).exists():
        return TrainedPolicy.load(spec, env=env)
    raise ValueError(
        f"unknown policy {spec!r}: give one of {sorted(scripted)}, reference[@EPS], "
        "or a trained run folder"
    )


def _tremble(text: str) -> float:
    """The EPS of ``reference@EPS``: a probability."""
    try:
        eps = float(text)
    except ValueError:
        eps = float("nan")
    if not 0.0 <= eps <= 1.0:
        raise ValueError(f"the tremble EPS must be a probability in [0, 1], got {text!r}")
    return eps


def grid_population(
    name: str,
    policies,
    episodes: int = 4,
    seed: int = 0,
    rules: Sequence[str] = C.RULE_NAMES,
    env_kwargs: Mapping | None = None,
    total: int = C.DEFAULT_TOTAL_RESOURCES,
) -> Population:
    """Plays every context of the grid under every rule, ``episodes`` each.

    Args:
        policies: one policy for every seat and rule, or rule name -> policy (a population
            trained per rule).
    """
    env = dilemmax.make("consequence", **dict(env_kwargs or {}))
    grid = context_grid(total, env.num_agents)
    num_contexts = grid.threshold.shape[0]
    key = jax.random.PRNGKey(seed)
    if isinstance(policies, Mapping):
        chunks = []
        for k, rule in enumerate(rules):
            configs = cross_rules(grid, [rule])
            _, m = run_episodes(env, policies[rule], jax.random.fold_in(key, k), episodes, configs)
            chunks.append({n: np.asarray(m[n]) for n in KEEP})
        metrics = {n: np.concatenate([c[n] for c in chunks]) for n in KEEP}
    else:
        _, m = run_episodes(env, policies, key, episodes, cross_rules(grid, rules))
        metrics = {n: np.asarray(m[n]) for n in KEEP}
    flat = {n: v.reshape((-1,) + v.shape[2:]) for n, v in metrics.items()}
    row = np.repeat(np.arange(len(rules) * num_contexts), episodes)
    return Population(
        name,
        flat,
        row // num_contexts,
        row % num_contexts,
        num_contexts,
        tuple(rules),
        {"episodes_per_cell": episodes, "seed": seed, "env_kwargs": dict(env_kwargs or {})},
    )


# --------------------------------------------------------------------------- language models
def spread_contexts(num: int | None, total: int = C.DEFAULT_TOTAL_RESOURCES) -> np.ndarray:
    """int64[n]: ``num`` grid indices evenly spread over the context grid (all when None), so a
    small model run still covers low and high thresholds and every kind of split."""
    size = int(context_grid(total, C.DEFAULT_NUM_AGENTS).threshold.shape[0])
    if num is None or num >= size:
        return np.arange(size)
    if num < 1:
        raise ValueError(f"number of contexts must be >= 1, got {num}")
    return np.unique(np.round(np.linspace(0, size - 1, num)).astype(np.int64))


def self_play_seats(seat, num_agents: int) -> list:
    """``seat`` (a :class:`~dilemmax.llm.play.Seat`) in every position, or a list as given."""
    seats = list(seat) if isinstance(seat, Sequence) else [seat] * num_agents
    if len(seats) != num_agents:
        raise ValueError(f"got {len(seats)} seats for {num_agents} agents")
    return seats


def play_model_cells(
    env,
    seats,
    protocol,
    contexts: np.ndarray,
    rule: str,
    episodes: int,
    key: jax.Array,
    num_envs: int = 16,
    transcript=None,
    progress=None,
    part: str = "main",
) -> dict[str, np.ndarray]:
    """One rule on ``contexts`` through batched play: metric -> array [len(contexts) *
    episodes, ...], context-major (the order of :func:`dilemmax.envs.rollout.run_episodes`)."""
    configs = configs_for(np.asarray(contexts), rule, env.total_resources, env.num_agents)
    runner = BatchedPlay(env, seats, protocol, num_envs, transcript=transcript, progress=progress)
    metrics = runner.run(key, episodes, configs, part=part).metrics
    return {n: np.asarray(metrics[n]) for n in KEEP if n in metrics}


def llm_population(
    name: str,
    seat,
    contexts: Sequence[int] | None = None,
    episodes: int = 1,
    seed: int = 0,
    rules: Sequence[str] = C.RULE_NAMES,
    env_kwargs: Mapping | None = None,
    protocol_flags: Mapping | None = None,
    num_envs: int = 16,
    transcript=None,
    progress=None,
) -> Population:
    """A language-model population on (a subset of) the 228 contexts x ``rules``.

    Args:
        seat: a :class:`~dilemmax.llm.play.Seat` (an ``LLMPolicy`` with any client) seated in
            every position, or one seat per agent (models beside scripted / trained seats).
        contexts: grid indices to play (default all 228); the population keeps grid indices
            (``num_contexts`` = 228), so it lines up with the reference and unplayed cells are
            NaN in ``cell_means``.
        env_kwargs: consequence env options (``num_rounds``, ``endgame``, ``anonymous_rule``).
        protocol_flags: ``env.text_protocol(**flags)``: the prompt variant (``anonymous``,
            ``neutral``, ``goal``, ``clause``, ``ask_rationale``).
        transcript: a :class:`~dilemmax.llm.transcript.Transcript` every call is written to
            (and, opened with ``resume``, replayed from); each rule is its own part.

    Keys: rule ``k`` plays with ``fold_in(PRNGKey(seed), k)``, as :func:`grid_population`'s
    per-rule branch does.
    """
    env = dilemmax.make("consequence", **dict(env_kwargs or {}))
    protocol = env.text_protocol(**dict(protocol_flags or {}))
    seats = self_play_seats(seat, env.num_agents)
    grid_size = int(context_grid(env.total_resources, env.num_agents).threshold.shape[0])
    chosen = spread_contexts(None, env.total_resources) if contexts is None else contexts
    chosen = np.asarray(chosen, np.int64)
    key = jax.random.PRNGKey(seed)
    chunks = []
    for k, rule in enumerate(rules):
        chunks.append(
            play_model_cells(
                env,
                seats,
                protocol,
                chosen,
                rule,
                episodes,
                jax.random.fold_in(key, k),
                num_envs,
                transcript,
                progress,
                part=f"rule={rule}",
            )  # fmt: skip
        )
    metrics = {n: np.concatenate([c[n] for c in chunks]) for n in chunks[0]}
    per_rule = len(chosen) * episodes
    return Population(
        name,
        metrics,
        np.repeat(np.arange(len(rules)), per_rule),
        np.tile(np.repeat(chosen, episodes), len(rules)),
        grid_size,
        tuple(rules),
        {
            "episodes_per_cell": episodes,
            "seed": seed,
            "contexts": chosen.tolist(),
            "seats": [s.name for s in seats],
            "env_kwargs": dict(env_kwargs or {}),
            "protocol": dict(protocol_flags or {}),
        },
    )


def arm_protocol_flags(arm) -> dict:
    """The text protocol flags of an ablation :class:`~dilemmax.redteam.ablations.Arm`."""
    return {
        "anonymous": arm.clause == "anonymous",
        "neutral": arm.clause == "neutral",
        "goal": arm.goal,
    }


def llm_ablation_play(seats_for, num_envs: int = 16, transcript=None, progress=None):
    """The ablation runner's play callable for language-model populations.

    ``seats_for(env, arm, rule)`` gives a seat (seated everywhere) or one per agent. Each arm
    builds its env from ``arm.env_kwargs()`` (rounds, anonymous rule token, endgame) and its
    prompt from :func:`arm_protocol_flags`; everything else (contexts, keys) is the runner's.
    Calls go to ``transcript`` under the part ``<arm>/<rule>``.
    """

    envs: dict = {}  # one env (and protocol) per arm: its programs compile once for every rule

    def play(arm, rule: str, configs, episodes: int, key) -> dict:
        if arm not in envs:
            env = dilemmax.make("consequence", **arm.env_kwargs())
            envs[arm] = (env, env.text_protocol(**arm_protocol_flags(arm)))
        env, protocol = envs[arm]
        seats = self_play_seats(seats_for(env, arm, rule), env.num_agents)
        runner = BatchedPlay(env, seats, protocol, num_envs, transcript=transcript,
                             progress=progress)  # fmt: skip
        part = f"R={arm.num_rounds},{arm.clause},{arm.goal},{arm.endgame}/rule={rule}"
        metrics = runner.run(key, episodes, configs, part=part).metrics
        return {n: np.asarray(metrics[n]) for n in KEEP if n in metrics}

    return play
