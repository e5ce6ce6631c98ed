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
import inspect
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from dilemmax.commandline import output_file, parse_assignments
from dilemmax.envs.consequence import constants as C
from dilemmax.envs.memory import check_waves_fit
from dilemmax.envs.moral_hazard import generator as moral_hazard_generator
from dilemmax.envs.registry import env_spec, make
from dilemmax.envs.rollout import num_configs_of
from dilemmax.errors import UsageError  # a mistake in the command line: one line, exit 2
from dilemmax.llm import shards
from dilemmax.llm.client import FatalClientError
from dilemmax.llm.policy import CallStats
from dilemmax.llm.results import format_calls, format_summary, summarize
from dilemmax.llm.seats import (  # add_model_arguments, build_seat: imported from here by users
    add_model_arguments,
    check_specs,
    seat_specs,
)
from dilemmax.llm.session import Part, Shard, check_run_options, model_identity, play_parts
from dilemmax.llm.transcript import TranscriptMismatch


# --------------------------------------------------------------------------- env and grids
def _env_options(env_id: str, sets: dict) -> dict:
    """``--set`` options, defaulting ``split`` to the held-out part where the env has one."""
    options = dict(sets)
    try:
        env_class = env_spec(env_id).load()
    except ValueError as error:
        raise UsageError(str(error)) from error
    params = inspect.signature(env_class.__init__).parameters
    if "split" in params and "split" not in options:
        options["split"] = "held_out"  # language-model runs evaluate on unseen layouts/rules
    return options


def _make_env(env_id: str, options: dict):
    try:
        return make(env_id, **options)
    except (TypeError, ValueError) as error:
        raise UsageError(f"{env_id}: {error}") from error


GRID_ENVS = ("consequence", "moral_hazard")


def grid_parts(env_id: str, env, options: dict) -> list[tuple[str, Any, Any, list[str]]]:
    """(part name, env, batched configs, config names) per part of the env's sweep."""
    if env_id == "consequence":
        configs = env.config_grids()["context_grid"]()  # rule-major: each rule's contexts in turn
        num = int(configs.threshold.shape[0]) // len(env.rules)
        names = [f"rule={C.RULE_NAMES[r]}" for r in env.rules for _ in range(num)]
        return [("grid", env, configs, names)]
    if env_id == "moral_hazard":
        reward = "private" if bool(env.default_config.private_reward) else "team"
        mapping = options.get("mapping", "highest")
        parts = []
        for n, conditions in moral_hazard_generator.condition_grid(mapping, reward).items():
            group_env = (
                env if n == env.num_agents else _make_env(env_id, {**options, "num_agents": n})
            )
            parts.append((f"n={n}", group_env, conditions.configs, list(conditions.names)))
        return parts
    raise UsageError(f"{env_id} has no sweep grid (--grid is for {', '.join(GRID_ENVS)})")


# --------------------------------------------------------------------------- the command
def _identity(args, options, protocol_options, specs) -> dict:
    identity = {
        "env": args.env,
        "env_options": options,
        "protocol": protocol_options,
        "seats": specs,
        "default_seat": args.seats,
        "seed": args.seed,
        "episodes": args.episodes,
        "envs": args.envs,
        "max_steps": args.max_steps,
        "grid": args.grid,
        "rotate": args.rotate,
        "sampling": [args.temperature, args.top_p, args.max_tokens, args.model_seed],
    }
    # Options that change replies or moves, named only when set, so the run key of a run
    # without them (and so its resume) is what it always was.
    model = model_identity(args, MODEL_DEFAULTS)
    if model:
        identity["model_options"] = model
    if args.on_call_error != "stop":
        identity["on_call_error"] = args.on_call_error
    return identity


def _model_defaults() -> dict:
    parser = argparse.ArgumentParser(add_help=False)
    add_model_arguments(parser)
    return vars(parser.parse_args([]))


MODEL_DEFAULTS = _model_defaults()


