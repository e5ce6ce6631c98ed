"""dilemmax's Inspect tasks, registered through the package's ``inspect_ai`` entry point.

    inspect eval dilemmax/moral_hazard --model openai/gpt-4o-mini -T episodes=20
    inspect eval dilemmax/moral_hazard_isolation --model anthropic/claude-sonnet-4-0 \\
        -T episodes=2
    inspect eval dilemmax/open_cleanup --model mockllm/model -T max_steps=5 \\
        --model-role seat_1=openai/gpt-4o-mini

One task per game (its default configuration, as ``dilemmax play <game>``), and one per paper
design (``dilemmax experiment <design>``, named with ``_`` for ``/``). Until a design the papers
need has landed, its task plays the env's own grid: ``moral_hazard_grid`` and
``consequence_grid`` as ``dilemmax play --grid``, ``moral_hazard_isolation`` on
``incentive_grid`` with the scripted partner, the ``*_homogeneous`` tasks as the game task with
every seat the eval's model.

Parameters every task takes: ``seed`` (the run seed), ``max_steps`` (stop each episode there),
``seats`` (``"agent_1=scripted:teacher"``: scripted or trained seats over the models),
``protocol`` (text-protocol options, ``"memory=none"``) and ``structured_output``. A game task
also takes ``episodes``, ``options`` (env options, ``"num_agents=3"``) and ``grid``; a design
task takes its design's own options (``-T episodes=2 -T conditions=k=0.10``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from inspect_ai import Task, task
from inspect_ai._util.package import get_installed_package_name  # how Inspect names a task

from dilemmax.evals import plans
from dilemmax.evals.tasks import plan_task
from dilemmax.experiments.design import Plan

# Design tasks the papers need, by task name: the design to play, and the plan to play before
# it lands (parameters: episodes).
REQUIRED: dict[str, tuple[str, Callable[..., Plan]]] = {
    "moral_hazard_grid": (
        "moral_hazard/grid",
        lambda episodes=1: plans.game_plan("moral_hazard", episodes, grid=True),
    ),
    "moral_hazard_isolation": ("moral_hazard/isolation", plans.isolation_plan),
    "consequence_grid": (
        "consequence/grid",
        lambda episodes=1: plans.game_plan("consequence", episodes, grid=True),
    ),
    "open_cleanup_homogeneous": (
        "open_cleanup/homogeneous",
        lambda episodes=1: plans.game_plan("open_cleanup", episodes),
    ),
    "open_harvest_homogeneous": (
        "open_harvest/homogeneous",
        lambda episodes=1: plans.game_plan("open_harvest", episodes),
    ),
}


def task_name(design_name: str) -> str:
    """``moral_hazard/isolation`` -> ``moral_hazard_isolation`` (Inspect's ``/`` is the package)."""
    return design_name.replace("/", "_").replace("-", "_")


def _game_task(game: str) -> Callable[..., Task]:
    def game_task(
        episodes: int = 1,
        seed: int = 0,
        max_steps: int | None = None,
        options: str | dict | None = None,
        grid: bool = False,
        seats: str | dict | None = None,
        protocol: str | dict | None = None,
        structured_output: bool = True,
    ) -> Task:
        plan = plans.game_plan(game, episodes, options, grid)
        return plan_task(
            plan, game, seed, max_steps, _options(protocol), seats, structured_output,
            {"game": game, "episodes": episodes, "grid": grid},
        )  # fmt: skip

    game_task.__doc__ = f"{game}: its default configuration, as `dilemmax play {game}`."
    return game_task


def _design_task(design_name: str, name: str) -> Callable[..., Task]:
    def design_task(
        seed: int = 0,
        max_steps: int | None = None,
        seats: str | dict | None = None,
        protocol: str | dict | None = None,
        structured_output: bool = True,
        **params: Any,
    ) -> Task:
        design = plans.designs()[design_name]
        plan, _ = plans.design_plan(design, {"seed": seed, **params})
        return plan_task(
            plan, name, seed, max_steps, _options(protocol), seats, structured_output,
            {"design": design.name, "section": design.section, "parameters": params},
        )  # fmt: skip

    design_task.__doc__ = f"{design_name}: the plan of `dilemmax experiment {design_name}`."
    return design_task


def _fallback_task(name: str, design_name: str, build: Callable[..., Plan]) -> Callable:
    def fallback_task(
        episodes: int = 1,
        seed: int = 0,
        max_steps: int | None = None,
        seats: str | dict | None = None,
        protocol: str | dict | None = None,
        structured_output: bool = True,
    ) -> Task:
        return plan_task(
            build(episodes=episodes), name, seed, max_steps, _options(protocol), seats,
            structured_output, {"design": design_name, "stand_in": True, "episodes": episodes},
        )  # fmt: skip

    fallback_task.__doc__ = f"{design_name} on the env's own grid (the design has not landed)."
    return fallback_task


def _options(value) -> dict[str, str]:
    """Protocol options from ``"a=1 b=2"`` or a mapping."""
    return dict(entry.split("=", 1) for entry in plans._assignments(value, "protocol"))


def _registered(name: str, function: Callable[..., Task]) -> Callable[..., Task]:
    """``function`` registered as the task ``dilemmax/<name>``. Inspect prefixes the package's
    name itself only when it finds dilemmax installed (a source checkout's ``*.egg-info`` on the
    path hides that), so the prefix is added here when Inspect would not add it."""
    function.__qualname__ = function.__name__ = name
    prefixed = get_installed_package_name(function) is not None
    return task(name=name if prefixed else f"dilemmax/{name}")(function)


def _register() -> dict[str, Callable[..., Task]]:
    """Registers every task with Inspect; returns name -> task function."""
    made: dict[str, Callable[..., Task]] = {}
    for game in plans.GAMES:
        made[game] = _registered(game, _game_task(game))
    for design_name in plans.designs():
        name = task_name(design_name)
        made[name] = _registered(name, _design_task(design_name, name))
    for name, (design_name, build) in REQUIRED.items():
        if name not in made:
            made[name] = _registered(name, _fallback_task(name, design_name, build))
    return made


TASKS = _register()
