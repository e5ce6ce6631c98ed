"""``dilemmax experiment``: the papers' language-model experiments, one command each.

    dilemmax experiment --list                       # every design, its section, calls, tokens
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
import importlib
import sys

from dilemmax.commandline import add_config_arguments, config_from_namespace
from dilemmax.errors import UsageError
from dilemmax.experiments import catalogue

HELP = "the papers' language-model experiments, one command each"
# What running a design, combine or merge imports (the designs, the play session, the model
# clients): loaded when one of them is parsed, not for `--list` or `--help` (see _DesignParser).
RUNNER = "dilemmax.experiments.runner"


def _guarded(command):
    """A command whose model-side failures print as one line (exit 2), as in ``play``."""

    def run(args) -> int:
        # The error types live with the run stack, loaded only when a command runs.
        from dilemmax.llm.client import FatalClientError
        from dilemmax.llm.transcript import TranscriptMismatch

        try:
            status = command(args)
        except (UsageError, FatalClientError, TranscriptMismatch, FileExistsError) as error:
            print(f"dilemmax experiment: error: {' '.join(str(error).split())}", file=sys.stderr)
            return 2
        return status if isinstance(status, int) else 0

    return run


def _runner():
    return importlib.import_module(RUNNER)


def add_play_arguments(p: argparse.ArgumentParser) -> None:
    """The seat, model and run options of ``dilemmax play`` an experiment takes (the fields of
    :class:`~dilemmax.llm.session_options.SessionOptions`, declared once in
    ``dilemmax.llm.cli``)."""
    # The model stack's flags: loaded when a design's options are built, not for `--list`.
    from dilemmax.llm.cli import add_session_arguments

    add_session_arguments(p, out_help="run folder (transcript, results.json, tables, figures)")


def session_options(args: argparse.Namespace):
    """The :class:`~dilemmax.llm.session_options.SessionOptions` of the parsed play options."""
    from dilemmax.llm import cli  # the run stack: loaded when a design runs

    return cli.session_options(args)


def parse_design_argv(design, argv: list[str]):
    """(the design's parameters, the run's SessionOptions) of a ``dilemmax experiment
    <design>`` command line (``argv`` after the design's name), parsed as the command parses it."""
    parser = argparse.ArgumentParser(prog=f"dilemmax experiment {design.name}")
    add_play_arguments(parser)
    add_config_arguments(parser, design.params)
    args = parser.parse_args(argv)
    return config_from_namespace(design.params, args), session_options(args)


def _run(design, args: argparse.Namespace) -> int:
    params = config_from_namespace(design.params, args)
    if args.plan:  # no call made and nothing written: no --out needed
        print(_runner().run_design(design, params, session_options(args), True).format())
        return 0
    if not args.out:  # the command line always writes its run (Python may keep it in memory)
        raise UsageError(f"{design.name} needs --out DIR (results.json, tables, figures)")
    result = _runner().run_design(design, params, session_options(args))
    if result.stopped is None:
        return 0
    from dilemmax.llm.limits import STOPPED_STATUS, stop_line  # the run stack, loaded to run

    finished = sum(result.results["finished"].values())
    print(stop_line("experiment", result.stopped, result.out, finished), file=sys.stderr)
    return STOPPED_STATUS


class _DesignParser(argparse.ArgumentParser):
    """A design's subcommand, filled with its options only when it is parsed or its help is
    shown: building every design's parser imports every design (and their analysis stacks),
    which took ``dilemmax experiment --list`` from about the time of ``dilemmax list`` to
    minutes."""

    filler = None  # set on a design's parser: adds its options, once

    def _filled(self) -> None:
        fill, self.filler = self.filler, None
        if fill is not None:
            fill()

    def parse_known_args(self, args=None, namespace=None):
        self._filled()
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:
        self._filled()
        return super().format_help()

    def format_usage(self) -> str:
        self._filled()
        return super().format_usage()


def _fill_design(d: argparse.ArgumentParser, name: str) -> None:
    """Design ``name``'s options (``dilemmax play``'s, then its own parameters, generated from
    their declaration) and its command."""
    design = _runner().registry.find(name)
    add_play_arguments(d)
    add_config_arguments(d, design.params)
    d.set_defaults(func=_guarded(lambda args: _run(design, args)))


def add_commands(subparsers) -> None:
    """Adds ``experiment`` (a subcommand per design, ``combine``, ``merge``, ``--list``)."""
    known = catalogue.entries()
    p = subparsers.add_parser(
        "experiment",
        help=HELP,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--list", action="store_true",
                   help="every design, its section, calls and prompt tokens")  # fmt: skip
    sub = p.add_subparsers(dest="design", metavar="DESIGN", parser_class=_DesignParser)
    for name, entry in known.items():
        line = f"{entry.section}: {entry.summary}"
        # argparse %-formats help text: a summary's "50%" would break `experiment --help`.
        d = sub.add_parser(name, help=line.replace("%", "%%"), description=line)
        d.filler = lambda d=d, name=name: _fill_design(d, name)
    c = sub.add_parser("combine", help="several runs of a design as its cross-run tables")
    c.add_argument("combined", metavar="DESIGN", help="the design the runs ran")
    c.add_argument("dirs", nargs="+", metavar="RUN_DIR", help="the runs' --out folders")
    c.add_argument("--out", help="folder for the combined results, tables and figures")
    c.set_defaults(
        func=_guarded(lambda args: _runner().combine(args.combined, args.dirs, args.out))
    )
    m = sub.add_parser("merge", help="the shards of one run (--shard i/N) as that run")
    m.add_argument("dirs", nargs="+", metavar="SHARD_DIR", help="the shards' --out folders")
    m.add_argument("--out", help="folder for the merged run")
    m.set_defaults(func=_guarded(lambda args: _runner().merge(args.dirs, args.out)))

    def top(args) -> int:
        if args.list:
            for entry in known.values():
                print(catalogue.listing_line(entry))
            return 0
        p.print_usage(sys.stderr)
        print("dilemmax experiment: error: name a design (see --list)", file=sys.stderr)
        return 2

    p.set_defaults(func=top)
