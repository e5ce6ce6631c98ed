"""Environment ids, their classes, and ``make``.

Entries name their class by import path so that ``registered_envs()`` and ``dilemmax list`` do
not import (and compile) every game.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass

import gymnasium

from dilemmax.envs.base import MultiAgentEnv


@dataclass(frozen=True)
class EnvSpec:
    env_id: str
    entry_point: str  # "package.module:ClassName"
    summary: str
    game: bool = True  # False for envs built on the games (the scenario sets), not games

    def load(self) -> type[MultiAgentEnv]:
        module_name, class_name = self.entry_point.split(":")
        return getattr(importlib.import_module(module_name), class_name)


_REGISTRY: dict[str, EnvSpec] = {}


def register(env_id: str, entry_point: str, summary: str, game: bool = True) -> None:
    if env_id in _REGISTRY:
        raise ValueError(f"environment id {env_id!r} is already registered")
    _REGISTRY[env_id] = EnvSpec(env_id, entry_point, summary, game)
    if game:
        _register_gymnasium_id(env_id)


def gymnasium_id(env_id: str) -> str:
    """The Gymnasium id of ``env_id``'s single-seat view."""
    return f"dilemmax/{env_id}-v0"


def _register_gymnasium_id(env_id: str) -> None:
    """``gymnasium.make("dilemmax/<env_id>-v0")``: the single-seat view, the other seats random.

    Entry points are import paths, so registering imports nothing from ``dilemmax.wrappers``.
    """
    gym_id = gymnasium_id(env_id)
    if gym_id in gymnasium.registry:
        return
    gymnasium.register(
        gym_id,
        entry_point="dilemmax.wrappers.gymnasium:SingleSeatEnv",
        vector_entry_point="dilemmax.wrappers.gymnasium:SingleSeatVectorEnv",
        kwargs={"env_id": env_id},
    )


def registered_envs(games_only: bool = True) -> list[str]:
    """The games ``make`` accepts, in registration order; with ``games_only=False`` also the
    envs built on them (``scenarios``: a game's focal seats against background populations)."""
    return [env_id for env_id, spec in _REGISTRY.items() if spec.game or not games_only]


def env_spec(env_id: str) -> EnvSpec:
    if env_id not in _REGISTRY:
        raise ValueError(f"unknown environment {env_id!r}; registered: {', '.join(_REGISTRY)}")
    return _REGISTRY[env_id]


def make(env_id: str, **kwargs) -> MultiAgentEnv:
    """Builds a registered environment; keyword arguments are its static options."""
    env_cls = env_spec(env_id).load()
    params = inspect.signature(env_cls.__init__).parameters
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    valid = sorted(name for name in params if name != "self")
    unknown = sorted(set(kwargs) - set(valid))
    if unknown and not accepts_any:
        raise TypeError(
            f"{env_id}: unknown option(s) {', '.join(unknown)}; valid options: {', '.join(valid)}"
        )
    return env_cls(**kwargs)


register(
    "consequence",
    "dilemmax.envs.consequence.env:ConsequenceEnv",
    "IABench-CA threshold game: a deployment rule decides who is eliminated when the fund is short",
)
register(
    "moral_hazard",
    "dilemmax.envs.moral_hazard.env:MoralHazardEnv",
    "Dialogue Moral Hazard Game: pay a private cost to reveal a hazard that protects a teammate",
)
register(
    "open_cleanup",
    "dilemmax.envs.open_cleanup.env:OpenCleanupEnv",
    "OpenSocialJax Clean Up: clean a polluted river with tools of hidden recipes so apples grow",
)
register(
    "open_harvest",
    "dilemmax.envs.open_harvest.env:OpenHarvestEnv",
    "OpenSocialJax Commons Harvest: apples regrow only near apples, under hidden pay rules",
)
# Not a game: the focal seats of one against a set of background populations. Its class lives
# in dilemmax.scenarios (named by path, so nothing here imports it); `make("scenarios",
# game="open_harvest", which="train")` builds a set for `dilemmax train` and JaxMARL loops.
register(
    "scenarios",
    "dilemmax.scenarios.registry:RegisteredScenarios",
    "a game's focal seats against the registered background populations (train / test sets)",
    game=False,
)
