"""What a game declares about itself, in its own folder: :class:`GameDeclaration`.

dilemmax finds games through the entry-point group ``dilemmax.games``: each entry's name is the
env id and its value names a :class:`GameDeclaration` (``"package.module:ATTRIBUTE"``). Its own
four games are declared the same way, in dilemmax's ``pyproject.toml``, each by its folder's
``declaration.py``; a plug-in package declares its game in its own ``pyproject.toml``::

    [project.entry-points."dilemmax.games"]
    my_game = "my_package.declaration:GAME"

A declaration is read without importing the game's env (``dilemmax list`` and
``registered_envs()`` import no game's JAX code), so the module holding it imports only this
module, and whatever it names that needs the game's code (its env class, a grid view, a function
of action names, its scenario sets) it names by import path, loaded when used. Everything else
dilemmax knows about a game is on its env class (options, version, training defaults,
evaluation options, metric axes, scripted policies, text protocol).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

# "package.module:attribute"
_IMPORT_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


class DeclarationError(ValueError):
    """A declaration that is not what dilemmax can use; the message names the field."""


def load_path(path: str) -> Any:
    """The object an import path ``"package.module:attribute"`` names (imported now)."""
    module_name, _, attribute = path.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target


@dataclass(frozen=True)
class GameDeclaration:
    """One game as dilemmax knows it. Only ``env`` and ``summary`` are required.

    Attributes:
        env: the env class, ``"package.module:ClassName"`` (a :class:`MultiAgentEnv` subclass;
            imported only when the game is made).
        summary: one line on what the game is (``dilemmax list``, the docs page's subtitle).
        game: False for an env built on the games that is not a game itself (no docs page,
            Inspect task or Gymnasium id of its own).
        key_events: the infos ``dilemmax view`` plots per step (summed over agents); empty: every
            numeric per-step info.
        trial_figures: metrics declared per trial and agent (``[K, A]``) the replay page draws as
            trial-level figures.
        action_names: the actions' names in action order, or ``"module:attribute"`` naming such
            a sequence or a function ``num_actions -> names`` (for an action space that grows
            with an option). Empty: the page shows action numbers.
        grid_view: ``"module:attribute"`` naming the game's :class:`GridView` (a grid game: the
            replay page draws its frames); None: the page shows ``render(state, "ansi")`` and the
            state's fields.
        inspect_task: whether ``inspect eval dilemmax/<id>`` plays it (needs its text protocol).
        docs_page: whether the docs site has a page for it, generated from its class and module
            docstrings and its option declarations, listed under "Games" in the navigation.
        paper: the title of the paper the game reproduces ("" for none); ``reproduces``: what of
            the paper it reproduces. Both on the docs page.
        scenario_sets: the game's scenario sets for ``dilemmax scenarios`` and
            ``make("scenarios", game=<id>)``: ``"train"`` and ``"test"`` ->
            :class:`ScenarioSetDeclaration` (both or neither). Training defaults and the
            options an evaluation takes are on the env class (``training_defaults``,
            ``evaluation_options``).
    """

    env: str
    summary: str
    game: bool = True
    key_events: tuple[str, ...] = ()
    trial_figures: tuple[str, ...] = ()
    action_names: tuple[str, ...] | str = ()
    grid_view: str | None = None
    inspect_task: bool = True
    docs_page: bool = True
    paper: str = ""
    reproduces: str = ""
    scenario_sets: Mapping[str, ScenarioSetDeclaration] = field(default_factory=dict)

    def __post_init__(self):
        _check_path("env", self.env)
        if not isinstance(self.summary, str) or not self.summary.strip():
            raise DeclarationError("summary must be a non-empty line of text")
        for name in ("game", "inspect_task", "docs_page"):
            if not isinstance(getattr(self, name), bool):
                raise DeclarationError(f"{name} must be True or False")
        for name in ("key_events", "trial_figures"):
            _check_names(name, getattr(self, name))
        if isinstance(self.action_names, str):
            _check_path("action_names", self.action_names)
        else:
            _check_names("action_names", self.action_names)
        if self.grid_view is not None:
            _check_path("grid_view", self.grid_view)
        _check_scenario_sets(self.scenario_sets)
        if not isinstance(self.paper, str) or not isinstance(self.reproduces, str):
            raise DeclarationError("paper and reproduces must be text")

    @property
    def is_grid(self) -> bool:
        return self.grid_view is not None

    def load(self):
        """The env class (imports the game)."""
        return load_path(self.env)

    def action_names_for(self, num_actions: int) -> list[str]:
        """The names of actions ``0 .. num_actions - 1`` (numbers where none is declared)."""
        names: Any = self.action_names
        if isinstance(names, str):
            names = load_path(names)
            names = names(num_actions) if callable(names) else names
        names = list(names)
        return [names[a] if a < len(names) else str(a) for a in range(num_actions)]

    def load_grid_view(self) -> GridView:
        return load_path(self.grid_view)


def _check_path(name: str, value) -> None:
    if not isinstance(value, str) or not _IMPORT_PATH.fullmatch(value):
        raise DeclarationError(
            f"{name} must be an import path 'package.module:name', got {value!r}"
        )


def _check_scenario_sets(sets) -> None:
    if not isinstance(sets, Mapping) or (sets and set(sets) != {"train", "test"}):
        raise DeclarationError(f"scenario_sets must map 'train' and 'test' to sets, got {sets!r}")
    for which, declared in sets.items():
        if not isinstance(declared, ScenarioSetDeclaration):
            raise DeclarationError(f"scenario_sets[{which!r}] is not a ScenarioSetDeclaration")


def _check_names(name: str, value) -> None:
    if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
        raise DeclarationError(f"{name} must be a tuple of names, got {value!r}")


@dataclass(frozen=True)
class GridView:
    """How ``dilemmax view`` draws a grid game's frames from a replayed batch of states (the
    states of one episode stacked on a leading time axis ``T + 1``).

    Attributes:
        palette: ``() -> uint8[codes, 3]``, the colour of each cell code.
        codes: ``states -> int[T + 1, H, W]``, the cell codes of each state.
        agents: ``states -> (positions int[T + 1, A, 2], facings int[T + 1, A],
            frozen [T + 1, A])``.
        beams: ``(states, (H, W)) -> bool[T + 1, H, W]``, the cells the renderer tints in each
            state (the beams fired on the step before it).
    """

    palette: Callable[[], Any]
    codes: Callable[[Any], Any]
    agents: Callable[[Any], tuple[Any, Any, Any]]
    beams: Callable[[Any, tuple[int, int]], Any]


@dataclass(frozen=True)
class ScenarioDeclaration:
    """One focal-vs-background situation of a game, as data (``dilemmax.scenarios`` builds its
    :class:`~dilemmax.scenarios.spec.Scenario`, named ``<game>/<name>``).

    Attributes:
        name: the short name, unique in the game.
        background: a seat spec for each seat after the focal ones, in seat order
            (``scripted:<name>``, ``trained:<folder>``, ``zoo:<game>/<name>``).
        description: the social situation it tests, in a sentence.
    """

    name: str
    background: tuple[str, ...]
    description: str

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or "/" in self.name:
            raise DeclarationError(f"a scenario's name is a word without '/', got {self.name!r}")
        _check_names(f"scenario {self.name!r}: background", self.background)


@dataclass(frozen=True)
class ScenarioSetDeclaration:
    """A game's train or test set: scenarios with the same options and focal seats.

    Attributes:
        options: the game's constructor options (the held-out split of a test set).
        focal: the number of focal seats (seats ``0 .. focal - 1``).
        scenarios: the set's scenarios.
    """

    options: Mapping[str, Any]
    focal: int
    scenarios: tuple[ScenarioDeclaration, ...]

    def __post_init__(self):
        if not isinstance(self.options, Mapping):
            raise DeclarationError(f"a scenario set's options are a mapping, got {self.options!r}")
        if isinstance(self.focal, bool) or not isinstance(self.focal, int) or self.focal < 1:
            raise DeclarationError(f"a scenario set's focal is a count >= 1, got {self.focal!r}")
        if not self.scenarios or not all(
            isinstance(s, ScenarioDeclaration) for s in self.scenarios
        ):
            raise DeclarationError("a scenario set holds one or more ScenarioDeclarations")


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A package's module ``__getattr__`` that imports each exported name (name -> the
    submodule holding it) and each submodule on first use, so importing the package (to read
    its declaration module) imports none of its code."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        try:
            return importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{package}.{name}":
                raise
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    return __getattr__
