"""Language-model focal seats on a scenario set, through the batched play harness.

A model cannot sit inside a jitted :class:`~dilemmax.scenarios.env.ScenarioEnv` step, so here each
scenario of the set is one :class:`~dilemmax.llm.session.Part` of a play session on the full
game (built with the set's options): the focal seats are the user's seats (``--seat`` /
``--seats``: models, or any other seat kind), every background seat is the scenario's own
background spec, played by :class:`~dilemmax.llm.play.BatchedPlay` inside JAX as a jittable seat.
The session keeps a transcript in ``--out`` and ``--resume`` replays it, so a crash costs only the
calls in flight. Each scenario's score is the game's per-agent ``return`` metric averaged over the
focal seats (per capita), and over the background seats for the background's; the rows are
:class:`~dilemmax.scenarios.evaluate.ScenarioScore` rows as ``score_policy`` gives, so the same
summary table, plot and normalised score follow.

Key schedule. ``score_policy`` plays episode ``e`` of scenario ``s`` with the job key
``k = job_keys(seed_key, E, S)[s, e]``; ``ScenarioEnv.reset_to`` takes the game's configuration
from ``game_reset_keys(episode_keys(k)[1])[0]``. BatchedPlay on the full game would sample the
configuration from its own episode key instead, so here each scenario's part is given those very
configurations (:func:`scenario_configs`: one per episode, played once each). A model focal seat
therefore meets, episode by episode, the same layouts, rules, cases and costs as a jittable
population scored with the same ``--seed``. The reset and step keys still differ (the full
game's episode key comes from BatchedPlay's ``job_keys(seed_key, 1, E)``, and ScenarioEnv nests
the background's keys inside the game's step key), so a random background, a game with random
dynamics, or a game whose reset draws from its key plays other draws; where the background, the
dynamics and the reset are deterministic given the configuration, a focal seat that plays a
jittable policy's moves scores exactly what ``score_policy`` gives that policy (``test_play``
checks it with a planted model on the moral-hazard partner who never queries).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from dilemmax.envs.rollout import episode_keys, job_keys
from dilemmax.envs.seat_spec import parse_seat
from dilemmax.errors import UsageError
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.plan import CallPlan, plan_parts
from dilemmax.llm.play import PlayResult
from dilemmax.llm.seats import check_agents, check_specs
from dilemmax.llm.session import Part, output_paths, play_parts
from dilemmax.llm.session_options import (
    SessionOptions,
    model_identity,
    sampling_identity,
)
from dilemmax.scenarios.env import ScenarioEnv, game_reset_keys
from dilemmax.scenarios.evaluate import ScenarioScore
from dilemmax.scenarios.spec import ScenarioSet, ZooResolver
from dilemmax.statistics import t_interval


def scenario_configs(env: ScenarioEnv, key: jax.Array, episodes: int):
    """The game configurations ``score_policy(.., key, episodes)`` plays: leaves [S, E, ...]."""

    def config_of(job_key):
        _, key_reset, _ = episode_keys(job_key)
        key_config, _ = game_reset_keys(key_reset)
        return env.game.sample_config(key_config)

    keys = job_keys(key, episodes, env.num_scenarios)
    return jax.jit(jax.vmap(jax.vmap(config_of)))(keys)


def focal_specs(
    env: ScenarioEnv,
    seats: Mapping[str, str],
    default: str | None,
    generate: GenerateConfig | None = None,
    protocol: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """focal agent -> its seat spec (``seats``' own over ``default``), checked: a seat on a
    background agent, or a focal seat left without one, is a one-line error."""
    game = env.game
    named = dict(seats)
    check_agents(game, named)
    focal = [game.agents[i] for i in env.focal]
    background = sorted(set(named) - set(focal))
    if background:
        raise UsageError(
            f"--seat names background seat(s) {background}; the scenarios' focal seats are "
            f"{focal} (the background plays the others)"
        )
    missing = [a for a in focal if a not in named and not default]
    if missing:
        raise UsageError(f"no seat for focal agent(s) {missing}: add --seat or --seats")
    specs = {a: named.get(a, default) for a in focal}
    check_specs(game, specs, None, generate, protocol)
    return specs


def seat_spec(background: str, resolve_zoo: ZooResolver | None = None) -> str:
    """The play seat of a background spec: the spec itself (every seat kind seats in play, a
    ``zoo:`` one as the run and seed the zoo's manifest names, digest verified); with a caller's
    ``resolve_zoo``, a ``zoo:`` spec is the ``trained:`` seat of the folder it resolves to."""
    seat = parse_seat(background)
    if seat.kind != "zoo" or resolve_zoo is None:
        return background
    greedy = ",greedy" if seat.options.get("greedy") else ""
    return f"trained:{resolve_zoo(seat.target)},seed=0{greedy}"


def scenario_parts(
    scenarios: ScenarioSet,
    env: ScenarioEnv,
    key: jax.Array,
    episodes: int,
    resolve_zoo: ZooResolver | None = None,
) -> list[Part]:
    """One part per scenario: the full game with the scenario's background seats fixed, playing
    the configurations of :func:`scenario_configs` once each."""
    configs = scenario_configs(env, key, episodes)
    parts = []
    for s, scenario in enumerate(scenarios.scenarios):
        background = {
            env.game.agents[i]: seat_spec(spec, resolve_zoo)
            for i, spec in scenario.background.items()
        }
        parts.append(
            Part(
                scenario.name,
                env.game,
                jax.tree.map(lambda x, s=s: x[s], configs),
                [f"episode {e}" for e in range(episodes)],
                seats=background,
                episodes=1,
            )
        )
    return parts


def protocol_words(protocol: Mapping[str, Any]) -> list[str]:
    """Text-protocol options as the ``key=value`` words a run's identity has always named them
    by (``--protocol ask_rationale=true``)."""
    shown = {True: "true", False: "false"}
    return [f"{k}={shown.get(v, v) if isinstance(v, bool) else v}" for k, v in protocol.items()]


def play_identity(
    scenarios: ScenarioSet,
    digests: Mapping[str, str],
    specs: Mapping[str, str],
    options: SessionOptions,
    episodes: int,
) -> dict:
    """What the transcript is keyed by: a resume of another set, scenario version, seating or
    sampling is refused by the transcript (the keys and values runs have always had)."""
    identity = {
        "command": "scenarios evaluate",
        "set": scenarios.name,
        "digests": dict(digests),
        "seats": dict(specs),
        "seed": options.seed,
        "episodes": episodes,
        "envs": options.envs,
        "max_steps": options.max_steps,
        "protocol": protocol_words(options.protocol),
        "sampling": sampling_identity(options.generate),
    }
    model = model_identity(options.generate)  # options that change replies, when set
    if model:
        identity["model_options"] = model
    if options.on_call_error != "stop":
        identity["on_call_error"] = options.on_call_error
    return identity


def score_rows(
    scenarios: ScenarioSet,
    env: ScenarioEnv,
    results: Sequence[PlayResult],
    digests: Mapping[str, str],
) -> list[ScenarioScore]:
    """One row per scenario: the focal seats' per-capita ``return`` with its 95% interval."""
    focal = list(env.focal)
    others = [i for i in range(env.game.num_agents) if i not in env.focal]
    rows = []
    for scenario, result in zip(scenarios.scenarios, results, strict=True):
        returns = np.asarray(result.metrics["return"], np.float64)  # [E, A]
        mean, low, high = t_interval(returns[:, focal].mean(axis=1))
        background = float(returns[:, others].mean())
        episodes = returns.shape[0]
        rows.append(
            ScenarioScore(
                scenario.name, digests[scenario.name], mean, low, high, episodes, background
            )  # fmt: skip
        )
    return rows


def plan_scenarios(
    scenarios: ScenarioSet,
    env: ScenarioEnv,
    options: SessionOptions,
    episodes: int,
    resolve_zoo: ZooResolver | None = None,
) -> CallPlan:
    """What :func:`play_scenarios` with the same arguments would ask of its model seats (a
    :class:`~dilemmax.llm.plan.CallPlan`), with nothing played, called or written."""
    specs = focal_specs(env, options.seats, options.default_seat, options.generate,
                        options.protocol)  # fmt: skip
    parts = scenario_parts(scenarios, env, jax.random.key(options.seed), episodes, resolve_zoo)
    return plan_parts(parts, dataclasses.replace(options, seats=specs, default_seat=None))


def play_scenarios(
    scenarios: ScenarioSet,
    env: ScenarioEnv,
    options: SessionOptions,
    episodes: int,
    resolve_zoo: ZooResolver | None = None,
) -> tuple[list[ScenarioScore], list[PlayResult]]:
    """The focal seats of ``options`` (``seats`` over ``default_seat``; its model and run
    options as ``dilemmax play``'s) on every scenario of the set, ``episodes`` each: (rows,
    one PlayResult per scenario)."""
    specs = focal_specs(env, options.seats, options.default_seat, options.generate,
                        options.protocol)  # fmt: skip
    output_paths(options.out, options.resume)  # --out (made now), --resume's transcript
    digests = scenarios.digests(resolve_zoo)
    key = jax.random.key(options.seed)
    parts = scenario_parts(scenarios, env, key, episodes, resolve_zoo)
    # The focal seats by agent; the background seats come from the parts.
    seated = dataclasses.replace(options, seats=specs, default_seat=None)
    identity = play_identity(scenarios, digests, specs, seated, episodes)
    call_plan = plan_parts(parts, seated)  # printed before the first call
    if call_plan.seats:
        print(call_plan.format())
    session = play_parts(parts, seated, identity, "scenarios evaluate")
    if session.stopped is not None:  # a spending limit: no scores from unfinished scenarios
        session.stopped.partial = session.results
        raise session.stopped
    return score_rows(scenarios, env, session.results, digests), session.results
