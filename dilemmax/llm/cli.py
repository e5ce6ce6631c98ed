"""``dilemmax play``: language models, scripted and trained agents in one game, batched.

    dilemmax play moral_hazard --seat agent_0=openai:my-model --seat agent_1=scripted:teacher \\
        --base-url http://localhost:8000/v1 --episodes 20 --envs 16 --out runs/mh
    dilemmax play consequence --seats hf:./my-model --grid --out runs/ca   # 228 x 5 sweep
    dilemmax play moral_hazard --seats openai:my-model --grid --episodes 3 --out runs/grid
    dilemmax play moral_hazard --seats openai:my-model --grid --shard 0/4 --out runs/grid.0
    dilemmax play merge runs/grid.0 runs/grid.1 runs/grid.2 runs/grid.3 --out runs/grid

A seat is ``openai:<model>``, ``hf:<model folder>[,adapter=<folder>]``, ``scripted:<name>`` or
``trained:<run folder>[,seed=<k>][,greedy]``. ``--seats`` fills every seat not named by
``--seat``. The same model spec on several seats is one client, so their prompts are batched
together. Re-running a command with ``--resume`` continues it from its transcript. ``--shard i/N``
plays every N-th episode of the run (each shard with its own --out, transcript and resume);
``play merge`` joins the N shards into the results the unsharded run gives.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from dilemmax.commandline import (
    add_config_arguments,
    config_from_namespace,
    output_file,
    parse_assignments,
)
from dilemmax.errors import UsageError  # a mistake in the command line: one line, exit 2
from dilemmax.llm.api import PlayRun, merge_play_shards, play_session
from dilemmax.llm.client import FatalClientError
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.limits import STOPPED_STATUS, Limits, stop_line
from dilemmax.llm.plan import CallPlan
from dilemmax.llm.pricing import load_prices
from dilemmax.llm.results import format_calls, format_summary
from dilemmax.llm.seats import seat_entries
from dilemmax.llm.session_options import ON_CALL_ERROR, SessionOptions
from dilemmax.llm.transcript import TranscriptMismatch


def add_model_arguments(
    parser, defaults: GenerateConfig | None = None, names: Sequence[str] | None = None
) -> None:
    """The model flags of every command that seats a model (``--base-url``, ``--temperature``,
    ...), one per :class:`~dilemmax.llm.config.GenerateConfig` field; ``defaults`` (a named
    config: a command's own sampling) gives their defaults, ``names`` limits them to those
    fields."""
    add_config_arguments(parser, GenerateConfig, defaults, names)
    if names is None or "output" in names:
        parser.add_argument("--no-structured-output", dest="output_mode", action="store_const",
                            const="text", help="same as --output-mode text")  # fmt: skip


def generate_config(
    args: argparse.Namespace, defaults: GenerateConfig | None = None
) -> GenerateConfig:
    """The :class:`~dilemmax.llm.config.GenerateConfig` of :func:`add_model_arguments`' flags
    (a field without a flag keeps its value in ``defaults``), checked (a value out of range is
    one line naming its flag)."""
    return config_from_namespace(GenerateConfig, args, defaults)


SESSION = SessionOptions()  # the defaults of the session flags


def add_session_arguments(
    parser, out_help: str = "run folder (transcript.jsonl, results.json)", shard: bool = True
) -> None:
    """The seat, model and run flags of every command that plays a session (``play``,
    ``experiment``, ``scenarios evaluate``): one per
    :class:`~dilemmax.llm.session_options.SessionOptions` field, defaults from its own."""
    parser.add_argument("--seat", action="append", help="agent=<kind>:<target> (repeatable)")
    parser.add_argument("--seats", help="<kind>:<target> for every seat not given by --seat")
    add_model_arguments(parser)
    parser.add_argument("--protocol", action="append", help="text protocol option key=value")
    parser.add_argument("--envs", type=int, default=SESSION.envs,
                        help="environments stepped together")  # fmt: skip
    parser.add_argument("--seed", type=int, default=SESSION.seed)
    parser.add_argument("--max-steps", type=int, help="stop each episode after this many steps")
    parser.add_argument(
        "--on-call-error",
        choices=ON_CALL_ERROR,
        default=SESSION.on_call_error,
        help="a call that failed after its retries: stop the run (resume later; default) or "
        "play the invalid move and go on",
    )
    parser.add_argument("--out", help=out_help)
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_cost_arguments(parser)
    add_spending_arguments(parser)
    if shard:
        parser.add_argument("--shard", help="play shard i of N (i/N) of the episodes; merge later")


def add_cost_arguments(parser) -> None:
    """``--plan`` and ``--prices FILE`` (:mod:`dilemmax.llm.plan`, :mod:`dilemmax.llm.pricing`)."""
    parser.add_argument(
        "--plan", action="store_true",
        help="print the run's plan (calls, prompt and completion tokens, cost per model seat) "
        "and stop before any call",
    )  # fmt: skip
    parser.add_argument(
        "--prices", metavar="FILE",
        help="JSON or YAML: model -> {input, cached_input, output} dollars per million tokens "
        "(a seat's own price=IN/OUT comes first)",
    )  # fmt: skip


def add_spending_arguments(parser) -> None:
    """``--max-calls``, ``--token-limit``, ``--cost-limit`` (:mod:`dilemmax.llm.limits`) and
    ``--cache [DIR]`` (:mod:`dilemmax.llm.cache`)."""
    stop = f"; reached, the run stops (exit status {STOPPED_STATUS}): --resume with a higher one"
    parser.add_argument("--max-calls", type=int, help="model calls the run may make" + stop)
    parser.add_argument("--token-limit", type=int,
                        help="prompt + completion tokens the run may spend" + stop)  # fmt: skip
    parser.add_argument("--cost-limit", type=float,
                        help="dollars the run may spend, at the seats' prices" + stop)  # fmt: skip
    parser.add_argument(
        "--cache", nargs="?", const=True, metavar="DIR",
        help="answer calls from a response cache across runs and store new replies there "
        "(default DIR: $XDG_CACHE_HOME/dilemmax/responses, ~/.cache/dilemmax/responses)",
    )  # fmt: skip


def spending_options(args: argparse.Namespace) -> dict:
    """The SessionOptions fields of :func:`add_spending_arguments`' flags."""
    limits = Limits(args.max_calls, args.token_limit, args.cost_limit).check()
    return {"limits": limits, "cache": args.cache}


def session_options(args: argparse.Namespace) -> SessionOptions:
    """The :class:`~dilemmax.llm.session_options.SessionOptions` of :func:`add_session_arguments`'
    flags (the model flags checked: a value out of range is one line naming its flag)."""
    return SessionOptions(
        seats=seat_entries(args.seat),
        default_seat=args.seats,
        generate=generate_config(args),
        protocol=parse_assignments(args.protocol, "--protocol"),
        envs=args.envs,
        seed=args.seed,
        max_steps=args.max_steps,
        on_call_error=args.on_call_error,
        out=args.out,
        resume=args.resume,
        progress=not args.no_progress,
        shard=getattr(args, "shard", None),
        **spending_options(args),
        prices=load_prices(args.prices) if args.prices else {},
    )


def _cmd_play(args) -> int:
    return _one_line_errors(lambda: _play(args))


def _cmd_merge(args) -> int:
    return _one_line_errors(lambda: _merge(args.dirs, args.out, args.json))


def _one_line_errors(command) -> int:
    try:
        return command()
    except (UsageError, FatalClientError, TranscriptMismatch, FileExistsError) as error:
        print(f"dilemmax play: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2


def _play(args) -> int:
    """``dilemmax play ENV ...``: the flags as :func:`~dilemmax.llm.api.play_session`'s
    arguments."""
    if args.json:  # checked writable before the run
        output_file(args.json, "--json")
    run = play_session(
        args.env,
        options=session_options(args),  # built and checked once, handed on as it is
        episodes=args.episodes,
        env_options=parse_assignments(args.set),
        grid=args.grid,
        rotate=args.rotate,
        plan=args.plan,
    )
    if isinstance(run, CallPlan):  # --plan: no call made, nothing written
        print(run.format())
        return 0
    _report(run, args.json)
    if run.stopped is not None:
        print(stop_line("play", run.stopped, run.out, len(run.episodes)), file=sys.stderr)
        return STOPPED_STATUS
    if args.shard is not None and run.out is not None and (run.out / "shard.json").is_file():
        print(f"shard {args.shard}: merge the shards with `dilemmax play merge DIR... --out DIR`")
    return 0


def _merge(dirs: list[str], out: str | None, json_path: str | None) -> int:
    """``dilemmax play merge SHARD_DIR... --out DIR``: the shards' episodes as one run."""
    if json_path:
        output_file(json_path, "--json")
    _report(merge_play_shards(dirs, out), json_path)
    return 0


def _report(run: PlayRun, json_path: str | None) -> None:
    """The run's summary and call counts on stdout; its results in ``json_path`` too."""
    stopped = f", {run.truncated} stopped at --max-steps {run.max_steps}" if run.truncated else ""
    print(f"{run.env}: {len(run.episodes)} episode(s) in {run.wall_s:.1f}s{stopped}")
    print(format_summary(run.summary))
    calls = format_calls(run.calls, run.prices)
    if calls:
        print(calls)
    if run.out is not None:
        print(f"transcript: {run.out / 'transcript.jsonl'}  results: {run.out / 'results.json'}")
    if json_path:
        Path(json_path).write_text(json.dumps(run.to_json(), indent=1, default=str) + "\n")


class _AnyWord(dict):
    """The subcommands by name, as a mapping that holds every word: the word that names no
    subcommand is the game (:class:`_GameOrSubcommand`)."""

    def __init__(self, subcommands: dict):
        super().__init__()
        self.subcommands = subcommands

    def __contains__(self, word) -> bool:
        return True

    def __iter__(self):
        return iter(self.subcommands)

    def __len__(self) -> int:
        return len(self.subcommands)

    def __getitem__(self, name):
        return self.subcommands[name]

    def items(self):
        return self.subcommands.items()

    def keys(self):
        return self.subcommands.keys()


class _GameOrSubcommand(argparse._SubParsersAction):
    """``play``'s first word: one of its subcommands (``merge``) or the game to play. argparse's
    subparsers know only the names added to them, while any registered env id (a versioned one
    too) is a game; so a word that names no subcommand and what follows it are parsed by
    ``game_parser`` (the play options, only the given ones set over the play parser's
    defaults)."""

    game_parser: argparse.ArgumentParser

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.choices = _AnyWord(self._name_parser_map)  # argparse checks the word is a choice

    def __call__(self, parser, namespace, values, option_string=None):
        if values[0] in self._name_parser_map:
            super().__call__(parser, namespace, values, option_string)
            return
        for name, value in vars(self.game_parser.parse_args(values)).items():
            setattr(namespace, name, value)


def add_commands(subparsers) -> None:
    """Adds ``play`` (``play ENV``, and its subcommand ``merge``) to the main parser's
    subcommands."""
    p = subparsers.add_parser(
        "play",
        help="play episodes with language-model, scripted and trained seats (batched)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="%(prog)s ENV [options]\n       %(prog)s merge SHARD_DIR... [--out DIR] [--json F]",
    )
    _play_arguments(p)
    p.set_defaults(func=_cmd_play)
    game = argparse.ArgumentParser(
        prog=p.prog, usage=p.usage, description=p.description, formatter_class=p.formatter_class
    )
    game.add_argument("env", help="environment id (see `dilemmax list`)")
    _play_arguments(game)
    for action in game._actions:  # an option left out keeps what the play parser gave it
        action.default = argparse.SUPPRESS
    sub = p.add_subparsers(
        dest="play_command", metavar="ENV | merge", action=_GameOrSubcommand, required=True,
        prog=p.prog,
        help="the environment id to play (see `dilemmax list`), or a subcommand",
    )  # fmt: skip
    sub.game_parser = game
    m = sub.add_parser(
        "merge",
        help="the shards of one run (--shard i/N) as that run",
        description="``dilemmax play merge SHARD_DIR... --out DIR``: the N shards' episodes, "
        "transcripts and results as the one run the unsharded command gives.",
    )
    m.add_argument("dirs", nargs="+", metavar="SHARD_DIR", help="the shards' --out folders")
    m.add_argument("--out", help="folder for the merged run")
    m.add_argument("--json", help="also write the results to this JSON file")
    m.set_defaults(func=_cmd_merge)


def _play_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``dilemmax play ENV``."""
    add_session_arguments(p)
    p.add_argument("--episodes", type=int, default=1, help="episodes (per grid configuration)")
    p.add_argument("--set", action="append", help="env option key=value (repeatable)")
    p.add_argument("--grid", action="store_true",
                   help="sweep the paper's grid (consequence: contexts x rules; moral_hazard: "
                   "the 15 conditions)")  # fmt: skip
    p.add_argument("--rotate", action="store_true", help="play every seating rotation")
    p.add_argument("--json", help="also write the results to this JSON file")
