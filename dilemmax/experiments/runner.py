"""Running a design: its plan played through one play session, then analysed and written.

:func:`run` builds the design's :class:`~dilemmax.experiments.design.Plan` from the user's
options, plays every part under one transcript (:func:`dilemmax.llm.session.play_parts`: resume,
progress bar, the seat and model options of ``dilemmax play``), runs the design's ``extra`` (what
is asked of a model outside the game), then ``analyse``, and writes the report
(:mod:`dilemmax.experiments.report`). A shard (``--shard i/N``) plays its share and writes its
record instead (shard 0 also runs ``extra``); :func:`merge` joins the shards and analyses them as
the whole run. :func:`combine` reads several finished runs for the cross-run tables.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dilemmax.commandline import output_folder, parse_assignments, read_json_file
from dilemmax.errors import UsageError
from dilemmax.experiments import registry
from dilemmax.experiments.design import Design, Plan, Report
from dilemmax.experiments.report import (
    MAX_RESULTS_BYTES,
    ResultsError,
    read_results,
    write_report,
)
from dilemmax.llm import shards
from dilemmax.llm.results import format_calls, seat_stats, unreadable_replies
from dilemmax.llm.seats import add_model_arguments
from dilemmax.llm.session import Shard, model_identity, play_parts
from dilemmax.runlock import RunLock, refuse_other_writer

# Seat kinds that are no language model (a run's "models" are the others).
NOT_MODELS = ("scripted", "trained")


def _model_defaults() -> dict:
    parser = argparse.ArgumentParser(add_help=False)
    add_model_arguments(parser)
    return vars(parser.parse_args([]))


MODEL_DEFAULTS = _model_defaults()


def add_play_arguments(p: argparse.ArgumentParser) -> None:
    """The seat, model and run options of ``dilemmax play`` an experiment takes."""
    p.add_argument("--seat", action="append", help="agent=<kind>:<target> (repeatable)")
    p.add_argument("--seats", help="<kind>:<target> for every seat the design leaves open")
    add_model_arguments(p)
    p.add_argument("--protocol", action="append", help="text protocol option key=value")
    p.add_argument("--envs", type=int, default=16, help="environments stepped together")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, help="stop each episode after this many steps")
    p.add_argument("--on-call-error", choices=("stop", "invalid"), default="stop",
                   help="a call that failed after its retries: stop (resume later) or play "
                   "the invalid move")  # fmt: skip
    p.add_argument("--out", help="run folder (transcript, results.json, tables, figures)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--shard", help="play shard i of N (i/N) of the episodes; merge later")
    p.set_defaults(grid=False, json=None)  # what the play session reads beside these


def design_options(design: Design, args) -> dict[str, Any]:
    """The design's own options (those its ``add_arguments`` adds) and their values."""
    parser = argparse.ArgumentParser(add_help=False)
    design.add_arguments(parser)
    return {dest: getattr(args, dest, None) for dest in sorted(vars(parser.parse_args([])))}


def plan_of(design: Design, args) -> Plan:
    plan = design.plan(args)
    if not plan.parts:
        raise UsageError(f"{design.name}: these options leave nothing to play")
    return plan


