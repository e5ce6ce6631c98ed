"""The plans the Inspect tasks play: ``dilemmax play``'s parts and the papers' designs.

- A game task plays the parts ``dilemmax play <game> [--grid] [--rotate]`` plays: play's parser
  reads the task's parameters (``episodes``, ``options`` as ``--set``, ``grid``, ``rotate``) and
  play's own part builder makes the parts, so an Inspect run and a play run of the same
  parameters play the same episodes.
- A design task plays ``design.plan(args)``, the plan ``dilemmax experiment <design>`` plays:
  the namespace is the design's own options (``add_arguments``) with the task's parameters
  given as its flags (``-T episodes=2 -T conditions=k=0.10`` is ``--episodes 2 --conditions
  k=0.10``), each checked by the design's parser.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from dilemmax.errors import UsageError
from dilemmax.experiments import registry, runner
from dilemmax.experiments.design import Design, Plan
from dilemmax.experiments.runner import add_play_arguments
from dilemmax.llm import cli as play_cli

GAMES = ("consequence", "moral_hazard", "open_cleanup", "open_harvest")


def task_name(design_name: str) -> str:
    """``moral_hazard/isolation`` -> ``moral_hazard_isolation`` (Inspect's ``/`` is the package)."""
    return design_name.replace("/", "_")


def designs() -> dict[str, Design]:
    """Every paper design, by name (``moral_hazard/isolation``), as ``dilemmax experiment``
    lists them."""
    return registry.designs()


# --------------------------------------------------------------------------- parameters
def assignments(value: str | Mapping[str, Any] | None, what: str) -> list[str]:
    """``"a=1 b=2"`` (spaces or semicolons between entries) or {a: 1, b: 2} -> ["a=1", "b=2"]."""
    if value is None or value == "":
        return []
    if isinstance(value, Mapping):
        return [f"{k}={v}" for k, v in value.items()]
    entries = str(value).replace(";", " ").split()
    for entry in entries:
        if "=" not in entry:
            raise UsageError(f"{what}: expected key=value, got {entry!r}")
    return entries


def _flag_values(action: argparse.Action, flag: str, value: Any) -> list[str]:
    """The command-line words that give ``action`` the task parameter ``value``."""
    if action.nargs == 0:  # a switch: on for a true value
        return [flag] if value is True or str(value).lower() in ("true", "1", "yes") else []
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if isinstance(action, argparse._AppendAction):
        return [word for v in values for word in (flag, str(v))]
    if action.nargs in ("+", "*") or isinstance(action.nargs, int):
        return [flag, *map(str, values)]
    return [flag, ",".join(map(str, values))]


def parse_parameters(parser: argparse.ArgumentParser, words: list[str], params: Mapping) -> Any:
    """``parser`` on ``words`` plus the task parameters as flags; a parameter the parser does not
    know, or a value it refuses, is a one-line UsageError naming it."""
    argv = list(words)
    for name, value in params.items():
        if value is None:  # left at the parser's default
            continue
        flag = "--" + str(name).replace("_", "-")
        action = parser._option_string_actions.get(flag)  # argparse keeps no public lookup
        if action is None:
            known = sorted(a.dest for a in parser._actions if a.option_strings and a.dest != "help")
            raise UsageError(f"{parser.prog}: no parameter {name!r}; parameters: {known}")
        argv += _flag_values(action, flag, value)
    try:
        return parser.parse_args(argv)
    except argparse.ArgumentError as error:
        raise UsageError(f"{parser.prog}: {error}") from error
    except SystemExit as error:  # argparse's other refusals (it has printed the reason)
        raise UsageError(f"{parser.prog}: bad parameters {argv}") from error


# --------------------------------------------------------------------------- game plans
def _play_parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="dilemmax", exit_on_error=False)
    play_cli.add_commands(top.add_subparsers(dest="command"))
    return top


def game_plan(
    game: str, episodes: int = 1, options=None, grid: bool = False, rotate: bool = False
) -> Plan:
    """The parts of ``dilemmax play <game> --episodes <episodes> [--set ...] [--grid]
    [--rotate]``."""
    if game not in GAMES:
        raise UsageError(f"no game {game!r}; games: {GAMES}")
    words = ["play", game, "--episodes", str(int(episodes))]
    for entry in assignments(options, "options"):
        words += ["--set", entry]
    words += ["--grid"] * bool(grid) + ["--rotate"] * bool(rotate)
    try:
        args = _play_parser().parse_args(words)
    except argparse.ArgumentError as error:
        raise UsageError(f"{game}: {error}") from error
    # play's own part builder: the same envs, grids, names and episodes as `dilemmax play`.
    parts, _ = play_cli._parts(args)
    return Plan(parts, {"game": game, "grid": grid, "env_options": dict(args.set or [])})


# --------------------------------------------------------------------------- design plans
# Play options a design task takes from its parameters: the rest (seats, model, sampling,
# transport, output) are Inspect's to set (--model, --model-role, --temperature, --log-dir).
RUN_PARAMETERS = ("seed", "max_steps", "protocol")


def design_args(design: Design, params: Mapping[str, Any]) -> argparse.Namespace:
    """The namespace ``design.plan`` reads: ``dilemmax experiment <design>``'s parser (the play
    options, then the design's own), set from ``params`` (the design's own options and
    :data:`RUN_PARAMETERS`)."""
    prog = f"dilemmax/{task_name(design.name)}"
    own = argparse.ArgumentParser(add_help=False)
    design.add_arguments(own)
    allowed = {*RUN_PARAMETERS, *(a.dest for a in own._actions if a.option_strings)}
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise UsageError(f"{prog}: no parameter {unknown[0]!r}; parameters: {sorted(allowed)}")
    parser = argparse.ArgumentParser(prog=prog, add_help=False, exit_on_error=False)
    add_play_arguments(parser)
    design.add_arguments(parser)
    return parse_parameters(parser, [], params)


def design_plan(design: Design, params: Mapping[str, Any]) -> tuple[Plan, argparse.Namespace]:
    """``design.plan`` of the namespace ``params`` give (see :func:`design_args`)."""
    args = design_args(design, params)
    try:
        return runner.plan_of(design, args), args
    except ValueError as error:  # a plan the design's checks refuse (parts named twice)
        raise UsageError(str(error)) from error
