"""Environment ids, their declarations, and ``make``.

Games are found through the entry-point group ``dilemmax.games`` (name: the env id; value: the
game's :class:`~dilemmax.envs.game_declaration.GameDeclaration`), dilemmax's own four included,
so a game of another installed package is registered exactly as they are. The group is scanned
when this module is imported (names only: each game's Gymnasium id is registered then); the
declarations are loaded on the first question to the registry, and a game's env class only when
it is made, so ``registered_envs()`` and ``dilemmax list`` import (and compile) no game. A
plug-in whose declaration fails to load, or is invalid, is left out and named on one stderr line
(and by :func:`plugin_errors`, which ``dilemmax list`` shows); every other game keeps working.
:func:`reload_plugins` reads the group again (after a package was installed, or a folder with
its ``*.dist-info`` put on ``sys.path``). :func:`register` adds an env from Python.

Every game has a version (its class's ``version``, docs/versions.md): ``make("<game>-v0")``
asks for version 0, and the plain ``make("<game>")`` for the version this dilemmax has.
Only the current version of a game is kept, so a versioned id of another version is refused
with both versions named.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, distributions
from typing import Any

import gymnasium

from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.game_declaration import GameDeclaration
from dilemmax.envs.option_spec import OptionError
from dilemmax.errors import EnvVersionError, UsageError, deprecated

GROUP = "dilemmax.games"
_ENV_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class EnvSpec:
    env_id: str
    entry_point: str  # "package.module:ClassName"
    summary: str
    game: bool = True  # False for envs built on the games (the scenario sets), not games
    declaration: GameDeclaration | None = None  # None: one made of the fields above

    @property
    def declared(self) -> GameDeclaration:
        """Everything the game declares (its docs page, viewer, Inspect task, scenarios...)."""
        if self.declaration is not None:
            return self.declaration
        return GameDeclaration(self.entry_point, self.summary, game=self.game)

    def load(self) -> type[MultiAgentEnv]:
        return self.declared.load()


# env id -> its spec: the entry points' games first (once loaded), then register()'s.
_REGISTRY: dict[str, EnvSpec] = {}
_ENTRY_POINTS: dict[str, EntryPoint] = {}  # the group as last scanned
_FROM_ENTRY_POINTS: set[str] = set()  # the ids in _REGISTRY that came from the group
_PLUGIN_ERRORS: dict[str, str] = {}  # entry-point name -> why it is left out (one line)
_CLASHES: dict[str, tuple[EntryPoint, str]] = {}  # an id declared again -> that entry, why
_loaded = False


def register(env_id: str, entry_point: str, summary: str, game: bool = True) -> None:
    """Registers ``env_id`` from Python (a game of a package needs no call: its entry point
    registers it). ``register_declared`` takes a whole :class:`GameDeclaration`."""
    register_declared(env_id, GameDeclaration(entry_point, summary, game=game))


def register_declared(env_id: str, declaration: GameDeclaration) -> None:
    if env_id in _REGISTRY or env_id in _ENTRY_POINTS:
        raise ValueError(f"environment id {env_id!r} is already registered")
    _REGISTRY[env_id] = _spec(env_id, declaration)
    if declaration.game:
        _register_gymnasium_id(env_id)


def _spec(env_id: str, declaration: GameDeclaration) -> EnvSpec:
    return EnvSpec(env_id, declaration.env, declaration.summary, declaration.game, declaration)


def _scan_entry_points() -> None:
    """The group's names and values (no plug-in code runs), each name's Gymnasium id with it;
    dilemmax's own games first, then the other packages' in path order.

    Every copy of a distribution's metadata is read, not only the first on the path
    (``entry_points()`` keeps the first), so a stale ``*.egg-info`` of a source checkout in the
    working directory cannot hide the games its installed metadata declares. An id a second
    package declares again is left out of that package (the first keeps it)."""
    _ENTRY_POINTS.clear()
    _CLASHES.clear()
    found = [(_owner(dist), entry) for dist in distributions() for entry in dist.entry_points]
    found = [(owner, entry) for owner, entry in found if entry.group == GROUP]
    found.sort(key=lambda pair: pair[0] != "dilemmax")  # stable: path order otherwise
    owners: dict[str, str] = {}
    for owner, entry in found:
        first = owners.setdefault(entry.name, owner)
        if first != owner:
            _CLASHES[entry.name] = (entry, f"{first} declares {entry.name!r} already")
            continue
        _ENTRY_POINTS.setdefault(entry.name, entry)
        if _ENV_ID.fullmatch(entry.name):
            _register_gymnasium_id(entry.name)


def _owner(dist) -> str:
    return (dist.metadata["Name"] or "").lower().replace("-", "_")


def _specs() -> dict[str, EnvSpec]:
    """The registry, the group's declarations loaded on the first call."""
    global _loaded
    if not _loaded:
        _loaded = True
        _load_entry_points()
    return _REGISTRY


def _load_entry_points() -> None:
    added = dict(_REGISTRY)  # register()'s, kept after the group's
    _REGISTRY.clear()
    for name, entry in _ENTRY_POINTS.items():
        try:
            declaration = _declaration(name, entry, added)
        except Exception as error:  # any failure of someone else's package: named, left out
            _left_out(name, entry, error)
            continue
        _REGISTRY[name] = _spec(name, declaration)
        _FROM_ENTRY_POINTS.add(name)
    for name, (entry, reason) in _CLASHES.items():
        _left_out(name, entry, ValueError(reason))
    _REGISTRY.update(added)


