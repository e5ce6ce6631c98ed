"""``dilemmax experiment``: the papers' language-model experiments, one command each.

    dilemmax experiment --list                       # every design, its section and call count
    dilemmax experiment moral_hazard/isolation --seats openai:my-model \\
        --base-url http://localhost:8000/v1 --out runs/iso
    dilemmax experiment moral_hazard/isolation --help   # the design's own options (sizes)
    dilemmax experiment combine moral_hazard/grid runs/a runs/b --out runs/table
    dilemmax experiment moral_hazard/sweeps ... --shard 0/8 --out runs/sw.0   # one of 8 shards
    dilemmax experiment merge runs/sw.0 ... runs/sw.7 --out runs/sweeps

Each design plays its parts through the batched harness under one transcript (``--resume``
continues it), then writes ``results.json``, its tables (``.md``) and figures (``.png``) in
``--out``. The seat and model options are those of ``dilemmax play``; the paper's sizes are the
defaults, and the design's own options shrink them for a quick look.
"""

from __future__ import annotations

import argparse
import sys

from dilemmax.errors import UsageError
from dilemmax.experiments import registry, runner
from dilemmax.llm.client import FatalClientError
from dilemmax.llm.seats import add_model_arguments
from dilemmax.llm.transcript import TranscriptMismatch

HELP = "the papers' language-model experiments, one command each"


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


def _guarded(command):
    """A command whose model-side failures print as one line (exit 2), as in ``play``."""

    def run(args) -> int:
        try:
            return command(args)
        except (UsageError, FatalClientError, TranscriptMismatch, FileExistsError) as error:
            print(f"dilemmax experiment: error: {' '.join(str(error).split())}", file=sys.stderr)
            return 2

    return run


def add_commands(subparsers) -> None:
    """Adds ``experiment`` (a subcommand per design, ``combine``, ``merge``, ``--list``)."""
    known = registry.designs()
    p = subparsers.add_parser(
        "experiment",
        help=HELP,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--list", action="store_true", help="every design, its section and calls")
    sub = p.add_subparsers(dest="design", metavar="DESIGN")
    parsers = {}
    for name, design in known.items():
        d = sub.add_parser(name, help=f"{design.section}: {design.summary}", description=(
            f"{design.section}: {design.summary}"))  # fmt: skip
        add_play_arguments(d)
        design.add_arguments(d)
        d.set_defaults(func=_guarded(lambda args, design=design: runner.run(design, args)))
        parsers[name] = d
    c = sub.add_parser("combine", help="several runs of a design as its cross-run tables")
    c.add_argument("combined", metavar="DESIGN", help="the design the runs ran")
    c.add_argument("dirs", nargs="+", metavar="RUN_DIR", help="the runs' --out folders")
    c.add_argument("--out", help="folder for the combined results, tables and figures")
    c.set_defaults(func=_guarded(lambda args: runner.combine(args.combined, args.dirs, args.out)))
    m = sub.add_parser("merge", help="the shards of one run (--shard i/N) as that run")
    m.add_argument("dirs", nargs="+", metavar="SHARD_DIR", help="the shards' --out folders")
    m.add_argument("--out", help="folder for the merged run")
    m.set_defaults(func=_guarded(lambda args: runner.merge(args.dirs, args.out)))

    def top(args) -> int:
        if args.list:
            return _guarded(lambda a: runner.listing(known, parsers))(args)
        p.print_usage(sys.stderr)
        print("dilemmax experiment: error: name a design (see --list)", file=sys.stderr)
        return 2

    p.set_defaults(func=top)
