"""The plans the Inspect tasks play: ``dilemmax play``'s parts and the papers' designs.

- A game task plays the parts ``dilemmax play <game> [--grid] [--rotate]`` plays: the env made
  from the task's ``options`` (typed by the game's option declarations) and the play API's own
  grid parts, so an Inspect run and a play run of the same parameters play the same episodes.
- A design task plays ``design.plan(params, run)``, the plan ``dilemmax experiment <design>``
  plays: ``params`` are the design's own parameters (its ``Design.params`` dataclass, whose
  fields are also the task's ``-T`` parameters) and ``run`` the run options a task takes
  (:data:`RUN_PARAMETERS`). No command line is built on the way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dilemmax.commandline import parse_assignments, user_input
from dilemmax.envs.options import env_option_specs
from dilemmax.envs.registry import declaration, make, registered_envs
from dilemmax.errors import UsageError
from dilemmax.experiments import registry, runner
from dilemmax.experiments.design import Design, DesignParams, Plan, make_params, param_names
from dilemmax.llm import api as play_api
from dilemmax.llm.session import Part
from dilemmax.llm.session_options import SessionOptions


def games() -> list[str]:
    """The registered games that declare an Inspect task (``GameDeclaration.inspect_task``),
    a plug-in's included: each is the task ``dilemmax/<game>``."""
    return [game for game in registered_envs() if declaration(game).inspect_task]


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


def protocol_options(value: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """Text-protocol options from ``"a=1 b=2"`` or a mapping, typed as ``--protocol`` types
    them."""
    return parse_assignments(assignments(value, "protocol"), "protocol")


# --------------------------------------------------------------------------- game plans
def game_plan(
    game: str, episodes: int = 1, options=None, grid: bool = False, rotate: bool = False
) -> Plan:
    """The parts of ``dilemmax play <game> --episodes <episodes> [--set ...] [--grid]
    [--rotate]``."""
    if game not in games():
        raise UsageError(f"no game {game!r}; games: {', '.join(games())}")
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise UsageError(f"{game}: episodes must be a whole number >= 1, got {episodes!r}")
    given = parse_assignments(assignments(options, "options"), "options", env_option_specs(game))
    made = play_api.held_out_options(game, given)
    with user_input(game):
        env = make(game, **made)
    planned = play_api.grid_parts(game, env, made) if grid else [("main", env, None, None)]
    parts = [
        Part(name, part_env, configs, names, episodes=episodes, rotate=rotate)
        for name, part_env, configs, names in planned
    ]
    return Plan(parts, {"game": game, "grid": grid, "env_options": given})


# --------------------------------------------------------------------------- design plans
# Run options a design task takes from its parameters: the rest (seats, model, sampling,
# transport, output) are Inspect's to set (--model, --model-role, --temperature, --log-dir).
RUN_PARAMETERS = ("seed", "max_steps", "protocol")


def design_plan(
    design: Design, params: Mapping[str, Any]
) -> tuple[Plan, DesignParams, SessionOptions]:
    """``design.plan`` of the task parameters ``params``: the design's own (its
    ``Design.params`` fields) and :data:`RUN_PARAMETERS`; (the plan, the design's typed
    parameters, the run options). An unknown parameter or a value its field refuses is a
    one-line UsageError naming it."""
    where = f"dilemmax/{task_name(design.name)}"
    allowed = [*RUN_PARAMETERS, *param_names(design.params)]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise UsageError(f"{where}: no parameter {unknown[0]!r}; parameters: {sorted(allowed)}")
    given = {k: v for k, v in params.items() if k not in RUN_PARAMETERS}
    own = make_params(design.params, given, where)
    run = SessionOptions(
        seed=params.get("seed", 0),
        max_steps=params.get("max_steps"),
        protocol=protocol_options(params.get("protocol")),
    )
    try:
        return runner.plan_of(design, own, run), own, run
    except ValueError as error:  # a plan the design's checks refuse (parts named twice)
        raise UsageError(str(error)) from error
