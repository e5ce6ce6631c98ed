"""Environment ids, their classes, and ``make``.

Entries name their class by import path so that ``registered_envs()`` and ``dilemmax list`` do
not import (and compile) every game.

Every game has a version (its class's ``version``, docs/versions.md): ``make("moral_hazard-v0")``
asks for version 0, and the plain ``make("moral_hazard")`` for the version this dilemmax has.
Only the current version of a game is kept, so a versioned id of another version is refused
with both versions named.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium

from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.option_spec import OptionError
from dilemmax.errors import EnvVersionError, deprecated


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
    """The Gymnasium id of ``env_id``'s single-seat view. Its ``-vN`` is the game's version,
    written out because registering must not import the game (tests/test_versions.py checks
    that the two agree)."""
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


_VERSIONED_ID = re.compile(r"(?P<name>.+)-v(?P<version>[0-9]+)")


def split_version(env_id: str) -> tuple[str, int | None]:
    """``"moral_hazard-v0"`` -> ``("moral_hazard", 0)``; a plain id -> ``(id, None)``."""
    match = _VERSIONED_ID.fullmatch(env_id)
    if match is None or match["name"] not in _REGISTRY:
        return env_id, None
    return match["name"], int(match["version"])


def registered_name(env_cls: type) -> str:
    """The id ``env_cls`` is registered under (its class name when it is not registered), read
    from the registry's entry points without importing any game."""
    entry_point = f"{env_cls.__module__}:{env_cls.__qualname__}"
    for spec in _REGISTRY.values():
        if spec.entry_point == entry_point:
            return spec.env_id
    return env_cls.__name__


def env_spec(env_id: str) -> EnvSpec:
    """The registry entry of ``env_id`` (plain or versioned; a version other than the game's
    current one is an :class:`EnvVersionError`)."""
    name, version = split_version(env_id)
    if name not in _REGISTRY:
        raise ValueError(f"unknown environment {env_id!r}; registered: {', '.join(_REGISTRY)}")
    current = None if version is None else env_version(name)
    if version is not None and version != current:
        raise EnvVersionError(
            f"{env_id}: this dilemmax has {name}-v{current} only; older versions of a game are "
            f"not kept (docs/versions.md): use {name}-v{current} or {name}, or install the "
            f"dilemmax release that has {env_id}"
        )
    return _REGISTRY[name]


def env_version(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> int:
    """The current version of the game ``env_id`` names. An env built on a game (the scenario
    sets) has that game's version: its class answers through ``version_of(env_kwargs)``."""
    name, _ = split_version(env_id)
    env_cls = env_spec(name).load()  # the current version, whichever env_id names
    version_of = getattr(env_cls, "version_of", None)
    return int(version_of(env_kwargs or {}) if version_of else env_cls.version)


def versioned_id(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> str:
    """``"moral_hazard"`` -> ``"moral_hazard-v0"`` (the current version)."""
    name, _ = split_version(env_id)
    return f"{name}-v{env_version(name, env_kwargs)}"


def check_version(
    env_id: str, recorded: int, what: str, env_kwargs: Mapping[str, Any] | None = None
) -> None:
    """Refuses ``what`` (a run folder, a zoo entry, a transcript...) made under version
    ``recorded`` of ``env_id`` when the game is now at another version."""
    name, _ = split_version(env_id)
    current = env_version(name, env_kwargs)
    if int(recorded) != current:
        raise EnvVersionError(
            f"{what} was made under {name}-v{int(recorded)}, but this dilemmax has "
            f"{name}-v{current}; the game changed between them (docs/versions.md), so redo it "
            f"under {name}-v{current} or install the dilemmax release that has "
            f"{name}-v{int(recorded)}"
        )


def registered_id(env: MultiAgentEnv) -> str | None:
    """The registered id of ``env``'s class (None if unregistered). An env built on the games
    names its id itself (``registered_as``: every scenario env is ``scenarios``)."""
    base = getattr(env, "inner", env)
    if getattr(base, "registered_as", None):
        return base.registered_as
    for env_id, spec in _REGISTRY.items():
        if spec.load() is type(base):
            return env_id
    return None


def env_label(env: MultiAgentEnv) -> str:
    """``"moral_hazard-v0"``: the game ``env`` plays and its version (what a transcript records;
    a scenario env records the game its scenarios are built on)."""
    game = getattr(env, "inner", env)
    if isinstance(getattr(game, "game", None), MultiAgentEnv):
        game = game.game
    name = registered_id(game) or type(game).__name__
    return f"{name}-v{int(type(game).version)}"


def renamed_option(env_id: str, name: str) -> str:
    """The name an option of ``env_id`` has now (``name`` itself unless the game renamed it)."""
    game, _ = split_version(env_id)
    if game not in _REGISTRY:
        return name
    return getattr(env_spec(game).load(), "renamed_options", {}).get(name, name)


def current_option_names(env_id: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with every old option name the game renamed (its class's
    ``renamed_options``) spelled as today, and one deprecation line on stderr per old name, so a
    user's ``--set old=...`` and a run folder or transcript saved before the rename still work.
    An old and a new name for the same option together are refused (an OptionError)."""
    out: dict[str, Any] = {}
    for name, value in options.items():
        new = renamed_option(env_id, name)
        if new != name:
            if new in options:
                raise OptionError(
                    f"{env_id}: {name!r} is the old name of {new!r}; give only {new!r}"
                )
            deprecated(f"{split_version(env_id)[0]} option {name!r} is now {new!r}")
        out[new] = value
    return out


def make(env_id: str, **kwargs) -> MultiAgentEnv:
    """Builds a registered environment; keyword arguments are its static options.

    ``env_id`` is a registered id, plain (``"moral_hazard"``: the current version) or versioned
    (``"moral_hazard-v0"``: refused unless that is the current version)."""
    env_cls = env_spec(env_id).load()
    kwargs = current_option_names(env_id, kwargs)
    params = inspect.signature(env_cls.__init__).parameters
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    valid = sorted(name for name in params if name != "self")
    unknown = sorted(set(kwargs) - set(valid))
    if unknown and not accepts_any:
        raise TypeError(
            f"{env_id}: unknown option(s) {', '.join(unknown)}; valid options: {', '.join(valid)}"
        )
    env = env_cls(**kwargs)
    # How it was made, so a record of its episodes (a rollout, a play transcript) names the env
    # a replay rebuilds (dilemmax.envs.replay).
    env.made_as = {"env": split_version(env_id)[0], "options": dict(kwargs)}
    return env


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
# game="open_harvest", scenario_set="train")` builds a set for `dilemmax train` and JaxMARL loops.
register(
    "scenarios",
    "dilemmax.scenarios.registry:RegisteredScenarios",
    "a game's focal seats against the registered background populations (train / test sets)",
    game=False,
)
