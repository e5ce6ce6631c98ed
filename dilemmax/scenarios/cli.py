"""``dilemmax scenarios``: the registered scenario sets, and a focal population scored on one.

    dilemmax scenarios list [--game moral_hazard] [--json sets.json]
    dilemmax scenarios evaluate --game open_harvest --focal trained:runs/oh-ippo,seed=1 \
        --out runs/oh-test
    dilemmax scenarios evaluate --game consequence --focal zoo:consequence/ippo_s0 \
        --scenario-set train
    dilemmax scenarios evaluate --game moral_hazard --focal teacher --episodes 32
    dilemmax scenarios evaluate --game moral_hazard --seats openai:my-model \\
        --base-url http://localhost:8000/v1 --episodes 8 --out runs/mh-model   # then --resume

The focal population is one seat spec in every focal seat (``--focal``: a ``dilemmax train`` run
folder ``trained:DIR[,seed=k][,greedy]``, trained on the full game or on a scenario set, a zoo
population ``zoo:<game>/<population>``, a scripted policy; the older ``--run``, ``--zoo`` and
``--scripted`` say the same with a deprecation line), or seats of ``dilemmax play`` (``--seat
agent=spec`` / ``--seats spec``, or a model given to ``--focal``: language models through the
batched play harness, with its transcript and ``--resume``). Every
scenario of the set (default ``test``) plays ``--episodes`` episodes; each row is the focal
agents' per-capita return with its 95% interval and, with ``--references zoo`` (the default),
the normalised score against random focal agents and the best of the game's zoo populations.
``--out`` gets summary.md, summary.png and results.json, each row with its scenario's digest.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from dilemmax.commandline import SCENARIO_SETS, output_file, positive_int
from dilemmax.envs.seat_spec import is_model_seat, parse_seat
from dilemmax.errors import UsageError, deprecated
from dilemmax.llm.cli import add_session_arguments, session_options
from dilemmax.llm.client import FatalClientError
from dilemmax.llm.limits import STOPPED_STATUS, stop_line
from dilemmax.llm.plan import CallPlan
from dilemmax.llm.transcript import TranscriptMismatch
from dilemmax.scenarios.api import FocalError, check_game, evaluate_scenarios, scenario_listing
from dilemmax.scenarios.registry import SET_GAMES

HELP = "held-out scenarios: list the sets, or score a focal population on one"


# --------------------------------------------------------------------------- list
def _cmd_list(args) -> int:
    if args.json:
        output_file(args.json, "--json")
    listing = scenario_listing(args.game)
    for entry in listing:
        print(f"{entry['set']}  (options {entry['options']})")
        for row in entry["scenarios"]:
            seats = ", ".join(f"{a}={spec}" for a, spec in row["background"].items())
            print(f"  {row['scenario']}  [{row['digest']}]")
            print(f"    {row['description']}")
            print(f"    focal {', '.join(row['focal'])}; background {seats}")
    if args.json:
        Path(args.json).write_text(json.dumps(listing, indent=1) + "\n")
    return 0


# --------------------------------------------------------------------------- focal populations
SOURCES = ("run", "zoo", "scripted", "focal", "seats")
# The focal-population flags from before seat specs: each is the seat spec it builds, with a
# one-line deprecation on stderr (a user's script keeps working).
OLD_SOURCES = {"run": "trained", "zoo": "zoo", "scripted": "scripted"}


def _source(args) -> str:
    """Which focal population the flags name: exactly one of --focal (or an old --run, --zoo,
    --scripted) and --seat/--seats; a model seat given to --focal plays as --seats does."""
    given = [name for name in SOURCES[:4] if getattr(args, name)]
    if args.seat or args.seats:
        given.append("seats")
    if len(given) != 1:
        shown = ", ".join(f"--{g}" if g != "seats" else "--seat/--seats" for g in given)
        raise UsageError(
            "name one focal population: --focal SPEC (--run DIR, --zoo NAME, --scripted NAME) "
            f"or --seat/--seats (got {shown or 'none'})"
        )
    args.focal_flag = f"--{given[0]}"  # how the user named it (errors and the deprecation say)
    if given[0] in OLD_SOURCES:
        args.focal = _old_source_spec(given[0], getattr(args, given[0]), args.greedy)
    elif given[0] == "focal" and args.greedy:
        args.focal = _with_greedy(args.focal)
    if given[0] != "seats" and is_model_seat(args.focal):
        args.seats, args.focal = args.focal, None  # a model plays through the batched harness
        return "seats"
    return "seats" if given[0] == "seats" else "focal"


def _old_source_spec(flag: str, value: str, greedy: bool) -> str:
    """The seat spec of ``--run DIR[,seed=k][,greedy]``, ``--zoo NAME`` or ``--scripted NAME``,
    parsed now: a mistake is one line naming the flag."""
    spec = f"{OLD_SOURCES[flag]}:{value}"
    try:
        parse_seat(spec)
    except UsageError as error:
        form = {"run": "DIR[,seed=<k>][,greedy]", "zoo": "<game>/<population>"}.get(flag, "NAME")
        raise UsageError(f"--{flag} {str(value)[:120]!r}: expected {form} ({error})") from None
    return _with_greedy(spec) if greedy else spec


def _with_greedy(spec: str) -> str:
    """``--greedy`` as the spec's own ``,greedy`` (a trained or zoo population's; a kind
    without it, a scripted policy, plays as it always does)."""
    seat = parse_seat(spec)
    if seat.options.get("greedy") or "greedy" not in seat.seat_kind.options:
        return spec
    return f"{spec},greedy"


# --------------------------------------------------------------------------- evaluate
def _cmd_evaluate(args) -> int:
    args.scenario_set = _scenario_set_name(args)
    check_game(args.game)
    source = _source(args)
    if args.json:
        output_file(args.json, "--json")
    session = session_options(args)  # after _source: a model --focal plays as --seats
    run = {f.name: getattr(session, f.name) for f in dataclasses.fields(session)}
    del run["shard"]  # a scenario evaluation is not sharded
    try:
        evaluation = evaluate_scenarios(
            args.game, args.focal if source == "focal" else None, scenario_set=args.scenario_set,
            episodes=args.episodes, references=args.references == "zoo", plan=args.plan, **run,
        )  # fmt: skip
    except FocalError as error:  # named by the flag the user gave the population with
        given = str(getattr(args, args.focal_flag[2:]))[:120]
        raise UsageError(f"{args.focal_flag} {given!r}: {error}") from error
    except (FatalClientError, TranscriptMismatch, FileExistsError) as error:
        raise UsageError(str(error)) from error
    if isinstance(evaluation, CallPlan):  # --plan: no call made, nothing written
        print(evaluation.format())
        return 0
    if evaluation.stopped is not None:  # a spending limit: the calls so far, no scores
        if args.json:
            Path(args.json).write_text(json.dumps(evaluation.to_json(), indent=1) + "\n")
        finished = sum(len(r.episodes) for r in evaluation.stopped.partial)
        line = stop_line("scenarios evaluate", evaluation.stopped, evaluation.out, finished)
        print(line, file=sys.stderr)
        return STOPPED_STATUS
    print(evaluation.title)
    print(evaluation.table(), end="")
    if evaluation.out is not None:
        out = evaluation.out
        print(f"wrote {out / 'summary.md'}, {out / 'summary.png'}, {out / 'results.json'}")
    if args.json:
        Path(args.json).write_text(json.dumps(evaluation.to_json(), indent=1) + "\n")
    if args.focal_flag[2:] in OLD_SOURCES:  # said last, so a mistake stays one line
        deprecated(f"scenarios evaluate {args.focal_flag} is now --focal {evaluation.focal}")
    return 0


def _scenario_set_name(args) -> str:
    """``--scenario-set``, or its old spelling ``--set train|test`` (``--set`` means key=value
    options in every other command), with one deprecation line."""
    if args.old_set is not None:
        deprecated("scenarios evaluate --set train|test is now --scenario-set train|test")
        return args.old_set
    return args.scenario_set


def add_commands(subparsers) -> None:
    """Adds ``scenarios`` (``list``, ``evaluate``) to the main parser's subcommands."""
    p = subparsers.add_parser(
        "scenarios", help=HELP, description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    sub = p.add_subparsers(dest="scenarios_command", required=True)
    q = sub.add_parser("list", help="every set and scenario, with its digest")
    q.add_argument("--game", help=f"only this game's sets ({', '.join(SET_GAMES)})")
    q.add_argument("--json", help="also write the listing to this JSON file")
    q.set_defaults(func=_cmd_list)

    q = sub.add_parser("evaluate", help="a focal population's score on a scenario set")
    q.add_argument("--game", required=True, help=f"the game ({', '.join(SET_GAMES)})")
    q.add_argument("--scenario-set", choices=SCENARIO_SETS, default="test",
                   help="which of the game's scenario sets to play (default: test)")  # fmt: skip
    q.add_argument("--set", dest="old_set", choices=SCENARIO_SETS, help=argparse.SUPPRESS)
    q.add_argument("--focal", help="the focal population's seat spec, in every focal seat: "
                   "trained:DIR[,seed=<k>][,greedy], zoo:<game>/<population>[,greedy], "
                   "scripted:NAME (or a bare NAME); a model seat plays as --seats")  # fmt: skip
    q.add_argument("--run", help="deprecated: --focal trained:DIR[,seed=<k>][,greedy]")
    q.add_argument("--zoo", help="deprecated: --focal zoo:<game>/<population>")
    q.add_argument("--scripted", help="deprecated: --focal scripted:NAME")
    q.add_argument("--greedy", action="store_true",
                   help="a trained or zoo population's most likely action (,greedy)")  # fmt: skip
    q.add_argument("--episodes", type=positive_int, default=8, help="per scenario (default 8)")
    q.add_argument("--references", choices=("zoo", "none"), default="zoo",
                   help="zoo (default): random focal agents and the best zoo one")  # fmt: skip
    q.add_argument("--json", help="also write results.json's content to this file")
    # The focal seats (the agents of a scenario env are its focal seats), the model flags and
    # the run flags: play's and experiment's own, declared once (no --shard: not sharded).
    add_session_arguments(
        q, out_help="folder: summary.md, summary.png, results.json (+ transcript)", shard=False
    )
    q.set_defaults(func=_cmd_evaluate)
