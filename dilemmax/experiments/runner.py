"""Running a design: its plan played through one play session, then analysed and written.

:func:`run_design` plans the design from its typed parameters (``Design.params``) and the run's
:class:`~dilemmax.llm.session_options.SessionOptions`, plays every part under one transcript
(:func:`dilemmax.llm.session.play_parts`: resume, progress bar, the seat and model options of
``dilemmax play``), runs the design's ``extra`` (what is asked of a model outside the game), then
``analyse``, and writes the report (:mod:`dilemmax.experiments.report`). A shard
(``shard="i/N"``) plays its share and writes its record instead (shard 0 also runs ``extra``);
:func:`merge` joins the shards and analyses them as the whole run. :func:`combine` reads several
finished runs for the cross-run tables. The command line (:mod:`dilemmax.experiments.cli`) and
the Python API (:func:`run`, also ``dilemmax.experiments.run``) both end in :func:`run_design`,
so the same options give the same ``results.json``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dilemmax.commandline import flag_of, output_folder, parse_assignments, read_json_file
from dilemmax.envs.seat_spec import is_model_seat
from dilemmax.envs.typecheck import typed_arguments
from dilemmax.errors import UsageError
from dilemmax.experiments import registry
from dilemmax.experiments.design import (
    Design,
    DesignParams,
    ParamError,
    Plan,
    Report,
    make_params,
    param_names,
    param_values,
)
from dilemmax.experiments.report import (
    MAX_RESULTS_BYTES,
    ResultsError,
    read_results,
    results_payload,
    write_report,
)
from dilemmax.llm import shards
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.limits import LimitReached, Limits, partial_fields
from dilemmax.llm.plan import CallPlan, plan_parts
from dilemmax.llm.pricing import Price, seat_price
from dilemmax.llm.results import format_calls, seat_stats, unreadable_replies
from dilemmax.llm.seats import seat_entries
from dilemmax.llm.session import play_parts
from dilemmax.llm.session_options import (
    ON_CALL_ERROR,
    SessionOptions,
    model_identity,
    sampling_identity,
)
from dilemmax.runlock import RunLock, refuse_other_writer

COMMAND = "experiment"  # what a run's folder lock and shard records name


@dataclass(frozen=True)
class ExperimentResult:
    """What a run of a design gives back.

    Attributes:
        design: the design's name.
        out: the folder written (None: nothing written).
        results: ``results.json``'s contents (the design's own under ``"results"``); None for a
            shard, whose record is merged later.
        tables: table name -> markdown.
        files: the files written (results.json, tables, figures).
    """

    design: str
    out: Path | None
    results: dict | None
    tables: dict[str, str] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)
    stopped: LimitReached | None = None  # a spending limit stopped it: results are partial


# --------------------------------------------------------------------------- the run's record
def _dest(spec: dataclasses.Field) -> str:
    """A GenerateConfig field as its flag names it (``seed`` -> ``model_seed``)."""
    return flag_of(spec)[2:].replace("-", "_")


def options_record(design: Design, params: DesignParams, options: SessionOptions) -> dict:
    """The run's options as ``results.json`` and a shard's record hold them: one flat dict
    keyed as the command line's options are (``seat`` and ``protocol`` as their ``key=value``
    words, the model options by their flags, the design's parameters by name), what
    :func:`options_from_record` reads back for a merge (records of earlier versions too)."""
    generate = {}
    for spec in dataclasses.fields(options.generate):
        value = getattr(options.generate, spec.name)
        generate[_dest(spec)] = "|".join(value) if isinstance(value, tuple) else value
    record = {
        "command": COMMAND,
        "design": design.name,
        "seat": [f"{agent}={spec}" for agent, spec in options.seats.items()] or None,
        "seats": options.default_seat,
        **generate,
        "protocol": [f"{k}={v}" for k, v in options.protocol.items()] or None,
        "envs": options.envs,
        "seed": options.seed,
        "max_steps": options.max_steps,
        "on_call_error": options.on_call_error,
        "out": None if options.out is None else str(options.out),
        "resume": options.resume,
        "no_progress": not options.progress,
        "shard": str(options.shard) if options.shard.sharded else None,
        **param_values(params),
    }
    return shards.as_json(record)


# Recorded run options and the type the command line gives each.
_RECORD_KINDS = {"envs": int, "seed": int, "max_steps": int, "resume": bool, "no_progress": bool}


def options_from_record(record: Mapping[str, Any]) -> tuple[Design, DesignParams, SessionOptions]:
    """(design, parameters, run options) of a recorded options dict (:func:`options_record`),
    each value checked as the command line checks it: a one-line UsageError naming the option
    (``recorded option --episodes: 'x' is not a whole number``) otherwise."""
    design = registry.find(str(record.get("design", "")))
    try:
        names = param_names(design.params)
        params = make_params(design.params, {k: v for k, v in record.items() if k in names})
    except ParamError as error:
        spec = {f.name: f for f in dataclasses.fields(design.params)}[error.name]
        raise UsageError(f"recorded option {flag_of(spec)}: {error.problem}") from None
    for name, kind in _RECORD_KINDS.items():
        value = record.get(name)
        if value is not None and type(value) is not kind:
            flag = "--" + name.replace("_", "-")
            raise UsageError(
                f"recorded option {flag}: {str(value)[:40]!r} is not a {kind.__name__}"
            )
    if record.get("on_call_error", "stop") not in ON_CALL_ERROR:
        raise UsageError(f"recorded option --on-call-error: not one of {list(ON_CALL_ERROR)}")
    names = {_dest(f): f.name for f in dataclasses.fields(GenerateConfig)}
    given = {name: record[dest] for dest, name in names.items() if record.get(dest) is not None}
    if record.get("no_structured_output") and "output" not in given:  # before GenerateConfig
        given["output"] = "text"
    options = SessionOptions(
        seats=seat_entries(record.get("seat")),
        default_seat=record.get("seats"),
        generate=GenerateConfig().merged(given),
        protocol=parse_assignments(record.get("protocol"), "--protocol"),
        envs=record.get("envs", 16),
        seed=record.get("seed", 0),
        max_steps=record.get("max_steps"),
        on_call_error=record.get("on_call_error", "stop"),
        out=record.get("out"),
        resume=bool(record.get("resume")),
        progress=not record.get("no_progress", True),
        shard=record.get("shard"),
    )
    return design, params, options


# --------------------------------------------------------------------------- identity
def plan_of(design: Design, params: DesignParams, run: SessionOptions) -> Plan:
    plan = design.plan(params, run)
    if not plan.parts:
        raise UsageError(f"{design.name}: these options leave nothing to play")
    return plan


def identity(design: Design, params: DesignParams, options: SessionOptions, plan: Plan) -> dict:
    """What decides the run's calls: the design and its options, the plan's parts, the seats,
    the seed, the batch (it fixes each episode's env slot) and what changes replies."""
    return {
        "design": design.name,
        "design_options": param_values(params),
        "parts": [_part_identity(p) for p in plan.parts],
        "seats": dict(options.seats),
        "default_seat": options.default_seat,
        "protocol": dict(options.protocol),
        "seed": options.seed,
        "envs": options.envs,
        "max_steps": options.max_steps,
        "sampling": sampling_identity(options.generate),
        "model_options": model_identity(options.generate),
        "on_call_error": options.on_call_error,
    }


def _part_identity(part) -> dict:
    return {
        "name": part.name,
        "env": part.env.name,
        "agents": part.env.num_agents,
        "configs": None if part.config_names is None else list(part.config_names),
        "episodes": part.episodes,
        "seats": dict(part.seats),
        "protocol": dict(part.protocol_options),
        "seat_protocol": {a: dict(o) for a, o in part.seat_protocol_options.items()},
        "rotate": part.rotate,
    }


def header(
    design: Design,
    options: SessionOptions,
    record: dict,
    plan: Plan,
    results: Sequence,
    run_key: str | None,
) -> dict:
    """results.json's fields beside the design's results: ``calls`` the model calls the run
    made (every seat, every part; on a resume those replayed from the transcript count, since
    they were made before), ``calls_planned`` the plan's upper bound, ``seat_calls`` each
    seat's calls, validity, errors, retries and tokens (``dilemmax play``'s), ``run`` the
    transcript's run key (what ``combine`` tells two runs apart by)."""
    specs = [*options.seats.values(), *([options.default_seat] if options.default_seat else [])]
    specs += [spec for part in plan.parts for spec in part.seats.values()]
    models = sorted({s for s in specs if is_model_seat(s)})
    stats = seat_stats(results)
    return {
        "design": design.name,
        "section": design.section,
        "run": run_key,
        "calls": sum(s.calls for s in stats.values()),
        "calls_planned": plan.calls,
        "seat_calls": {
            seat: {
                **s.summary(seat_price(seat, options.prices)),
                "unreadable": unreadable_replies(s),
            }
            for seat, s in stats.items()
        },
        "seats": {
            "by_agent": dict(options.seats),
            "default": options.default_seat,
            "models": models,
        },
        "options": record,
    }


# --------------------------------------------------------------------------- running
@typed_arguments
def run(
    design: str | Design,
    *,
    seats: str | None = None,
    seat: Mapping[str, str] | None = None,
    generate: GenerateConfig | None = None,
    protocol: Mapping[str, Any] | None = None,
    out: str | Path | None = None,
    seed: int = 0,
    envs: int = 16,
    max_steps: int | None = None,
    on_call_error: str = "stop",
    resume: bool = False,
    progress: bool = True,
    shard: str | None = None,
    limits: Limits | None = None,
    cache: str | Path | bool | None = None,
    prices: Mapping[str, Price] | None = None,
    plan: bool = False,
    **params: Any,
) -> ExperimentResult | CallPlan:
    """``dilemmax experiment <design>`` from Python, shaped like ``inspect_ai.eval``.

    Args:
        design: its name (``"moral_hazard/isolation"``) or the :class:`Design` itself.
        seats: the seat spec of every seat the design and ``seat`` leave open (``--seats``).
        seat: agent -> seat spec (``--seat agent_1=openai:m``).
        generate: the model and generation options (a seat's own options over them).
        protocol: text-protocol options under each part's own (``--protocol``).
        out: the run folder; None writes nothing (the results come back only).
        seed: the run seed (every part's episode keys come from it).
        envs: environments stepped together.
        max_steps: stop each episode after this many steps (None: the game's own end).
        on_call_error: a call that failed after its retries: ``"stop"`` the run (resume later)
            or play the ``"invalid"`` move.
        resume: continue the run in ``out``.
        progress: a progress bar on stderr.
        shard: ``"i/N"``: play shard i of N of the episodes (:func:`merge` joins them).
        limits, cache: what the run may spend, the response cache (as ``play_session``'s).
        prices: model -> :class:`~dilemmax.llm.pricing.Price`, for the plan's and the
            results' costs (a seat's own ``price=`` comes first).
        plan: return the run's :class:`~dilemmax.llm.plan.CallPlan` (calls, tokens and cost
            per model seat) without calling any model or writing anything.
        **params: the design's own parameters (its ``Design.params`` fields; the paper's sizes
            by default), e.g. ``replicates=1, episodes=2``.
    """
    found = registry.find(design) if isinstance(design, str) else design
    options = SessionOptions(
        seats=dict(seat or {}),
        default_seat=seats,
        generate=generate if generate is not None else GenerateConfig(),
        protocol=dict(protocol or {}),
        envs=envs,
        seed=seed,
        max_steps=max_steps,
        on_call_error=on_call_error,
        out=out,
        resume=resume,
        progress=progress,
        shard=shard,
        limits=limits or Limits(),
        cache=cache,
        prices=dict(prices or {}),
    )
    return run_design(found, make_params(found.params, params, found.name), options, plan)


def run_design(
    design: Design, params: DesignParams, options: SessionOptions, plan_only: bool = False
) -> ExperimentResult | CallPlan:
    """Plays, analyses and writes one run of ``design`` (or a shard's record); ``plan_only``:
    returns its :class:`~dilemmax.llm.plan.CallPlan` instead, with no call made."""
    if options.on_call_error not in ON_CALL_ERROR:
        raise UsageError(f"on_call_error {options.on_call_error!r}: not one of {ON_CALL_ERROR}")
    plan = plan_of(design, params, options)
    ident = identity(design, params, options, plan)
    record = options_record(design, params, options)
    print(f"{design.name} ({design.section}): {len(plan.parts)} part(s), ~{plan.calls:,.0f} calls")
    call_plan = plan_parts(plan.parts, options)
    if plan_only:
        return call_plan
    if call_plan.seats:
        print(call_plan.format())
    session = play_parts(plan.parts, options, ident, COMMAND)
    if session.stopped is not None:  # a spending limit: what was played, not analysed
        return _stopped(design, options, record, plan, session)
    out = session.out
    if out is None:
        extra = design.extra(plan, params, options) if design.extra is not None else {}
        return _analysed(design, params, options, record, plan, session.results, extra, None, None)
    with RunLock(out, COMMAND):  # the session's lock is released: taken again till the end
        extra = {}
        if design.extra is not None and options.shard.index == 0:
            extra = design.extra(plan, params, options)
        if options.shard.sharded:
            shards.write_record(session, COMMAND, ident, record, extra)
            print(f"shard {options.shard}: {out}; merge the shards: `dilemmax experiment merge`")
            return ExperimentResult(design.name, out, None)
        return _analysed(design, params, options, record, plan, session.results, extra, out,
                         session.transcript_run)  # fmt: skip


def _stopped(design, options, record, plan, session) -> ExperimentResult:
    """A run a spending limit stopped: its calls, a partial results.json, no analysis."""
    print(format_calls(seat_stats(session.results)))
    fields = header(design, options, record, plan, session.results, session.transcript_run)
    finished = {n: len(r.episodes) for n, r in zip(session.names, session.results, strict=True)}
    payload = {**fields, **partial_fields(session.stopped), "finished": finished}
    if session.out is not None:
        with RunLock(session.out, COMMAND):
            write_report(session.out, payload, Report({}))
    return ExperimentResult(design.name, session.out, payload, stopped=session.stopped)


def _analysed(design, params, options, record, plan, results, extra, out, run_key):
    """The design's report of ``results``, written into ``out`` (whose lock the caller holds)
    unless it is None, after the seats' calls as ``dilemmax play`` prints them."""
    calls = format_calls(seat_stats(results), options.prices)
    if calls:
        print(calls)
    report = design.analyse(plan, list(results), params, options, extra)
    fields = header(design, options, record, plan, results, run_key)
    if out is None:
        return ExperimentResult(design.name, None, results_payload(fields, report), report.tables)
    written = write_report(out, fields, report)
    print(f"{design.name}: wrote {', '.join(str(p) for p in written)}")
    payload = read_json_file(written[0], MAX_RESULTS_BYTES, ResultsError, "", "")
    return ExperimentResult(design.name, Path(out), payload, dict(report.tables), written)


@typed_arguments
def merge(dirs: Sequence[str | Path], out: str | Path | None) -> ExperimentResult:
    """``dilemmax experiment merge SHARD_DIR... --out DIR``: the shards analysed as one run.

    Everything the shards hold is checked before anything is written: their records and steps
    files (:func:`dilemmax.llm.shards.merge`), their recorded options as the command line
    checks them, and the plan those options give. A merge refused, or one whose analysis fails,
    leaves ``--out`` as it was, so the corrected merge may use it."""
    planned: dict[str, Any] = {}

    def check(recorded_options: dict, recorded_identity: dict) -> None:
        design, params, options = options_from_record(recorded_options)
        plan = plan_of(design, params, options)
        if shards.as_json(identity(design, params, options, plan)) != recorded_identity:
            raise shards.ShardError(
                f"the shards' run is not what {design.name} plans from their options now (the "
                "design changed since they ran?)"
            )
        planned.update(design=design, plan=plan)

    where = None if out is None else str(out)
    merged = shards.merge([str(d) for d in dirs], where, COMMAND, check)
    try:
        with RunLock(merged.out, f"{COMMAND} merge"):
            design, params, options = options_from_record(merged.options)
            record = options_record(design, params, options)
            return _analysed(design, params, options, record, planned["plan"], merged.results,
                             merged.extra, merged.out, merged.run)  # fmt: skip
    except BaseException:
        merged.undo()
        raise


@typed_arguments
def combine(name: str, dirs: Sequence[str | Path], out: str | Path | None) -> ExperimentResult:
    """``dilemmax experiment combine <design> RUN_DIR... --out DIR``: the cross-run report.

    Refused: a run given twice (the same folder, or two folders of one run: the same
    transcript run key), and an ``--out`` that is one of the runs or holds another command's
    results, which the combined ones would overwrite."""
    design = registry.find(name)
    if design.combine is None:
        raise UsageError(f"{name} has no cross-run table to combine")
    if not dirs or not out:
        raise UsageError("combine needs the runs' folders (RUN_DIR...) and --out DIR")
    _check_distinct_folders(dirs)
    runs = [read_results(folder, name) for folder in dirs]
    _check_distinct_runs(dirs, runs)
    _check_combine_out(Path(out), dirs, name)
    report = _combined(design, runs, dirs)
    folder, _ = output_folder(out, "--out")
    fields = {"design": name, "section": design.section, "combined_from": [str(d) for d in dirs]}
    with RunLock(folder, "experiment combine"):
        written = write_report(folder, fields, report)
    print(f"{name}: combined {len(runs)} run(s); wrote {', '.join(str(p) for p in written)}")
    payload = read_json_file(written[0], MAX_RESULTS_BYTES, ResultsError, "", "")
    return ExperimentResult(name, folder, payload, dict(report.tables), written)


def _resolved(folder: str | Path) -> Path:
    return Path(folder).expanduser().resolve()


def _check_distinct_folders(dirs: Sequence[str | Path]) -> None:
    seen: dict[Path, str] = {}
    for folder in dirs:
        where = _resolved(folder)
        if where in seen:
            raise UsageError(f"{folder} is given twice ({seen[where]}); each run counts once")
        seen[where] = folder


def _check_distinct_runs(dirs: Sequence[str], runs: Sequence[dict]) -> None:
    """Two folders holding one run (a copy, or a run and its merged shards) would count it
    twice: their results.json name the same transcript run key."""
    seen: dict[str, str] = {}
    for folder, run in zip(dirs, runs, strict=True):
        key = run.get("run")
        if isinstance(key, str) and key in seen:
            raise UsageError(
                f"{folder} and {seen[key]} hold the same run (run {key}); each run counts once"
            )
        if isinstance(key, str):
            seen[key] = folder


def _check_combine_out(out: Path, dirs: Sequence[str], name: str) -> None:
    """``--out`` must be a new folder or an earlier combine of the same design."""
    if _resolved(out) in {_resolved(d) for d in dirs}:
        raise UsageError(f"--out {out} is one of the runs combined; choose a new folder")
    refuse_other_writer(out, "experiment combine")
    if not (out / "results.json").exists():
        return
    try:
        earlier = read_json_file(out / "results.json", MAX_RESULTS_BYTES, ResultsError, "", "")
    except ResultsError:
        earlier = None
    if not (isinstance(earlier, dict) and earlier.get("design") == name
            and earlier.get("combined_from") is not None):  # fmt: skip
        raise UsageError(
            f"--out {out} holds a results.json that is not an earlier combine of {name}; "
            "choose a new folder"
        )


def _combined(design: Design, runs: list[dict], dirs: Sequence[str]) -> Report:
    """``design.combine(runs)``; results it cannot read (edited by hand, another version's) are
    a one-line error naming the first run that fails alone."""
    misread = (KeyError, IndexError, TypeError, ValueError, AttributeError, UsageError)
    try:
        return design.combine(runs)
    except misread as error:
        for folder, run in zip(dirs, runs, strict=True):
            try:
                design.combine([run])
            except misread as alone:
                raise ResultsError(
                    f"{Path(folder) / 'results.json'}: its results do not read as {design.name}'s "
                    f"({type(alone).__name__}: {str(alone)[:100]})"
                ) from alone
        raise ResultsError(
            f"{design.name}: the runs' results do not combine ({type(error).__name__}: "
            f"{str(error)[:100]})"
        ) from error
