"""``dilemmax scenarios``: the registered scenario sets, and a focal population scored on one.

    dilemmax scenarios list [--game moral_hazard] [--json sets.json]
    dilemmax scenarios evaluate --game open_harvest --run runs/oh-ippo,seed=1 --out runs/oh-test
    dilemmax scenarios evaluate --game consequence --zoo consequence/ippo_s0 --scenario-set train
    dilemmax scenarios evaluate --game moral_hazard --scripted teacher --episodes 32
    dilemmax scenarios evaluate --game moral_hazard --seats openai:my-model \\
        --base-url http://localhost:8000/v1 --episodes 8 --out runs/mh-model   # then --resume

The focal population is one of: a ``dilemmax train`` run folder (``--run DIR[,seed=k]``, trained
on the full game or on a scenario set, ``dilemmax train scenarios``), a zoo population, a
scripted policy, or seats of ``dilemmax play`` (``--seat agent=spec`` / ``--seats spec``:
language models through the batched play harness, with its transcript and ``--resume``). Every
scenario of the set (default ``test``) plays ``--episodes`` episodes; each row is the focal
agents' per-capita return with its 95% interval and, with ``--references zoo`` (the default),
the normalised score against random focal agents and the best of the game's zoo populations.
``--out`` gets summary.md, summary.png and results.json, each row with its scenario's digest.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import jax

from dilemmax.commandline import (
    SCENARIO_SETS,
    add_model_arguments,
    output_file,
    output_folder,
    positive_int,
    seed_int,
)
from dilemmax.envs.memory import check_episodes_fit, check_waves_fit
from dilemmax.envs.registry import make
from dilemmax.envs.seat_spec import is_model_seat, parse_seat
from dilemmax.errors import UsageError, deprecated
from dilemmax.llm.client import FatalClientError
from dilemmax.llm.policy import CallStats
from dilemmax.llm.transcript import TranscriptMismatch
from dilemmax.runlock import RunLock, last_writer, refuse_other_writer
from dilemmax.scenarios import evaluate as E
from dilemmax.scenarios.focal import focal_policy, zoo_populations
from dilemmax.scenarios.play import play_scenarios
from dilemmax.scenarios.registry import SETS, scenario_set

GAMES = tuple(sorted({s.game for s in SETS.values()}))
HELP = "held-out scenarios: list the sets, or score a focal population on one"


# --------------------------------------------------------------------------- list
def set_listing(names: list[str]) -> list[dict]:
    """Every scenario of the named sets: name, description, focal and background seats, digest."""
    out = []
    for set_name in names:
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


def _cmd_list(args) -> int:
    if args.game is not None and args.game not in GAMES:
        raise UsageError(f"--game {str(args.game)[:80]!r}: no scenario sets; games: {GAMES}")
    if args.json:
        output_file(args.json, "--json")
    names = [n for n in SETS if args.game is None or SETS[n].game == args.game]
    listing = set_listing(names)
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
def _check_evaluate(args) -> str:
    if args.game not in GAMES:
        raise UsageError(f"--game {str(args.game)[:80]!r}: no scenario sets; games: {GAMES}")
    source = _source(args)
    if args.max_steps is not None and args.max_steps < 1:
        raise UsageError("--max-steps must be >= 1")
    if source != "seats":
        for flag in ("resume",):
            if getattr(args, flag):
                raise UsageError(f"--{flag} is for --seat/--seats focal seats (their transcript)")
    return source


def _check_outputs(args) -> None:
    """--json and --out writable (the folder made now), before the first compile."""
    if args.json:
        output_file(args.json, "--json")
    if args.out:
        output_folder(args.out, "--out")


COMMAND = "scenarios evaluate"  # what its run folders' lock records (runlock.last_writer)


def _check_out_is_ours(out: Path) -> None:
    """``--out`` is new, or an earlier ``scenarios evaluate`` folder: summary.md, summary.png and
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


