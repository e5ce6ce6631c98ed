"""The ``dilemmax`` command: ``list`` and ``rollout``; the other commands live with what they run.

Training (``train``, ``evaluate``), language-model play (``play``), red-teaming (``redteam``),
fine-tuning (``finetune``), the papers' experiments (``experiment``) and held-out scenarios
(``scenarios``) are added by the ``add_commands(subparsers)`` of their package's ``cli`` module.
Every command shares the helpers of :mod:`dilemmax.commandline`: a
:class:`~dilemmax.errors.UsageError` prints as one line on stderr and exits with status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import jax
import numpy as np
from tqdm.auto import tqdm

from dilemmax.agents.arena import Arena, save_gif
from dilemmax.commandline import (
    SCENARIO_SETS,
    build_env,
    end_process,
    int_in,
    interrupted,
    output_file,
    parse_assignments,
    positive_int,
    run_parsed,
    seed_int,
    writing,
)
from dilemmax.envs.memory import (
    PYTHON_RECORD_BYTES,
    check_episodes_fit,
    check_fits,
    episode_bytes,
    host_memory,
    human_size,
)
from dilemmax.envs.options import OptionSpec
from dilemmax.envs.registry import env_spec, plugin_errors, registered_envs
from dilemmax.envs.seat_spec import SeatContext, check_seat, resolve_seat, seat_kind_problems
from dilemmax.errors import UsageError
from dilemmax.runlock import refuse_run_file

# Rollouts whose episodes are at least this long play step by step with a progress bar.
PROGRESS_MIN_STEPS = 200

# GIF limits. Every frame of the episode is enlarged in memory before the GIF is encoded: a grid
# game's 2,000 frames of 128 x 176 pixels take 1.2 GB at the default scale 3 and 8.6 GB at 8, so
# a larger scale would only fail late. GIF delays are in hundredths of a second: 100 fps at most.
MAX_GIF_SCALE = 8
MAX_GIF_FPS = 100

# The commands other modules add: name -> (the module whose add_commands adds it, its line in
# `dilemmax --help`). Dispatch is lazy by design: a command's module is imported only to parse
# that command, since the command modules pull flax, distrax and the model stack (importing all
# of them takes `dilemmax --help` from 1.3 s to 2.2 s of CPU), which listing the commands, `list`
# and `rollout` do without. Naming a module here is no import cycle: the command modules import
# dilemmax.commandline, never this module. tests/test_cli.py checks these help lines against
# the modules' own.
COMMANDS = {
    "train": ("dilemmax.train.cli", "train IPPO / MAPPO agents on an env"),
    "evaluate": ("dilemmax.train.cli", "the env's metrics of a trained policy"),
    "play": (
        "dilemmax.llm.cli",
        "play episodes with language-model, scripted and trained seats (batched)",
    ),
    "redteam": ("dilemmax.redteam.cli", "institutional red-teaming of consequence rules"),
    "finetune": ("dilemmax.finetune.cli", "LoRA SFT / RLOO / GEPA for moral_hazard"),
    "experiment": (
        "dilemmax.experiments.cli",
        "the papers' language-model experiments, one command each",
    ),
    "scenarios": (
        "dilemmax.scenarios.cli",
        "held-out scenarios: list the sets, or score a focal population on one",
    ),
    "view": (
        "dilemmax.view.cli",
        "a run as one self-contained HTML replay page (--open to open it)",
    ),
}


def _cmd_list(args) -> int:
    for env_id in registered_envs():
        print(f"{env_id:14s} {env_spec(env_id).summary}")
    for line in plugin_errors().values():  # a plug-in that failed to load: named, left out
        print(f"(plug-in {line})")
    for line in seat_kind_problems(plugins_only=True).values():
        print(f"(plug-in {line})")
    return 0


def _format_metric(value) -> str:
    value = np.asarray(value)
    if value.ndim == 0:
        return f"{float(value):.4g}"
    text = np.array2string(value, precision=4, separator=", ", max_line_width=100)
    return text.replace("\n", "\n" + " " * 35)


def _rollout_policies(env, seats: dict[str, str]) -> dict:
    """agent -> the policy its seat spec names (any seat kind: scripted, trained, zoo, or a model
    seat, which the arena plays step by step through the game's text protocol). Every spec is
    checked before any is loaded, so a mistake in the last costs no load of the first."""
    context = SeatContext()  # model seats: GenerateConfig's defaults under each seat's own options
    for spec in dict.fromkeys(seats.values()):
        check_seat(spec, env, context)
    return {agent: resolve_seat(spec, env, context) for agent, spec in seats.items()}


def _check_rollout_fits(arena: Arena, args, compiled: bool) -> None:
    """Refuses, before any episode is played, ``--episodes`` this machine cannot hold: played as
    one compiled program, every episode's steps are kept until its metrics are taken; played
    step by step, each episode's metrics (:mod:`dilemmax.envs.memory`)."""
    if compiled and arena.jittable:
        check_episodes_fit(arena.env, args.episodes, "rollout", "--episodes", arena.seats)
        return
    per_episode = episode_bytes(arena.env)[1] + PYTHON_RECORD_BYTES
    check_fits(
        args.episodes * per_episode,
        f"rollout ({args.episodes} episodes' metrics x {human_size(per_episode)})",
        "--episodes",
        host_memory(),
    )


def _cmd_rollout(args) -> int:
    env = build_env(args.env, args.set)
    if args.gif and "rgb_array" not in env.render_modes:
        raise UsageError(
            f"--gif: {args.env} has no frames to draw (render modes {env.render_modes})"
        )
    seats = {agent: args.policy for agent in env.agents}
    seats.update(
        parse_assignments(args.seat, "--seat", dict.fromkeys(env.agents, OptionSpec("str")))
    )
    policies = _rollout_policies(env, seats)
    # Every file the rollout writes is checked now, not after the episodes are played; none
    # goes among another command's run files.
    for option in ("out", "gif", "json"):
        if getattr(args, option):
            output_file(getattr(args, option), f"--{option}")
            refuse_run_file(getattr(args, option), "rollout", f"--{option}")
    arena = Arena(env, policies)
    long_episodes = env.max_steps >= PROGRESS_MIN_STEPS and not args.no_progress
    _check_rollout_fits(arena, args, compiled=not (long_episodes or args.out or args.gif))
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
        with writing(args.gif, "--gif"):
            gif = save_gif(result.frames, args.gif, fps=args.fps, scale=args.gif_scale)
        print(f"  gif: {gif}")
    if args.out:
        print(f"  transcript: {args.out}")
    if args.json:
        with writing(args.json, "--json"):
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
    with tqdm(total=total_steps, unit="step", desc="rollout", dynamic_ncols=True) as bar:
        arena.on_step = lambda: bar.update(1)
        try:
            yield
        finally:
            arena.on_step = None


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # its parent package is absent
        return False


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; given ``command`` (the first word of a command line), the
    parser of that one: the modules of the others are not imported and their commands appear
    only as their help line (a word that names no module's command imports none)."""
    parser = argparse.ArgumentParser(
        prog="dilemmax", description="Multi-agent social dilemmas in JAX."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="registered environments")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("rollout", help="play episodes with scripted, trained, zoo or model seats")
    p.add_argument("env", help="environment id (see `dilemmax list`)")
    p.add_argument("--policy", default="random",
                   help="seat spec of every seat: <kind>:<target> or a scripted name "
                   "(default: random)")  # fmt: skip
    p.add_argument("--seat", action="append", help="agent=<seat spec> for one seat (repeatable)")
    p.add_argument("--episodes", type=positive_int, default=10, help="episodes (>= 1)")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--set", action="append", help="env option key=value (repeatable)")
    p.add_argument("--out", help="write every step to this JSONL transcript")
    p.add_argument("--gif", help="write the first episode as an animated GIF (grid games)")
    p.add_argument(
        "--gif-scale",
        type=int_in(1, MAX_GIF_SCALE),
        default=3,
        help=f"pixel enlargement of GIF frames (1..{MAX_GIF_SCALE})",
    )
    p.add_argument(
        "--fps",
        type=int_in(1, MAX_GIF_FPS),
        default=8,
        help=f"GIF frames per second (1..{MAX_GIF_FPS})",
    )
    p.add_argument("--json", help="write the metric summary to this JSON file")
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar: long episodes (the grid games) then play as one compiled program "
        "instead of step by step",
    )
    p.set_defaults(func=_cmd_rollout)

    wanted = None if command is None else COMMANDS.get(command, ("",))[0]
    added = set()
    for name, (module, help_line) in COMMANDS.items():
        if module in added or not _module_exists(module):
            continue
        if wanted is None or module == wanted:
            importlib.import_module(module).add_commands(sub)
            added.add(module)
        else:
            sub.add_parser(name, help=help_line)
    return parser


def scenarios_alias(argv: list[str]) -> list[str]:
    """``evaluate RUN --scenarios train|test [...]`` as ``scenarios evaluate --run RUN
    --scenario-set ... --game <the run's game>``: a trained run scored on a scenario set
    (dilemmax.scenarios); any other command line is returned as it is."""
    if not argv or argv[0] != "evaluate" or not any(a.split("=")[0] == "--scenarios" for a in argv):
        return argv
    rest, which, path = [], None, None
    args = iter(argv[1:])
    for arg in args:
        name, eq, value = arg.partition("=")
        if name == "--scenarios":
            which = value if eq else next(args, "")
            if which not in SCENARIO_SETS:  # evaluate's own parser names the value it expects
                return argv
        elif name == "--split":  # the scenario set fixes the split
            raise UsageError("evaluate --scenarios: the scenario set fixes the split; drop --split")
        elif path is None and not arg.startswith("-"):
            path = arg
        else:
            rest.append(arg)
    if path is None:
        raise UsageError("evaluate --scenarios: give the run folder to score")
    return [
        "scenarios",
        "evaluate",
        "--run",
        path,
        "--scenario-set",
        which,
        "--game",
        _run_game(path),
        *rest,
    ]


def _run_game(path: str) -> str:
    """The game a run folder (or one of its checkpoints) trained on, from its config.json."""
    run = Path(path)
    run = run if run.is_dir() else run.parent.parent  # <run>/checkpoints/<checkpoint>
    try:
        config = json.loads((run / "config.json").read_text())
        env = config["env"]
        return str(config["env_kwargs"]["game"] if env == "scenarios" else env)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        raise UsageError(
            f"evaluate --scenarios: {path} holds no readable run config.json"
        ) from None


def main(argv: list[str] | None = None) -> int:
    """Runs one command and returns its exit status. A user mistake (:class:`UsageError`)
    prints one line and returns 2, a Ctrl-C one line and 130. Without ``argv`` this is the
    ``dilemmax`` process itself (the console script, ``python -m dilemmax``): it reads
    ``sys.argv`` and ends the process (:func:`~dilemmax.commandline.end_process`)."""
    if argv is None:
        end_process(_run(sys.argv[1:]))
    return _run(list(argv))


def _run(argv: list[str]) -> int:
    try:
        argv = scenarios_alias(argv)
    except UsageError as error:
        print(f"dilemmax: error: {error}", file=sys.stderr)
        return 2
    try:  # a Ctrl-C while the command's modules load is an interrupt like any other
        args = build_parser(argv[0] if argv else "").parse_args(argv)
    except KeyboardInterrupt:
        return interrupted(argv[0] if argv else None)
    return run_parsed(args)


if __name__ == "__main__":
    sys.exit(main())
