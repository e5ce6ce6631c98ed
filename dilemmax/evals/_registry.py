"""dilemmax's Inspect tasks, registered through the package's ``inspect_ai`` entry point.

    inspect eval dilemmax/moral_hazard --model openai/gpt-4o-mini -T episodes=20
    inspect eval dilemmax/moral_hazard_isolation --model anthropic/claude-sonnet-4-0 \\
        -T replicates=1 -T episodes=2
    inspect eval dilemmax/open_cleanup --model vllm/Qwen/Qwen3-8B -T max_steps=20 \\
        --model-role seat_1=openai/gpt-4o-mini
    LOCAL_API_KEY=x inspect eval dilemmax/consequence --model openai-api/local/my-model \\
        --model-base-url http://127.0.0.1:8000/v1 -T episodes=4

One task per game (its default configuration, as ``dilemmax play <game>``), and one per paper
design (``dilemmax experiment <design>``, named with ``_`` for ``/``: ``moral_hazard_grid``,
``moral_hazard_isolation``, ``consequence_grid``, ``open_cleanup_homogeneous``, ...). A design's
``extra`` (the moral-hazard probes, asked outside the game) is not part of its task.

Parameters every task takes: ``seed`` (the run seed), ``max_steps`` (stop each episode there),
``seats`` (``"agent_1=scripted:teacher"``: scripted or trained seats over the models),
``protocol`` (text-protocol options, ``"memory=none"``) and ``output_mode`` (``json_schema``,
``json_object`` or ``text``, as ``dilemmax play --output-mode``). A game task
also takes ``episodes``, ``options`` (env options, ``"num_agents=3"``), ``grid`` and ``rotate``
(every seating rotation: the roles move round the agents); a design
task takes its design's own parameters, the fields of its ``Design.params`` dataclass, which
also give ``dilemmax experiment <design>`` its options (``-T episodes=2 -T conditions=k=0.10``
is ``--episodes 2 --conditions k=0.10``).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from inspect_ai import Task, task
from inspect_ai._util.package import get_installed_package_name  # how Inspect names a task

from dilemmax.evals import plans
from dilemmax.evals.tasks import plan_task

# The design tasks the papers' results need (the registry holds every design's; the test checks
# these are among them).
REQUIRED = (
    "moral_hazard_grid",
    "moral_hazard_isolation",
    "consequence_grid",
    "open_cleanup_homogeneous",
    "open_harvest_homogeneous",
)


def _game_task(game: str) -> Callable[..., Task]:
    def game_task(
        episodes: int = 1,
        seed: int = 0,
        max_steps: int | None = None,
        options: str | dict | None = None,
        grid: bool = False,
        rotate: bool = False,
        seats: str | dict | None = None,
        protocol: str | dict | None = None,
        output_mode: str = "json_schema",
    ) -> Task:
        plan = plans.game_plan(game, episodes, options, grid, rotate)
        return plan_task(
            plan, game, seed, max_steps, plans.protocol_options(protocol), seats, output_mode,
            {"game": game, "episodes": episodes, "grid": grid, "rotate": rotate},
        )  # fmt: skip

    game_task.__doc__ = f"{game}: its default configuration, as `dilemmax play {game}`."
    return game_task


# The parameters every design task takes beside its design's own, with their defaults.
RUN_DEFAULTS = {"seed": 0, "max_steps": None, "seats": None, "protocol": None}


def _design_task(design_name: str, name: str) -> Callable[..., Task]:
    design = plans.designs()[design_name]

    def design_task(**params: Any) -> Task:
        given = {**RUN_DEFAULTS, "output_mode": "json_schema", **params}
        seats, output_mode = given.pop("seats"), given.pop("output_mode")
        plan, own, run = plans.design_plan(design, given)
        return plan_task(
            plan, name, run.seed, run.max_steps, dict(run.protocol), seats, output_mode,
            {"design": design.name, "section": design.section, "parameters": params},
        )  # fmt: skip

    # The task's -T parameters are the design's own fields (the same declaration as the
    # command line's options), after the ones every task takes.
    design_task.__signature__ = task_signature(design.params)
    design_task.__doc__ = f"{design_name}: the plan of `dilemmax experiment {design_name}`."
    return design_task


def task_signature(params: type) -> inspect.Signature:
    """The keyword parameters of a design's task: seed, max_steps, seats, protocol and
    output_mode, then every field of its ``params`` dataclass with its default."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    common = {**RUN_DEFAULTS, "output_mode": "json_schema"}
    parameters = [inspect.Parameter(n, keyword, default=d) for n, d in common.items()]
    parameters += [
        inspect.Parameter(f.name, keyword, default=f.default, annotation=f.type)
        for f in dataclasses.fields(params)
    ]
    return inspect.Signature(parameters, return_annotation=Task)


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
    for game in plans.games():
        made[game] = _registered(game, _game_task(game))
    for design_name in plans.designs():
        name = plans.task_name(design_name)
        made[name] = _registered(name, _design_task(design_name, name))
    return made


TASKS = _register()