def _finite(value):
    """JSON has no infinity: an unbounded interval (one episode) is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_outputs(args, payload: dict, rows: list[dict], title: str) -> None:
    table = E.summary_table(rows)
    print(title)
    print(table, end="")
    text = json.dumps(_json_safe(payload), indent=1) + "\n"
    if args.out:
        out = Path(args.out)
        with RunLock(out, COMMAND):
            (out / "summary.md").write_text(f"# {title}\n\n{table}")
            E.summary_plot(rows, out / "summary.png", title)
            (out / "results.json").write_text(text)
        print(f"wrote {out / 'summary.md'}, {out / 'summary.png'}, {out / 'results.json'}")
    if args.json:
        Path(args.json).write_text(text)


def _json_safe(tree):
    if isinstance(tree, dict):
        return {k: _json_safe(v) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return [_json_safe(v) for v in tree]
    return _finite(tree)


def _check_size(args, env, source: str) -> None:
    """Refuses, before anything loads or plays, ``--episodes`` (and ``--envs``) beyond this
    machine's memory: each scenario's episodes play in one compiled program, or model seats play
    in waves of ``--envs`` (:mod:`dilemmax.envs.memory`)."""
    episodes = args.episodes * len(env.names)
    if source == "seats":
        check_waves_fit(env, args.envs, episodes, "scenarios evaluate", "--envs or --episodes")
    else:
        check_episodes_fit(env, episodes, "scenarios evaluate", "--episodes", None, args.max_steps)


def _cmd_evaluate(args) -> int:
    try:
        return _evaluate(args)
    except (FatalClientError, TranscriptMismatch, FileExistsError) as error:
        raise UsageError(str(error)) from error


def _scenario_set_name(args) -> str:
    """``--scenario-set``, or its old spelling ``--set train|test`` (``--set`` means key=value
    options in every other command), with one deprecation line."""
    if args.old_set is not None:
        deprecated("scenarios evaluate --set train|test is now --scenario-set train|test")
        return args.old_set
    return args.scenario_set


def _evaluate(args) -> int:
    args.scenario_set = _scenario_set_name(args)
    source = _check_evaluate(args)
    if args.out:
        _check_out_is_ours(Path(args.out))
    scenarios = scenario_set(args.game, args.scenario_set)
    env = scenarios.build()
    _check_size(args, env, source)
    key = jax.random.key(args.seed)
    populations = zoo_populations(env, args.game) if args.references == "zoo" else None
    calls = None
    if source == "seats":
        _play_arguments(args)
        label = ", ".join([*(args.seat or []), *([f"--seats {args.seats}"] if args.seats else [])])
        scores, played = play_scenarios(scenarios, env, args)
        calls = call_summary(played)
    else:
        label, policy = args.focal, _focal_policy(args, env)
        _check_outputs(args)
        scores = E.score_policy(scenarios, policy, key, args.episodes, env, None, args.max_steps)
    refs = {}
    if populations is not None:
        refs = E.references(scenarios, populations, key, args.episodes, env, None, args.max_steps)
    rows = E.summary_rows(scores, refs)
    payload = {
        "set": scenarios.name,
        "focal": label,
        "seed": args.seed,
        "episodes": args.episodes,
        "max_steps": args.max_steps,
        "references": refs or None,
        "rows": rows,
        **({"calls": calls} if calls is not None else {}),
    }
    write_outputs(args, payload, rows, f"{scenarios.name}: {label}")
    if args.focal_flag[2:] in OLD_SOURCES:  # said last, so a mistake stays one line
        print(f"dilemmax: {args.focal_flag} is deprecated; use --focal {label}", file=sys.stderr)
    return 0


def _focal_policy(args, env):
    """The --focal population, a mistake naming the flag the user gave it with."""
    try:
        return focal_policy(args.focal, env, args.game)
    except UsageError as error:
        given = str(getattr(args, args.focal_flag[2:]))[:120]
        raise UsageError(f"{args.focal_flag} {given!r}: {error}") from error


def call_summary(results) -> dict:
    """seat -> its model calls over every scenario (calls, tokens, errors, retries)."""
    stats: dict[str, CallStats] = {}
    for result in results:
        for seat, s in result.stats.items():
            stats[seat] = stats.get(seat, CallStats()).merged(s)
    return {seat: s.summary() for seat, s in stats.items()}


def _play_arguments(args) -> None:
    """The fields ``dilemmax play``'s session reads that this command fixes."""
    args.env, args.grid, args.shard = args.game, False, None


def add_commands(subparsers) -> None:
    """Adds ``scenarios`` (``list``, ``evaluate``) to the main parser's subcommands."""
    p = subparsers.add_parser(
        "scenarios", help=HELP, description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    sub = p.add_subparsers(dest="scenarios_command", required=True)
    q = sub.add_parser("list", help="every set and scenario, with its digest")
    q.add_argument("--game", help=f"only this game's sets ({', '.join(GAMES)})")
    q.add_argument("--json", help="also write the listing to this JSON file")
    q.set_defaults(func=_cmd_list)

    q = sub.add_parser("evaluate", help="a focal population's score on a scenario set")
    q.add_argument("--game", required=True, help=f"the game ({', '.join(GAMES)})")
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
    q.add_argument("--seat", action="append", help="focal agent=<kind>:<target> (repeatable)")
    q.add_argument("--seats", help="<kind>:<target> for every focal seat not given by --seat")
    add_model_arguments(q)
    q.add_argument("--episodes", type=positive_int, default=8, help="per scenario (default 8)")
    q.add_argument("--seed", type=seed_int, default=0)
    q.add_argument("--references", choices=("zoo", "none"), default="zoo",
                   help="zoo (default): random focal agents and the best zoo one")  # fmt: skip
    q.add_argument("--max-steps", type=int, help="stop each episode after this many steps")
    q.add_argument("--envs", type=int, default=16, help="seats: environments stepped together")
    q.add_argument("--protocol", action="append", help="seats: text protocol option key=value")
    q.add_argument("--on-call-error", choices=("stop", "invalid"), default="stop",
                   help="seats: a call that failed after its retries stops the run (resume "
                   "later) or plays the invalid move")  # fmt: skip
    q.add_argument("--out", help="folder: summary.md, summary.png, results.json (+ transcript)")
    q.add_argument("--resume", action="store_true", help="seats: continue the run in --out")
    q.add_argument("--json", help="also write results.json's content to this file")
    q.add_argument("--no-progress", action="store_true", help="no progress bar")
    q.set_defaults(func=_cmd_evaluate)
