"""``dilemmax scenarios`` from Python: :func:`evaluate_scenarios` and :func:`scenario_listing`.

    from dilemmax.scenarios.api import evaluate_scenarios

    evaluation = evaluate_scenarios("moral_hazard", "scripted:teacher", episodes=8, seed=0)
    evaluation.rows[0]["mean"], evaluation.rows[0]["normalised"]

    # language-model focal seats, through the batched play harness (transcript in out):
    from dilemmax.llm.config import GenerateConfig

    evaluation = evaluate_scenarios(
        "moral_hazard", "openai:my-model", episodes=8, out="runs/mh-model",
        generate=GenerateConfig(base_url="http://localhost:8000/v1"),
    )

The command ``dilemmax scenarios evaluate`` is this function's command line: it builds the same
arguments from its flags, calls it, prints the table and writes ``--json``. Same arguments, same
seeds: the same rows, references and ``results.json``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax

from dilemmax.commandline import output_folder
from dilemmax.envs.memory import check_episodes_fit, check_waves_fit
from dilemmax.envs.option_spec import shown
from dilemmax.envs.registry import make
from dilemmax.envs.seat_spec import is_model_seat
from dilemmax.envs.typecheck import typed_arguments
from dilemmax.errors import UsageError
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.limits import LimitReached, Limits, partial_fields
from dilemmax.llm.plan import CallPlan
from dilemmax.llm.policy import CallStats
from dilemmax.llm.pricing import Price, seat_price
from dilemmax.llm.sampling import check_option
from dilemmax.llm.session_options import PLAY_SEED, SessionOptions
from dilemmax.runlock import RunLock, last_writer, refuse_other_writer
from dilemmax.scenarios import evaluate as E
from dilemmax.scenarios import registry
from dilemmax.scenarios.focal import focal_policy, zoo_populations
from dilemmax.scenarios.play import plan_scenarios, play_scenarios
from dilemmax.scenarios.registry import SET_GAMES, SETS

COMMAND = "scenarios evaluate"  # what its run folders' lock records (runlock.last_writer)


class FocalError(UsageError):
    """The focal population's spec names no population that can play these scenarios (the
    command names the flag it came from)."""


def check_game(game: str) -> None:
    """Raises a one-line :class:`UsageError` unless ``game`` has scenario sets."""
    if game not in SET_GAMES:
        raise UsageError(f"--game {shown(game, 80)}: no scenario sets; games: {SET_GAMES}")


# --------------------------------------------------------------------------- list
@typed_arguments
def scenario_listing(game: str | None = None) -> list[dict]:
    """Every scenario of the registered sets (of ``game``, or all): per set its options, and
    per scenario its name, description, focal and background seats and digest."""
    if game is not None:
        check_game(game)
    out = []
    for set_name in (n for n in SETS if game is None or SETS[n].game == game):
        scenarios = SETS[set_name]
        first = scenarios.scenarios[0]
        agents = make(first.game, **dict(first.options)).agents
        digests = scenarios.digests()
        rows = [
            {
                "scenario": s.name,
                "description": s.description,
                "focal": [agents[i] for i in s.focal],
                "background": {agents[i]: spec for i, spec in sorted(s.background.items())},
                "digest": digests[s.name],
            }
            for s in scenarios.scenarios
        ]
        out.append({"set": set_name, "options": dict(first.options), "scenarios": rows})
    return out


# --------------------------------------------------------------------------- evaluate
@dataclass(frozen=True)
class ScenarioEvaluation:
    """A focal population scored on a scenario set.

    Attributes:
        set: the set's name (``moral_hazard/test``).
        focal: the focal population as named in results (its seat spec, or the model seats).
        seed, episodes, max_steps: how it was played (episodes per scenario).
        scores: one :class:`~dilemmax.scenarios.evaluate.ScenarioScore` per scenario.
        references: scenario -> random / best reference (None: not computed).
        rows: each score with its references and normalised score (``results.json``'s rows).
        calls: model seat -> its calls (None: no model seats).
        out: the folder summary.md, summary.png and results.json were written to (None: none).
    """

    set: str
    focal: str
    seed: int
    episodes: int
    max_steps: int | None
    scores: list[E.ScenarioScore]
    references: dict[str, dict] | None
    rows: list[dict]
    calls: dict[str, dict] | None = None
    out: Path | None = None
    stopped: LimitReached | None = None  # a spending limit stopped it: no rows, calls so far

    @property
    def title(self) -> str:
        return f"{self.set}: {self.focal}"

    def table(self) -> str:
        """The markdown table of the rows (summary.md's)."""
        return E.summary_table(self.rows)

    def to_json(self) -> dict:
        """``results.json``'s content (JSON has no infinity: an unbounded interval is null)."""
        payload = {
            "set": self.set,
            "focal": self.focal,
            "seed": self.seed,
            "episodes": self.episodes,
            "max_steps": self.max_steps,
            "references": self.references or None,
            "rows": self.rows,
            **({"calls": self.calls} if self.calls is not None else {}),
            **partial_fields(self.stopped),
        }
        return _json_safe(payload)


@typed_arguments
def evaluate_scenarios(
    game: str,
    focal: str | None = None,
    *,
    seats: Mapping[str, str] | None = None,
    default_seat: str | None = None,
    scenario_set: str = "test",
    episodes: int = 8,
    seed: int = 0,
    references: bool = True,
    max_steps: int | None = None,
    generate: GenerateConfig | None = None,
    protocol: Mapping[str, Any] | None = None,
    envs: int = 16,
    on_call_error: str = "stop",
    out: str | Path | None = None,
    resume: bool = False,
    progress: bool = False,
    limits: Limits | None = None,
    cache: str | Path | bool | None = None,
    prices: Mapping[str, Price] | None = None,
    plan: bool = False,
) -> ScenarioEvaluation | CallPlan:
    """Scores a focal population on ``game``'s scenario set ``scenario_set``, ``episodes`` each.

    Args:
        game: a game with scenario sets (:data:`~dilemmax.scenarios.registry.SET_GAMES`).
        focal: the seat spec of every focal seat: ``scripted:<name>``, ``trained:<run>[,seed=
            <k>][,greedy]``, ``zoo:<game>/<population>[,greedy]`` (played inside JAX, every
            scenario in one program), or a model (``openai:<model>``, ...), which plays as
            ``default_seat``.
        seats, default_seat: the focal seats played through the batched harness instead (as
            ``dilemmax play`` seats them: any kind, models among them): focal agent -> seat
            spec, and the spec of every focal seat ``seats`` leaves out.
        scenario_set: ``"train"`` or ``"test"``.
        references: also score random focal agents and every zoo population of the game (the
            normalised score's ends).
        max_steps: stop each episode after this many steps.
        generate, protocol, envs, on_call_error, resume, progress, limits, cache: the
            batched harness's options, as :func:`dilemmax.llm.api.play_session`'s (model seats
            only); a spending limit reached gives no rows (``stopped``, results.json partial).
        out: the folder of summary.md, summary.png and results.json (and a model run's
            transcript).
        prices: model -> :class:`~dilemmax.llm.pricing.Price`, for the plan's and the calls'
            costs (a seat's own ``price=`` comes first).
        plan: return the model seats' :class:`~dilemmax.llm.plan.CallPlan` (calls, tokens and
            cost) without calling any model or writing anything.

    Every mistake is a one-line :class:`~dilemmax.errors.UsageError` before anything plays.
    """
    check_game(game)
    seats = dict(seats or {})
    if focal is not None and (seats or default_seat is not None):
        raise UsageError("name one focal population: a focal seat spec, or seats and a default")
    if focal is not None and is_model_seat(focal):
        focal, default_seat = None, focal  # a model plays through the batched harness
    batched = bool(seats) or default_seat is not None
    if not batched and focal is None:
        raise UsageError("name one focal population: a focal seat spec, or seats and a default")
    if max_steps is not None and max_steps < 1:
        raise UsageError("--max-steps must be >= 1")
    check_option(seed, PLAY_SEED, "--seed")  # every session's seeds, JAX focal seats' too
    if not batched and resume:
        raise UsageError("--resume is for --seat/--seats focal seats (their transcript)")
    out = None if out is None else Path(out)
    if out is not None:
        _check_out_is_ours(out)
    scenarios = registry.scenario_set(game, scenario_set)
    env = scenarios.build()
    _check_size(env, batched, episodes, envs, max_steps)
    key = jax.random.key(seed)
    populations = zoo_populations(env, game) if references else None
    calls = None
    if plan and not batched:  # focal seats inside JAX: no model call to plan
        return CallPlan((), episodes * len(env.names), 0)
    if batched:
        options = SessionOptions(
            seats=seats, default_seat=default_seat, generate=generate or GenerateConfig(),
            protocol=dict(protocol or {}), envs=envs, seed=seed, max_steps=max_steps,
            on_call_error=on_call_error, out=out, resume=resume, progress=progress,
            prices=dict(prices or {}), limits=limits or Limits(), cache=cache,
        )  # fmt: skip
        if plan:
            return plan_scenarios(scenarios, env, options, episodes)
        label = ", ".join([*(f"{a}={s}" for a, s in seats.items()),
                           *([f"--seats {default_seat}"] if default_seat else [])])  # fmt: skip
        try:
            scores, played = play_scenarios(scenarios, env, options, episodes)
        except LimitReached as stop:  # every call made is in the transcript: resume later
            calls = call_summary(stop.partial, options.prices)
            evaluation = ScenarioEvaluation(scenarios.name, label, seed, episodes, max_steps,
                                            [], None, [], calls, out, stop)  # fmt: skip
            if out is not None:
                with RunLock(out, COMMAND):
                    (out / "results.json").write_text(json.dumps(evaluation.to_json()) + "\n")
            return evaluation
        calls = call_summary(played, options.prices)
    else:
        try:
            policy = focal_policy(focal, env, game)
        except UsageError as error:
            raise FocalError(str(error)) from error
        label = focal
        if out is not None:
            output_folder(out, "--out")
        scores = E.score_policy(scenarios, policy, key, episodes, env, None, max_steps)
    refs = {}
    if populations is not None:
        refs = E.references(scenarios, populations, key, episodes, env, None, max_steps)
    evaluation = ScenarioEvaluation(
        scenarios.name, label, seed, episodes, max_steps, scores, refs or None,
        E.summary_rows(scores, refs), calls, out,
    )  # fmt: skip
    if out is not None:
        write_evaluation(evaluation, out)
    return evaluation


def _check_out_is_ours(out: Path) -> None:
    """``out`` is new, or an earlier ``scenarios evaluate`` folder: summary.md, summary.png and
    results.json written over another command's (an experiment's, a play run's) would destroy
    them. A folder no lock ever recorded is judged by its results.json."""
    refuse_other_writer(out, COMMAND)
    path = out / "results.json"
    if last_writer(out) is not None or not path.exists():
        return
    try:
        earlier = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        earlier = None
    if not (isinstance(earlier, dict) and {"set", "focal", "rows"} <= earlier.keys()):
        raise UsageError(
            f"--out {out} holds a results.json that is not a scenarios evaluation; "
            "choose a new folder"
        )


def _check_size(env, batched: bool, episodes: int, envs: int, max_steps: int | None) -> None:
    """Refuses, before anything loads or plays, ``episodes`` (and ``envs``) beyond this
    machine's memory: each scenario's episodes play in one compiled program, or model seats play
    in waves of ``envs`` (:mod:`dilemmax.envs.memory`)."""
    total = episodes * len(env.names)
    if batched:
        check_waves_fit(env, envs, total, COMMAND, "--envs or --episodes")
    else:
        check_episodes_fit(env, total, COMMAND, "--episodes", None, max_steps)


def write_evaluation(evaluation: ScenarioEvaluation, out: str | Path) -> None:
    """summary.md, summary.png and results.json in the folder ``out``, held locked."""
    out = Path(out)
    with RunLock(out, COMMAND):
        (out / "summary.md").write_text(f"# {evaluation.title}\n\n{evaluation.table()}")
        E.summary_plot(evaluation.rows, out / "summary.png", evaluation.title)
        (out / "results.json").write_text(json.dumps(evaluation.to_json(), indent=1) + "\n")


def call_summary(results, prices: Mapping[str, Price] | None = None) -> dict:
    """seat -> its model calls over every scenario (calls, tokens, errors, retries, cost at
    ``prices``)."""
    stats: dict[str, CallStats] = {}
    for result in results:
        for seat, s in result.stats.items():
            stats[seat] = stats.get(seat, CallStats()).merged(s)
    return {seat: s.summary(seat_price(seat, prices or {})) for seat, s in stats.items()}


def _json_safe(tree):
    if isinstance(tree, dict):
        return {k: _json_safe(v) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return [_json_safe(v) for v in tree]
    if isinstance(tree, float) and not math.isfinite(tree):
        return None
    return tree
