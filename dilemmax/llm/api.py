"""``dilemmax play`` from Python: :func:`play_session` and :func:`merge_play_shards`.

    from dilemmax.llm.api import play_session
    from dilemmax.llm.config import GenerateConfig

    run = play_session(
        "moral_hazard",
        seats={"agent_1": "scripted:teacher"},
        default_seat="openai:my-model",
        generate=GenerateConfig(base_url="http://localhost:8000/v1", temperature=0.7),
        episodes=20,
        out="runs/mh",
    )
    run.summary["all"]["team_reward"]  # (mean, low, high)

The command ``dilemmax play`` is this function's command line: it builds the same typed options
from its flags, calls it, prints the :class:`PlayRun` and writes ``--json``. Same arguments, same
seeds: same episodes, metrics, summary and transcript.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.option_spec import shown
from dilemmax.envs.registry import env_spec, make, registered_envs
from dilemmax.envs.typecheck import typed_arguments
from dilemmax.errors import UsageError
from dilemmax.llm import shards
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.limits import LimitReached, Limits, partial_fields
from dilemmax.llm.plan import CallPlan, plan_parts
from dilemmax.llm.play import PlayResult
from dilemmax.llm.policy import CallStats
from dilemmax.llm.pricing import Price, seat_price
from dilemmax.llm.results import summarize
from dilemmax.llm.session import Part, play_parts
from dilemmax.llm.session_options import (
    SessionOptions,
    Shard,
    model_identity,
    sampling_identity,
)

COMMAND = "play"  # the command a play run's folder lock and shard records name


# --------------------------------------------------------------------------- env and grids
def held_out_options(env_id: str, options: Mapping[str, Any]) -> dict:
    """The env options of a play run: the game's ``evaluation_options`` (a grid game's held-out
    split: language-model runs evaluate on unseen layouts and rules) under ``options``."""
    try:
        env_class = env_spec(env_id).load()
    except ValueError as error:
        raise UsageError(str(error)) from error
    options = dict(options)
    for name, value in env_class.evaluation_options.items():
        options.setdefault(name, value)
    return options


def _make_env(env_id: str, options: Mapping[str, Any]):
    try:
        return make(env_id, **options)
    except (TypeError, ValueError) as error:
        raise UsageError(f"{env_id}: {error}") from error


def grid_parts(
    env_id: str, env, options: Mapping[str, Any]
) -> list[tuple[str, Any, Any, list[str]]]:
    """(part name, env, batched configs, config names) per part of the game's sweep
    (:meth:`~dilemmax.envs.base.MultiAgentEnv.sweep`); a part of another size plays an env made
    from ``options`` with its number of agents."""
    parts = env.sweep()
    if not parts:
        raise UsageError(f"{env_id} has no sweep grid (--grid is for {', '.join(sweep_games())})")
    return [
        (
            part.name,
            env
            if part.num_agents == env.num_agents
            else _make_env(env_id, {**options, "num_agents": part.num_agents}),
            part.configs,
            part.config_names,
        )
        for part in parts
    ]


def sweep_games() -> list[str]:
    """The registered games that declare a sweep (``--grid``)."""
    return [g for g in registered_envs() if env_spec(g).load().sweep is not MultiAgentEnv.sweep]


# --------------------------------------------------------------------------- results
@dataclass
class PlayRun:
    """What a play run gave.

    Attributes:
        env: the env id played.
        summary: group -> metric -> (mean, low, high), a 95% bootstrap interval. The group is
            ``"all"``, or with ``grid`` each configuration's name (a moral-hazard condition, a
            consequence rule).
        calls: seat name -> its model calls' counts (:class:`~dilemmax.llm.policy.CallStats`).
        episodes: one dict per episode: id, part, group, seating, steps, truncated, metrics.
        parts: one :class:`~dilemmax.llm.play.PlayResult` per part (the arrays themselves).
        wall_s: seconds the parts took to play.
        max_steps: the run's step cap (None: the game's own end).
        out: the run folder (None: nothing written).
        metric_axes: metric -> its axes, as the game declares them (``env.metric_axes``:
            ``[]`` scalar, ``["trial"]``, ``["agent"]``, ``["trial", "agent"]``, ...): what
            each axis of an episode's metric indexes, and what the summary's names say.
        stopped: the spending limit that stopped the run (its episodes: those that finished;
            results.json says ``"partial": true``); None when it played to the end.
    """

    env: str
    summary: dict[str, dict[str, tuple[float, float, float]]]
    calls: dict[str, CallStats]
    episodes: list[dict]
    parts: list[PlayResult] = field(repr=False)
    wall_s: float
    max_steps: int | None = None
    out: Path | None = None
    metric_axes: dict[str, list[str]] = field(default_factory=dict)
    stopped: LimitReached | None = None
    prices: Mapping[str, Price] = field(default_factory=dict)  # for the seats' costs

    @property
    def truncated(self) -> int:
        """Episodes stopped at ``max_steps``."""
        return sum(bool(e["truncated"]) for e in self.episodes)

    def to_json(self) -> dict:
        """What ``results.json`` (and ``dilemmax play --json``) holds."""
        return {
            "summary": {
                g: {m: list(v) for m, v in rows.items()} for g, rows in self.summary.items()
            },
            "calls": {
                seat: s.summary(seat_price(seat, self.prices)) for seat, s in self.calls.items()
            },
            "metric_axes": self.metric_axes,
            "episodes": self.episodes,
            **partial_fields(self.stopped),
        }


def _play_run(env_id: str, parts: Sequence[PlayResult], max_steps, out) -> PlayRun:
    """The run's summary, call counts and episodes (each episode's info with its metrics)."""
    calls: dict[str, CallStats] = {}
    for result in parts:
        for seat, s in result.stats.items():
            calls[seat] = calls.get(seat, CallStats()).merged(s)
    axes = _metric_axes(env_id)
    summary = summarize([(r.metrics, r.episodes) for r in parts], axes, lambda i: i["group"])
    episodes = [
        {**e, "metrics": {k: np.asarray(v[i]).tolist() for k, v in r.metrics.items()}}
        for r in parts
        for i, e in enumerate(r.episodes)
    ]
    wall = float(sum(r.wall_s for r in parts))
    played_axes = {k: list(axes[k]) for r in parts for k in r.metrics}
    return PlayRun(env_id, summary, calls, episodes, list(parts), wall, max_steps, out, played_axes)


def _metric_axes(env_id) -> Mapping[str, tuple[str, ...]]:
    """The axes the game ``env_id`` declares for its metrics (a merge reads the id from the
    shards' records)."""
    try:
        return env_spec(env_id).load().metric_axes
    except (TypeError, ValueError) as error:
        raise UsageError(f"cannot read the metrics of env {shown(env_id)}: {error}") from error


def _write_results(run: PlayRun) -> None:
    if run.out is not None:
        text = json.dumps(run.to_json(), indent=1, default=str) + "\n"
        (run.out / "results.json").write_text(text)


# --------------------------------------------------------------------------- the session
SESSION = SessionOptions()  # the session options' defaults (progress aside: off from Python)


@typed_arguments
def play_session(
    env: str,
    *,
    options: SessionOptions | None = None,
    seats: Mapping[str, str] | None = None,
    default_seat: str | None = None,
    episodes: int = 1,
    seed: int = SESSION.seed,
    envs: int = SESSION.envs,
    max_steps: int | None = None,
    env_options: Mapping[str, Any] | None = None,
    protocol: Mapping[str, Any] | None = None,
    generate: GenerateConfig | None = None,
    grid: bool = False,
    rotate: bool = False,
    on_call_error: str = SESSION.on_call_error,
    out: str | Path | None = None,
    resume: bool = False,
    shard: Shard | str | None = None,
    progress: bool = False,
    limits: Limits | None = None,
    cache: str | Path | bool | None = None,
    prices: Mapping[str, Price] | None = None,
    plan: bool = False,
) -> PlayRun | CallPlan:
    """Plays ``episodes`` episodes of the game ``env`` with the seats given, batched.

    Args:
        env: the env id (``dilemmax.registered_envs()``).
        options: the session's options as one
            :class:`~dilemmax.llm.session_options.SessionOptions` (what ``dilemmax play``
            hands over), instead of the keywords from ``seats`` to ``prices`` below; giving
            both is an error.
        seats: agent -> seat spec (``"openai:m"``, ``"scripted:teacher"``,
            ``"hf:./model,adapter=./lora"``, ``"trained:runs/x,seed=1"``).
        default_seat: the spec of every agent ``seats`` leaves out.
        episodes: episodes (per grid configuration with ``grid``).
        seed: the run's seed; envs: environments stepped together; max_steps: a step cap.
        env_options: the env's constructor options (``split`` defaults to ``"held_out"``).
        protocol: text-protocol options (``{"memory_rounds": 2}``).
        generate: the model options of every model seat (a seat's spec may override them).
        grid: sweep the paper's grid (consequence: contexts x rules; moral_hazard: 15
            conditions); rotate: play every seating rotation.
        on_call_error: ``"stop"`` (resume later) or ``"invalid"`` (play the invalid move).
        out: the run folder (``transcript.jsonl``, ``results.json``); resume: continue it.
        shard: ``"i/N"`` or :class:`~dilemmax.llm.session_options.Shard`: play every N-th episode
            (``out`` then also holds ``shard.json``; :func:`merge_play_shards` joins them).
        progress: a progress bar on stderr.
        limits: what the run may spend (:class:`~dilemmax.llm.limits.Limits`); a limit reached
            stops it with the finished episodes as a partial result (``PlayRun.stopped``).
        cache: the response cache's folder (True: ``~/.cache/dilemmax/responses``).
        prices: model -> :class:`~dilemmax.llm.pricing.Price` (``load_prices(FILE)``), for
            the plan's and the results' costs (a seat's own ``price=`` comes first).
        plan: return the run's :class:`~dilemmax.llm.plan.CallPlan` (calls, tokens and cost
            per model seat) without calling any model or writing anything. A real run prints
            the same plan before its first call.

    Every mistake (an argument of the wrong kind, an unknown seat kind, option or agent, a value
    out of range, an unwritable folder) is a one-line :class:`~dilemmax.errors.UsageError` before
    any call is made.
    """
    keywords = {
        "seats": seats, "default_seat": default_seat, "generate": generate,
        "protocol": protocol, "envs": envs, "seed": seed, "max_steps": max_steps,
        "on_call_error": on_call_error, "out": out, "resume": resume, "progress": progress,
        "shard": shard, "limits": limits, "cache": cache, "prices": prices,
    }  # fmt: skip
    options = _session_options(options, keywords)
    if episodes < 1:
        raise UsageError("--episodes and --envs must be >= 1")
    if grid and env not in sweep_games():
        raise UsageError(f"{env} has no sweep grid (--grid is for {', '.join(sweep_games())})")
    made_options = held_out_options(env, env_options or {})
    game = _make_env(env, made_options)
    planned = grid_parts(env, game, made_options) if grid else [("main", game, None, None)]
    parts = [
        Part(name, part_env, configs, names, episodes=episodes, rotate=rotate)
        for name, part_env, configs, names in planned
    ]
    identity = play_identity(env, made_options, options, episodes, grid, rotate)
    call_plan = plan_parts(parts, options)
    if plan:
        return call_plan
    if call_plan.seats:
        print(call_plan.format())
    session = play_parts(parts, options, identity, COMMAND)
    for part, result in zip(parts, session.results, strict=True):
        names = part.config_names
        for info in result.episodes:
            label = names[info["config_index"]] if names else None
            info["group"] = (label or info["part"]) if grid else "all"
    if options.shard.sharded and session.stopped is None:  # a stopped shard is not merged
        record = record_options(env, made_options, options, episodes, grid, rotate)
        shards.write_record(session, COMMAND, identity, record, extra={})
    run = _play_run(env, session.results, max_steps, session.out)
    run.stopped, run.prices = session.stopped, options.prices
    _write_results(run)
    return run


def _session_options(options: SessionOptions | None, keywords: Mapping[str, Any]):
    """``options`` as given (checked when it was made), or the options the session keywords
    make (checked now, once); a one-line error when both are given."""
    defaults = inspect.signature(play_session).parameters
    if options is not None:
        given = [name for name, value in keywords.items() if value != defaults[name].default]
        if given:
            raise UsageError(f"play_session(): give options= or {', '.join(given)}, not both")
        return options
    return SessionOptions(
        seats=dict(keywords["seats"] or {}),
        generate=keywords["generate"] or SESSION.generate,
        protocol=dict(keywords["protocol"] or {}),
        limits=keywords["limits"] or Limits(),
        prices=dict(keywords["prices"] or {}),
        **{k: keywords[k] for k in ("default_seat", "envs", "seed", "max_steps", "on_call_error",
                                    "out", "resume", "progress", "shard", "cache")},
    )  # fmt: skip


def play_identity(
    env_id: str,
    env_opts: Mapping[str, Any],
    options: SessionOptions,
    episodes: int,
    grid: bool,
    rotate: bool,
) -> dict:
    """What a play run's transcript is keyed by (the same keys and values as ever, so a run
    folder written before resumes)."""
    identity = {
        "env": env_id,
        "env_options": dict(env_opts),
        "protocol": dict(options.protocol),
        "seats": dict(options.seats),
        "default_seat": options.default_seat,
        "seed": options.seed,
        "episodes": episodes,
        "envs": options.envs,
        "max_steps": options.max_steps,
        "grid": grid,
        "rotate": rotate,
        "sampling": sampling_identity(options.generate),
    }
    # Options that change replies or moves, named only when set, so the run key of a run
    # without them (and so its resume) is what it always was.
    model = model_identity(options.generate)
    if model:
        identity["model_options"] = model
    if options.on_call_error != "stop":
        identity["on_call_error"] = options.on_call_error
    return identity


def record_options(
    env_id: str,
    env_opts: Mapping[str, Any],
    options: SessionOptions,
    episodes: int,
    grid: bool,
    rotate: bool,
) -> dict:
    """A shard record's ``options``: the run's options as JSON (a merge reads ``env`` and
    ``max_steps`` back; records written before held the command line's flags, which read too)."""
    return shards.as_json(
        {
            "env": env_id,
            "env_options": dict(env_opts),
            "seats": dict(options.seats),
            "default_seat": options.default_seat,
            "generate": options.generate.settings(),
            "protocol": dict(options.protocol),
            "episodes": episodes,
            "envs": options.envs,
            "seed": options.seed,
            "max_steps": options.max_steps,
            "on_call_error": options.on_call_error,
            "grid": grid,
            "rotate": rotate,
            "shard": str(options.shard),
        }
    )


@typed_arguments
def merge_play_shards(dirs: Sequence[str | Path], out: str | Path) -> PlayRun:
    """The shards of one play run (their ``out`` folders) merged into ``out``: the run's results
    as the unsharded run gives them, its transcript as one (it reads and resumes as that run's),
    and ``results.json``. A foreign, damaged or missing shard is a one-line error."""
    merged = shards.merge([str(d) for d in dirs], str(out), COMMAND)
    recorded = merged.options
    run = _play_run(recorded.get("env"), merged.results, recorded.get("max_steps"), merged.out)
    _write_results(run)
    return run