def _declaration(name: str, entry: EntryPoint, added: Mapping[str, EnvSpec]) -> GameDeclaration:
    if not _ENV_ID.fullmatch(name):
        raise ValueError("an env id is letters, digits and underscores")
    if name in added:
        raise ValueError("the id is already registered from Python")
    declaration = entry.load()
    if not isinstance(declaration, GameDeclaration):
        raise TypeError(f"{entry.value} is a {type(declaration).__name__}, not a GameDeclaration")
    return declaration


def _left_out(name: str, entry: EntryPoint, error: Exception) -> None:
    reason = (str(error).strip().splitlines() or [""])[0]
    where = f"{entry.value}" + (f" of {entry.dist.name}" if entry.dist else "")
    line = f"game {name!r} ({where}) is left out: {type(error).__name__}: {reason}"
    _PLUGIN_ERRORS[name] = line
    print(f"dilemmax: plug-in {line}", file=sys.stderr)


def plugin_errors() -> dict[str, str]:
    """Entry-point name -> the one line saying why that plug-in game is left out."""
    _specs()
    return dict(_PLUGIN_ERRORS)


def reload_plugins() -> None:
    """Reads the ``dilemmax.games`` entry points again: a package installed since, or a folder
    holding a package and its ``<name>.dist-info`` (METADATA, entry_points.txt) put on
    ``sys.path``, is found as at start-up. Envs registered from Python stay."""
    global _loaded
    for env_id in _FROM_ENTRY_POINTS:
        _REGISTRY.pop(env_id, None)
    _FROM_ENTRY_POINTS.clear()
    _PLUGIN_ERRORS.clear()
    _scan_entry_points()
    _loaded = False


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
    return [env_id for env_id, spec in _specs().items() if spec.game or not games_only]


def declaration(env_id: str) -> GameDeclaration:
    """What the game ``env_id`` (plain or versioned) declares about itself."""
    return env_spec(env_id).declared


_VERSIONED_ID = re.compile(r"(?P<name>.+)-v(?P<version>[0-9]+)")


def split_version(env_id: str) -> tuple[str, int | None]:
    """``"moral_hazard-v0"`` -> ``("moral_hazard", 0)``; a plain id -> ``(id, None)``."""
    match = _VERSIONED_ID.fullmatch(env_id)
    if match is None or match["name"] not in _specs():
        return env_id, None
    return match["name"], int(match["version"])


def registered_name(env_cls: type) -> str:
    """The id ``env_cls`` is registered under (its class name when it is not registered), read
    from the registry's entry points without importing any game."""
    entry_point = f"{env_cls.__module__}:{env_cls.__qualname__}"
    for spec in _specs().values():
        if spec.entry_point == entry_point:
            return spec.env_id
    return env_cls.__name__


def env_spec(env_id: str) -> EnvSpec:
    """The registry entry of ``env_id`` (plain or versioned; a version other than the game's
    current one is an :class:`EnvVersionError`)."""
    name, version = split_version(env_id)
    if name not in _specs():
        if name in _PLUGIN_ERRORS:
            raise UsageError(f"plug-in {_PLUGIN_ERRORS[name]}")
        raise ValueError(f"unknown environment {env_id!r}; registered: {', '.join(_specs())}")
    current = None if version is None else env_version(name)
    if version is not None and version != current:
        raise EnvVersionError(
            f"{env_id}: this dilemmax has {name}-v{current} only; older versions of a game are "
            f"not kept (docs/versions.md): use {name}-v{current} or {name}, or install the "
            f"dilemmax release that has {env_id}"
        )
    return _specs()[name]


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
    for env_id, spec in _specs().items():
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
    if game not in _specs():
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


def options_key(options: Mapping[str, Any]) -> tuple:
    """A hashable form of a set of options (an env's, a text protocol's)."""
    return tuple(sorted((str(k), repr(v)) for k, v in options.items()))


def build_key(env: MultiAgentEnv) -> Hashable:
    """What decides how ``env`` plays, for caching what is compiled for it: the class and the
    options :func:`make` built it with, so two envs made alike share their compiled programs
    (each session of a notebook or sweep builds its env afresh). An env made otherwise or
    wrapped is only ever like itself: its own ``made_as`` is read, not one a wrapper forwards
    from the env inside it, since a wrapper may change how the game plays. So is an env given
    an option that is not plain data (an array, whose text elides its middle; an object), since
    two such values could read alike."""
    made = getattr(env, "__dict__", {}).get("made_as")
    if made is None or not all(map(_plain, made["options"].values())):
        return ("instance", id(env))
    return (type(env), made["env"], options_key(made["options"]))


def _plain(value: Any) -> bool:
    """Whether ``value``'s text names it exactly: None, a bool, number or string, or a list or
    tuple of such values."""
    if isinstance(value, list | tuple):
        return all(map(_plain, value))
    return value is None or isinstance(value, bool | int | float | str)


_scan_entry_points()
# Not a game: the focal seats of one against a set of background populations (the sets each
# game declares). Its class lives in dilemmax.scenarios, named by path so that nothing here
# imports it; `make("scenarios", game=<game>, scenario_set="train")` builds a set for
# `dilemmax train` and JaxMARL loops.
register(
    "scenarios",
    "dilemmax.scenarios.registry:RegisteredScenarios",
    "a game's focal seats against the registered background populations (train / test sets)",
    game=False,
)
