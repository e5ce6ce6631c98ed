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

from dilemmax.commandline import output_folder, parse_assignments
from dilemmax.errors import UsageError
from dilemmax.experiments import registry
from dilemmax.experiments.design import Design, Plan, Report
from dilemmax.experiments.report import ResultsError, read_results, write_report
from dilemmax.llm import shards
from dilemmax.llm.seats import add_model_arguments
from dilemmax.llm.session import Shard, model_identity, play_parts
from dilemmax.runlock import RunLock

# Seat kinds that are no language model (a run's "models" are the others).
NOT_MODELS = ("scripted", "trained")


def _model_defaults() -> dict:
    parser = argparse.ArgumentParser(add_help=False)
    add_model_arguments(parser)
    return vars(parser.parse_args([]))


MODEL_DEFAULTS = _model_defaults()


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


def header(design: Design, args, plan: Plan) -> dict:
    """results.json's fields beside the design's results."""
    specs = [*_seat_entries(args).values(), *([args.seats] if args.seats else [])]
    specs += [spec for part in plan.parts for spec in part.seats.values()]
    models = sorted({s for s in specs if s.partition(":")[0] not in NOT_MODELS})
    return {
        "design": design.name,
        "section": design.section,
        "calls": plan.calls,
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
        _analysed(design, plan, session.results, args, extra, out)
    return 0


def _analysed(design, plan, results, args, extra, out: Path) -> None:
    """The design's report of ``results``, written into ``out`` (whose lock the caller holds)."""
    report = design.analyse(plan, list(results), args, extra)
    written = write_report(out, header(design, args, plan), report)
    print(f"{design.name}: wrote {', '.join(str(p) for p in written)}")


def merge(dirs: Sequence[str], out: str | None) -> int:
    """``dilemmax experiment merge SHARD_DIR... --out DIR``: the shards analysed as one run."""
    merged = shards.merge(dirs, out, "experiment")
    args = merged.args
    design = registry.find(str(getattr(args, "design", "")))
    plan = plan_of(design, args)
    if shards.as_json(identity(design, args, plan)) != merged.identity:
        raise shards.ShardError(
            f"the shards' run is not what {design.name} plans from their options now (the "
            "design changed since they ran?)"
        )
    with RunLock(merged.out, "experiment merge"):
        _analysed(design, plan, merged.results, args, merged.extra, merged.out)
    return 0


def combine(name: str, dirs: Sequence[str], out: str | None) -> int:
    """``dilemmax experiment combine <design> RUN_DIR... --out DIR``: the cross-run report."""
    design = registry.find(name)
    if design.combine is None:
        raise UsageError(f"{name} has no cross-run table to combine")
    if not dirs or not out:
        raise UsageError("combine needs the runs' folders (RUN_DIR...) and --out DIR")
    runs = [read_results(folder, name) for folder in dirs]
    report = _combined(design, runs, dirs)
    folder, _ = output_folder(out, "--out")
    fields = {"design": name, "section": design.section, "combined_from": [str(d) for d in dirs]}
    with RunLock(folder, "experiment combine"):
        written = write_report(folder, fields, report)
    print(f"{name}: combined {len(runs)} run(s); wrote {', '.join(str(p) for p in written)}")
    return 0


def _combined(design: Design, runs: list[dict], dirs: Sequence[str]) -> Report:
    """``design.combine(runs)``; results it cannot read (edited by hand, another version's) are
    a one-line error naming the first run that fails alone."""
    try:
        return design.combine(runs)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as error:
        for folder, run in zip(dirs, runs, strict=True):
            try:
                design.combine([run])
            except (KeyError, IndexError, TypeError, ValueError, AttributeError) as alone:
                raise ResultsError(
                    f"{Path(folder) / 'results.json'}: its results do not read as {design.name}'s "
                    f"({type(alone).__name__}: {str(alone)[:100]})"
                ) from alone
        raise ResultsError(
            f"{design.name}: the runs' results do not combine ({type(error).__name__}: "
            f"{str(error)[:100]})"
        ) from error


def listing(known: dict[str, Design], parsers: dict[str, argparse.ArgumentParser]) -> int:
    """``dilemmax experiment --list``: each design, its section and its calls at the paper's
    sizes (the plan of the design's default options). A design whose plan needs what only the
    user gives (a model in every seat) is listed with the reason; one whose plan fails otherwise
    (a bug) too, and the listing then ends with status 1."""
    status = 0
    for name, design in known.items():
        try:
            calls = f"{plan_of(design, parsers[name].parse_args([])).calls:>12,.0f} calls"
        except UsageError as error:
            calls = f"calls depend on the options ({' '.join(str(error).split())[:80]})"
        except Exception as error:  # a broken design must not hide the others
            calls, status = f"cannot be planned: {type(error).__name__}: {error}"[:120], 1
        print(f"{name:28s} {calls}  {design.section}: {design.summary}")
    return status
