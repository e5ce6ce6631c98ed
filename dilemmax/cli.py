"""The ``dilemmax`` command: list envs, play rollouts, train and evaluate agents.

Commands share :func:`parse_assignments` (``--set name=value``, typed by the option it sets),
the argparse types :func:`positive_int` and :func:`seed_int`, and :func:`user_input`, which turns
setup errors into a :class:`~dilemmax.errors.UsageError`. :func:`main` prints a UsageError as one
line on stderr and exits with status 2, so a command added by another module only needs to raise
one (or let an :class:`~dilemmax.envs.options.OptionError` through).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from dilemmax.envs.options import OptionError, OptionSpec, parse_value
from dilemmax.errors import UsageError

# Rollouts whose episodes are at least this long play step by step with a progress bar.
PROGRESS_MIN_STEPS = 200


def parse_assignments(
    pairs: list[str] | None,
    what: str = "--set",
    specs: Mapping[str, OptionSpec] | None = None,
) -> dict:
    """``["num_agents=5", "rule=RP"]`` -> ``{"num_agents": 5, "rule": "RP"}``.

    The one string-to-value parser of every command. With ``specs`` (name -> spec, e.g.
    :func:`dilemmax.envs.options.env_option_specs`), each value is parsed as its option's kind
    (``sorted_agents=false`` is False, ``num_rounds=2.7`` is refused) and an unknown name is an
    error listing the known ones; without, values are JSON or Python literals where they parse
    as one, text otherwise.

    Total: raises only :class:`~dilemmax.envs.options.OptionError` (a
    :class:`~dilemmax.errors.UsageError`), whose message names the pair and what is allowed.
    """
    out = {}
    for pair in pairs or []:
        name, sep, raw = str(pair).partition("=")
        name = name.strip()
        if not sep or not name:
            raise OptionError(f"{what} expects name=value, got {pair!r}")
        spec = None
        if specs is not None:
            if name not in specs:
                known = ", ".join(sorted(specs))
                raise OptionError(f"{what}: unknown name {name!r}; choose from {known}")
            spec = specs[name]
        out[name] = parse_value(raw, spec, name)
    return out


def positive_int(text: str) -> int:
    """argparse type of counts that must be >= 1 (``--episodes``)."""
    value = _int_arg(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def seed_int(text: str) -> int:
    """argparse type of seeds: 0 .. 2**31 - 1."""
    value = _int_arg(text)
    if not 0 <= value < 2**31:
        raise argparse.ArgumentTypeError(f"must be an integer in 0..{2**31 - 1}, got {text!r}")
    return value


def _int_arg(text: str) -> int:
    try:
        return parse_value(text, OptionSpec("int"))
    except OptionError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


@contextlib.contextmanager
def user_input(what: str) -> Iterator[None]:
    """Turns the ValueError / TypeError / KeyError of setting up from user input (building an
    env, a trainer) into a :class:`UsageError` naming ``what``."""
    try:
        yield
    except UsageError:
        raise
    except (ValueError, TypeError, KeyError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        raise UsageError(f"{what}: {message}") from None


def build_env(env_id: str, pairs: list[str] | None):
    """The env ``env_id`` with ``--set`` options typed by its constructor; UsageError on any
    unknown env, unknown option or bad value."""
    import dilemmax
    from dilemmax.envs.options import env_option_specs

    with user_input(env_id):
        options = parse_assignments(pairs, "--set", env_option_specs(env_id))
        return dilemmax.make(env_id, **options)


def _cmd_list(args) -> int:
    from dilemmax.envs.registry import env_spec, registered_envs

    for env_id in registered_envs():
        print(f"{env_id:14s} {env_spec(env_id).summary}")
    return 0


def available_policies(env) -> dict:
    from dilemmax.agents.policy import GENERIC_POLICIES

    return {**GENERIC_POLICIES, **env.scripted_policies()}


def _format_metric(value) -> str:
    value = np.asarray(value)
    if value.ndim == 0:
        return f"{float(value):.4g}"
    text = np.array2string(value, precision=4, separator=", ", max_line_width=100)
    return text.replace("\n", "\n" + " " * 35)


def _cmd_rollout(args) -> int:
    import jax

    from dilemmax.agents.arena import Arena, save_gif

    env = build_env(args.env, args.set)
    if args.gif and "rgb_array" not in env.render_modes:
        raise UsageError(
            f"--gif: {args.env} has no frames to draw (render modes {env.render_modes})"
        )
    choices = available_policies(env)
    seats = {agent: args.policy for agent in env.agents}
    seats.update(
        parse_assignments(args.seat, "--seat", dict.fromkeys(env.agents, OptionSpec("str")))
    )
    for name in seats.values():
        if name not in choices:
            raise UsageError(
                f"unknown policy {name!r} for {args.env}; choose from {sorted(choices)}"
            )
    arena = Arena(env, {agent: choices[name] for agent, name in seats.items()})
    long_episodes = env.max_steps >= PROGRESS_MIN_STEPS and not args.no_progress
    with _step_progress(arena, args.episodes * env.max_steps, long_episodes):
        result = arena.run(
            jax.random.key(args.seed),
            args.episodes,
            record=args.out,
            gif_episodes=1 if args.gif else 0,
            python_loop=True if long_episodes else None,
        )
    print(f"{args.env}: {args.episodes} episode(s), seats {seats}, seed {args.seed}")
    summary = result.summary()
    for name, value in summary.items():
        print(f"  {name:32s} {_format_metric(value)}")
    if args.gif:
        print(f"  gif: {save_gif(result.frames, args.gif, fps=args.fps, scale=args.gif_scale)}")
    if args.out:
        print(f"  transcript: {args.out}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({k: np.asarray(v).tolist() for k, v in summary.items()}, indent=2)
        )
    return 0


@contextlib.contextmanager
def _step_progress(arena, total_steps: int, enabled: bool) -> Iterator[None]:
    """A tqdm bar over played steps (an upper bound: episodes may end early)."""
    if not enabled:
        yield
        return
    from tqdm.auto import tqdm

    with tqdm(total=total_steps, unit="step", desc="rollout", dynamic_ncols=True) as bar:
        arena.on_step = lambda: bar.update(1)
        try:
            yield
        finally:
            arena.on_step = None


COMMAND_MODULES = (
    "dilemmax.train.cli",
    "dilemmax.llm.cli",
    "dilemmax.analysis.cli",
    "dilemmax.finetune.cli",
)


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # its parent package is absent
        return False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dilemmax", description="Multi-agent social dilemmas in JAX."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="registered environments")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("rollout", help="play episodes with scripted or random policies")
    p.add_argument("env", help="environment id (see `dilemmax list`)")
    p.add_argument("--policy", default="random", help="policy of every seat (default: random)")
    p.add_argument("--seat", action="append", help="agent=policy for one seat (repeatable)")
    p.add_argument("--episodes", type=positive_int, default=10, help="episodes (>= 1)")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--set", action="append", help="env option key=value (repeatable)")
    p.add_argument("--out", help="write every step to this JSONL transcript")
    p.add_argument("--gif", help="write the first episode as an animated GIF (grid games)")
    p.add_argument(
        "--gif-scale", type=positive_int, default=3, help="pixel enlargement of GIF frames"
    )
    p.add_argument("--fps", type=positive_int, default=8, help="GIF frames per second")
    p.add_argument("--json", help="write the metric summary to this JSON file")
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar: long episodes (the grid games) then play as one compiled program "
        "instead of step by step",
    )
    p.set_defaults(func=_cmd_rollout)

    # Other commands live with what they run (training, language-model play, red-teaming,
    # fine-tuning): each module's ``add_commands(subparsers)`` adds its own, when it exists.
    for module in COMMAND_MODULES:
        if _module_exists(module):
            importlib.import_module(module).add_commands(sub)
    return parser


def enable_compilation_cache() -> None:
    """Keeps compiled programs on disk between runs (env builds and steps compile once)."""
    import os

    import jax

    if os.environ.get("JAX_COMPILATION_CACHE_DIR") or jax.config.jax_compilation_cache_dir:
        return
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dilemmax" / "jax"
    jax.config.update("jax_compilation_cache_dir", str(cache))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


def main(argv: list[str] | None = None) -> int:
    """Runs one command. A user mistake (:class:`UsageError`) prints one line and returns 2."""
    return run_parsed(build_parser().parse_args(argv))


def run_parsed(args: argparse.Namespace) -> int:
    """Runs a parsed command: a :class:`UsageError` prints one line and returns 2."""
    enable_compilation_cache()
    try:
        return args.func(args)
    except UsageError as err:
        print(f"dilemmax {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"dilemmax {args.command}: interrupted", file=sys.stderr)
        return 130


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


if __name__ == "__main__":
    sys.exit(main())