def identity(design: Design, args, plan: Plan) -> dict:
    """What decides the run's calls: the design and its options, the plan's parts, the seats,
    the seed, the batch (it fixes each episode's env slot) and what changes replies."""
    return {
        "design": design.name,
        "design_options": design_options(design, args),
        "parts": [_part_identity(p) for p in plan.parts],
        "seats": _seat_entries(args),
        "default_seat": args.seats,
        "protocol": parse_assignments(args.protocol, "--protocol"),
        "seed": args.seed,
        "envs": args.envs,
        "max_steps": args.max_steps,
        "sampling": [args.temperature, args.top_p, args.max_tokens, args.model_seed],
        "model_options": model_identity(args, MODEL_DEFAULTS),
        "on_call_error": args.on_call_error,
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


def _seat_entries(args) -> dict[str, str]:
    entries = {}
    for entry in args.seat or []:
        agent, _, spec = entry.partition("=")
        entries[agent.strip()] = spec.strip()
    return entries


def header(design: Design, args, plan: Plan, results: Sequence, run_key: str | None) -> dict:
    """results.json's fields beside the design's results: ``calls`` the model calls the run
    made (every seat, every part; on a resume those replayed from the transcript count, since
    they were made before), ``calls_planned`` the plan's upper bound, ``seat_calls`` each
    seat's calls, validity, errors, retries and tokens (``dilemmax play``'s), ``run`` the
    transcript's run key (what ``combine`` tells two runs apart by)."""
    specs = [*_seat_entries(args).values(), *([args.seats] if args.seats else [])]
    specs += [spec for part in plan.parts for spec in part.seats.values()]
    models = sorted({s for s in specs if s.partition(":")[0] not in NOT_MODELS})
    stats = seat_stats(results)
    return {
        "design": design.name,
        "section": design.section,
        "run": run_key,
        "calls": sum(s.calls for s in stats.values()),
        "calls_planned": plan.calls,
        "seat_calls": {
            seat: {**s.summary(), "unreadable": unreadable_replies(s)} for seat, s in stats.items()
        },
        "seats": {"by_agent": _seat_entries(args), "default": args.seats, "models": models},
        "options": shards.options_of(args),
    }


# --------------------------------------------------------------------------- commands
def run(design: Design, args) -> int:
    """``dilemmax experiment <design>``: play, analyse, write (or write a shard's record)."""
    if not args.out:
        raise UsageError(f"{design.name} needs --out DIR (results.json, tables, figures)")
    plan = plan_of(design, args)
    ident = identity(design, args, plan)
    shard = Shard.parse(args.shard)
    print(f"{design.name} ({design.section}): {len(plan.parts)} part(s), ~{plan.calls:,.0f} calls")
    session = play_parts(plan.parts, args, ident, "experiment")
    out = session.out
    with RunLock(out, "experiment"):  # the session's lock is released: taken again till the end
        extra = {}
        if design.extra is not None and shard.index == 0:
            extra = design.extra(plan, args, out, bool(args.resume))
        if shard.sharded:
            shards.write_record(session, "experiment", ident, args, extra)
            print(f"shard {shard}: {out}; merge the shards with `dilemmax experiment merge DIR...`")
            return 0
        _analysed(design, plan, session.results, args, extra, out, session.transcript_run)
    return 0


def _analysed(design, plan, results, args, extra, out: Path, run_key: str | None) -> None:
    """The design's report of ``results``, written into ``out`` (whose lock the caller holds),
    after the seats' calls as ``dilemmax play`` prints them."""
    calls = format_calls(seat_stats(results))
    if calls:
        print(calls)
    report = design.analyse(plan, list(results), args, extra)
    written = write_report(out, header(design, args, plan, results, run_key), report)
    print(f"{design.name}: wrote {', '.join(str(p) for p in written)}")


def design_parser(design: Design) -> argparse.ArgumentParser:
    """The command line of ``dilemmax experiment <design>``: play's options and the design's."""
    parser = argparse.ArgumentParser(prog=f"dilemmax experiment {design.name}")
    add_play_arguments(parser)
    design.add_arguments(parser)
    return parser


def merge(dirs: Sequence[str], out: str | None) -> int:
    """``dilemmax experiment merge SHARD_DIR... --out DIR``: the shards analysed as one run.

    Everything the shards hold is checked before anything is written: their records and steps
    files (:func:`dilemmax.llm.shards.merge`), their recorded options by the checks of the
    command line they came from, and the plan those options give. A merge refused, or one whose
    analysis fails, leaves ``--out`` as it was, so the corrected merge may use it."""
    planned: dict[str, Any] = {}

    def check(args: argparse.Namespace, recorded: dict) -> None:
        design = registry.find(str(getattr(args, "design", "")))
        check_options(design_parser(design), vars(args))
        plan = plan_of(design, args)
        if shards.as_json(identity(design, args, plan)) != recorded:
            raise shards.ShardError(
                f"the shards' run is not what {design.name} plans from their options now (the "
                "design changed since they ran?)"
            )
        planned.update(design=design, plan=plan)

    merged = shards.merge(dirs, out, "experiment", check)
    try:
        with RunLock(merged.out, "experiment merge"):
            _analysed(planned["design"], planned["plan"], merged.results, merged.args,
                      merged.extra, merged.out, merged.run)  # fmt: skip
    except BaseException:
        merged.undo()
        raise
    return 0


def check_options(parser: argparse.ArgumentParser, options: dict[str, Any]) -> None:
    """Options read back from a file (a shard's record) checked as the command line checks
    them: each value one its option's type and choices take (a one-line UsageError naming the
    option otherwise). Options the parser does not know are left to the identity check."""
    for action in parser._actions:  # argparse keeps no public list of its options
        if action.dest not in options or not action.option_strings:
            continue
        problem = _option_problem(action, options[action.dest])
        if problem:
            raise UsageError(f"recorded option {action.option_strings[0]}: {problem}")


def _option_problem(action: argparse.Action, value: Any) -> str:
    if value is None or value == action.default:
        return ""
    if action.nargs == 0:  # a flag (store_true / store_false)
        return "" if isinstance(value, bool) else f"{str(value)[:40]!r} is not true or false"
    many = action.nargs in ("+", "*") or isinstance(action, argparse._AppendAction)
    if many and not isinstance(value, list):
        return f"{str(value)[:40]!r} is not a list"
    for item in value if many else [value]:
        if isinstance(item, bool | dict | list):
            return f"{str(item)[:40]!r} is not a value of the option"
        try:
            parsed = action.type(str(item)) if action.type is not None else str(item)
        except (TypeError, ValueError, argparse.ArgumentTypeError):
            parsed = None
        if parsed is None or parsed != item:
            kind = getattr(action.type, "__name__", "text") if action.type else "text"
            return f"{str(item)[:40]!r} is not a valid {kind}"
        if action.choices is not None and parsed not in action.choices:
            return f"{str(item)[:40]!r} is not one of {list(action.choices)}"
    return ""


def combine(name: str, dirs: Sequence[str], out: str | None) -> int:
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
    return 0


def _resolved(folder: str | Path) -> Path:
    return Path(folder).expanduser().resolve()


def _check_distinct_folders(dirs: Sequence[str]) -> None:
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
