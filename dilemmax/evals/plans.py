"""The plans the Inspect tasks play: ``dilemmax play``'s parts and the papers' designs.

- A game task plays the parts ``dilemmax play <game> [--grid]`` plays: its parser reads the
  task's parameters (``episodes``, ``options`` as ``--set``, ``grid``), and its own part builder
  makes the parts, so an Inspect run and a play run of the same parameters play the same
  episodes.
- A design task plays ``design.plan(args)``, the plan ``dilemmax experiment <design>`` plays:
  the namespace is the design's own options (``add_arguments``) with the task's parameters
  given as its flags (``-T episodes=2 -T conditions=k=0.10`` is ``--episodes 2 --conditions
  k=0.10``), each checked by the design's parser.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from dilemmax.envs.moral_hazard import generator as moral_hazard_generator
from dilemmax.errors import UsageError
from dilemmax.experiments import consequence, moral_hazard, open_grid
from dilemmax.experiments.design import Design, Part, Plan
from dilemmax.llm import cli as play_cli
from dilemmax.llm.seats import add_model_arguments

GAMES = ("consequence", "moral_hazard", "open_cleanup", "open_harvest")


def designs() -> dict[str, Design]:
    """Every paper design, by name (``moral_hazard/isolation``)."""
    found = [*moral_hazard.DESIGNS, *consequence.DESIGNS, *open_grid.DESIGNS]
    return {d.name: d for d in found}


# --------------------------------------------------------------------------- parameters
def _assignments(value: str | Mapping[str, Any] | None, what: str) -> list[str]:
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


def game_plan(game: str, episodes: int = 1, options=None, grid: bool = False) -> Plan:
    """The parts of ``dilemmax play <game> --episodes <episodes> [--set ...] [--grid]``."""
    if game not in GAMES:
        raise UsageError(f"no game {game!r}; games: {GAMES}")
    words = ["play", game, "--episodes", str(int(episodes))]
    for entry in _assignments(options, "options"):
        words += ["--set", entry]
    if grid:
        words.append("--grid")
    try:
        args = _play_parser().parse_args(words)
    except argparse.ArgumentError as error:
        raise UsageError(f"{game}: {error}") from error
    # play's own part builder: the same envs, grids, names and episodes as `dilemmax play`.
    parts, _ = play_cli._parts(args)
    return Plan(parts, {"game": game, "grid": grid, "env_options": dict(args.set or [])})


# --------------------------------------------------------------------------- design plans
def design_args(design: Design, params: Mapping[str, Any]) -> argparse.Namespace:
    """The namespace ``design.plan`` reads: the design's options, set from ``params``."""
    parser = argparse.ArgumentParser(
        prog=f"dilemmax/{design.name}", add_help=False, exit_on_error=False
    )
    design.add_arguments(parser)
    _add_run_options(parser)
    return parse_parameters(parser, [], params)


def _add_run_options(parser: argparse.ArgumentParser) -> None:
    """The play options a design may read, where its own parser lacks them (defaults as in
    ``dilemmax play``; the model options are Inspect's here, so only their defaults matter)."""
    _add_model_defaults(parser)
    for flag, kwargs in (
        ("--episodes", {"type": int, "default": 1}),
        ("--seed", {"type": int, "default": 0}),
        ("--envs", {"type": int, "default": 16}),
        ("--max-steps", {"type": int, "default": None}),
        ("--set", {"action": "append"}),
        ("--protocol", {"action": "append"}),
        ("--seat", {"action": "append"}),
        ("--seats", {"default": None}),
        ("--out", {"default": None}),
    ):
        if flag not in parser._option_string_actions:
            parser.add_argument(flag, **kwargs)


def _add_model_defaults(parser: argparse.ArgumentParser) -> None:
    scratch = argparse.ArgumentParser(add_help=False)
    add_model_arguments(scratch)
    for action in scratch._actions:
        if action.option_strings and not any(
            s in parser._option_string_actions for s in action.option_strings
        ):
            parser._add_action(action)


def design_plan(design: Design, params: Mapping[str, Any]) -> tuple[Plan, argparse.Namespace]:
    """``design.plan`` of the namespace ``params`` give (see :func:`design_args`)."""
    args = design_args(design, params)
    return design.plan(args), args


# --------------------------------------------------------------------------- before a design
def isolation_plan(episodes: int = 1) -> Plan:
    """Incentive isolation on the env's own grid (:func:`incentive_grid`: every (k, alpha) cell,
    the model at agent_0, the scripted partner at agent_1), for when the moral-hazard package
    has no ``moral_hazard/isolation`` design."""
    env = game_plan("moral_hazard").parts[0].env
    cells = moral_hazard_generator.incentive_grid(num_agents=env.num_agents, focal=0)
    seats = {agent: "scripted:isolation_partner" for agent in env.agents[1:]}
    part = Part("isolation", env, cells.configs, list(cells.names), seats, episodes=int(episodes))
    return Plan([part], {"cells": list(cells.names)})