def _cmd_play(args) -> int:
    try:
        if args.env == "merge":
            return _merge(args)
        if args.dirs:
            raise UsageError(f"unexpected argument(s) {args.dirs}: only `play merge` takes folders")
        return _play(args)
    except (UsageError, FatalClientError, TranscriptMismatch, FileExistsError) as error:
        print(f"dilemmax play: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2


def _parts(args) -> tuple[list[Part], dict]:
    """The parts ``args`` asks for (the grid's, or one) and the run's identity."""
    check_run_options(args)
    if args.episodes < 1 or args.envs < 1:
        raise UsageError("--episodes and --envs must be >= 1")
    if args.grid and args.env not in GRID_ENVS:
        raise UsageError(f"{args.env} has no sweep grid (--grid is for {', '.join(GRID_ENVS)})")
    options = _env_options(args.env, parse_assignments(args.set))
    protocol_options = parse_assignments(args.protocol, "--protocol")
    env = _make_env(args.env, options)
    grid = grid_parts(args.env, env, options) if args.grid else [("main", env, None, None)]
    episodes = sum(args.episodes * (num_configs_of(configs) or 1) for _, _, configs, _ in grid)
    check_waves_fit(env, args.envs, episodes, "play", "--envs or --episodes")
    specs = seat_specs(env, args)
    check_specs(env, specs, args.seats, args)
    parts = [
        Part(name, part_env, configs, names, episodes=args.episodes, rotate=args.rotate)
        for name, part_env, configs, names in grid
    ]
    return parts, _identity(args, options, protocol_options, specs)


def _play(args) -> int:
    parts, identity = _parts(args)
    session = play_parts(parts, args, identity, "play")
    results = []
    for part, result in zip(parts, session.results, strict=True):
        names = part.config_names
        for info in result.episodes:
            label = names[info["config_index"]] if names else None
            info["group"] = (label or info["part"]) if args.grid else "all"
        results.append((result, names))
    payload = _report(args, results, session.out)
    if Shard.parse(args.shard).sharded:
        shards.write_record(session, "play", identity, args, extra={})
        print(f"shard {args.shard}: merge the shards with `dilemmax play merge DIR... --out DIR`")
    return payload


def _merge(args) -> int:
    """``dilemmax play merge SHARD_DIR... --out DIR``: the shards' episodes as one run."""
    if args.json:
        output_file(args.json, "--json")
    merged = shards.merge(args.dirs, args.out, "play")
    merged.args.json = args.json
    results = [(r, None) for r in merged.results]
    return _report(merged.args, results, merged.out)


def _report(args, results, out) -> int:
    stats: dict[str, CallStats] = {}
    for result, _ in results:
        for seat, s in result.stats.items():
            stats[seat] = stats.get(seat, CallStats()).merged(s)
    summaries = summarize([(r.metrics, r.episodes) for r, _ in results], lambda info: info["group"])
    episodes = sum(len(r.episodes) for r, _ in results)
    wall = sum(r.wall_s for r, _ in results)
    truncated = sum(e["truncated"] for r, _ in results for e in r.episodes)
    print(
        f"{args.env}: {episodes} episode(s) in {wall:.1f}s"
        + (f", {truncated} stopped at --max-steps {args.max_steps}" if truncated else "")
    )
    print(format_summary(summaries))
    calls = format_calls(stats)
    if calls:
        print(calls)
    payload = {
        "summary": {g: {m: list(v) for m, v in rows.items()} for g, rows in summaries.items()},
        "calls": {seat: s.summary() for seat, s in stats.items()},
        "episodes": [
            {**e, "metrics": {k: np.asarray(v[i]).tolist() for k, v in r.metrics.items()}}
            for r, _ in results
            for i, e in enumerate(r.episodes)
        ],
    }
    if out is not None:
        (out / "results.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
        print(f"transcript: {out / 'transcript.jsonl'}  results: {out / 'results.json'}")
    if getattr(args, "json", None):  # checked writable before the run (output_paths)
        Path(args.json).write_text(json.dumps(payload, indent=1, default=str) + "\n")
    return 0


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
        choices=("stop", "invalid"),
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
