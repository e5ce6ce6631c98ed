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
from pathlib import Path

from dilemmax.commandline import (
    add_model_arguments,
    generate_config,
    output_file,
    parse_assignments,
)
from dilemmax.errors import UsageError  # a mistake in the command line: one line, exit 2
from dilemmax.llm.api import PlayRun, merge_play_shards, play_session
from dilemmax.llm.client import FatalClientError
from dilemmax.llm.results import format_calls, format_summary
from dilemmax.llm.seats import seat_entries
from dilemmax.llm.session import ON_CALL_ERROR
from dilemmax.llm.transcript import TranscriptMismatch


def _cmd_play(args) -> int:
    try:
        if args.env == "merge":
            return _merge(args.dirs, args.out, args.json)
        if args.dirs:
            raise UsageError(f"unexpected argument(s) {args.dirs}: only `play merge` takes folders")
        return _play(args)
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
        seats=seat_entries(args.seat),
        default_seat=args.seats,
        episodes=args.episodes,
        seed=args.seed,
        envs=args.envs,
        max_steps=args.max_steps,
        env_options=parse_assignments(args.set),
        protocol=parse_assignments(args.protocol, "--protocol"),
        generate=generate_config(args),
        grid=args.grid,
        rotate=args.rotate,
        on_call_error=args.on_call_error,
        out=args.out,
        resume=args.resume,
        shard=args.shard,
        progress=not args.no_progress,
    )
    _report(run, args.json)
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
    calls = format_calls(run.calls)
    if calls:
        print(calls)
    if run.out is not None:
        print(f"transcript: {run.out / 'transcript.jsonl'}  results: {run.out / 'results.json'}")
    if json_path:
        Path(json_path).write_text(json.dumps(run.to_json(), indent=1, default=str) + "\n")


def add_commands(subparsers) -> None:
    """Adds ``play`` to the main parser's subcommands."""
    p = subparsers.add_parser(
        "play",
        help="play episodes with language-model, scripted and trained seats (batched)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("env", help="environment id (see `dilemmax list`), or merge")
    p.add_argument("dirs", nargs="*", metavar="SHARD_DIR", help="play merge: the shards' --out")
    p.add_argument("--seat", action="append", help="agent=<kind>:<target> (repeatable)")
    p.add_argument("--seats", help="<kind>:<target> for every seat not given by --seat")
    add_model_arguments(p)
    p.add_argument("--episodes", type=int, default=1, help="episodes (per grid configuration)")
    p.add_argument("--envs", type=int, default=16, help="environments stepped together")
    p.add_argument("--max-steps", type=int, help="stop each episode after this many steps")
    p.add_argument(
        "--on-call-error",
        choices=ON_CALL_ERROR,
        default="stop",
        help="a call that failed after its retries: stop the run (resume later; default) or "
        "play the invalid move and go on",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", action="append", help="env option key=value (repeatable)")
    p.add_argument("--protocol", action="append", help="text protocol option key=value")
    p.add_argument("--grid", action="store_true",
                   help="sweep the paper's grid (consequence: contexts x rules; moral_hazard: "
                   "the 15 conditions)")  # fmt: skip
    p.add_argument("--rotate", action="store_true", help="play every seating rotation")
    p.add_argument("--out", help="run folder (transcript.jsonl, results.json)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--json", help="also write the results to this JSON file")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--shard", help="play shard i of N (i/N) of the run's episodes; merge later")
    p.set_defaults(func=_cmd_play)
