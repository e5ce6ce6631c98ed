"""The registered scenarios: the train and test sets each game declares.

A game declares its sets in its own folder (its declaration's ``scenario_sets``, data only:
:class:`~dilemmax.envs.game_declaration.ScenarioSetDeclaration`); they are built here into
:class:`~dilemmax.scenarios.spec.ScenarioSet` s named ``<game>/train`` and ``<game>/test``, each
scenario ``<game>/<name>``, when this module is first imported (a plug-in game read later, by
``reload_plugins()``, has its sets once this module is imported after it).

The two sets of a game differ in both halves of what a focal agent meets: the background
populations are disjoint (no policy of a test scenario sits in a train scenario) and so are the
configurations (the grid games' held-out layouts and rules, the consequence game's held-out
rules, the moral-hazard game's held-out query cost). A focal population trained against
the train set is scored on the test set; one trained in self-play is scored on both.

Focal seats are fixed per set (seats ``0 .. focal - 1``; the background fills the seats after
them), so every scenario of a set runs in one program: the grid games seat three focal agents
beside two background residents (the focal agents are the majority, as in Melting Pot's
"resident" scenarios, and must sustain the commons with two strangers); the three-agent
consequence game seats one focal agent among two strangers; the moral-hazard game pairs one
focal agent with one partner.
"""

from __future__ import annotations

from typing import Annotated

from dilemmax.envs.game_declaration import ScenarioDeclaration, ScenarioSetDeclaration
from dilemmax.envs.option_declaration import Option
from dilemmax.envs.registry import declaration, env_spec, registered_envs
from dilemmax.scenarios.env import ScenarioEnv
from dilemmax.scenarios.spec import Scenario, ScenarioSet, by_name

# The game ``make("scenarios")`` builds the sets of when no game is named.
DEFAULT_GAME = "open_harvest"


def _scenario(game: str, declared: ScenarioSetDeclaration, one: ScenarioDeclaration) -> Scenario:
    first = declared.focal
    background = dict(zip(range(first, first + len(one.background)), one.background, strict=True))
    focal = tuple(range(first))
    return Scenario(
        f"{game}/{one.name}", game, dict(declared.options), focal, background, one.description
    )


def declared_sets() -> dict[str, ScenarioSet]:
    """Every registered game's scenario sets, by name (``<game>/train``, ``<game>/test``)."""
    out = {}
    for game in registered_envs():
        for which, declared in declaration(game).scenario_sets.items():
            scenarios = tuple(_scenario(game, declared, one) for one in declared.scenarios)
            out[f"{game}/{which}"] = ScenarioSet(f"{game}/{which}", scenarios)
    return out


SETS: dict[str, ScenarioSet] = declared_sets()
SCENARIOS: dict[str, Scenario] = by_name([s for ss in SETS.values() for s in ss.scenarios])
# The games that have scenario sets, sorted.
SET_GAMES = tuple(sorted({s.game for s in SETS.values()}))


def scenario_set(game: str, which: str) -> ScenarioSet:
    """The ``which`` ("train" or "test") set of ``game``."""
    name = f"{game}/{which}"
    if name not in SETS:
        raise KeyError(f"no scenario set {name!r}: games {list(SET_GAMES)}, sets train / test")
    return SETS[name]


# RegisteredScenarios' option of the same name hides the function inside its __init__.
_find_set = scenario_set


class RegisteredScenarios(ScenarioEnv):
    """A registered scenario set as an env id: ``make("scenarios", game=..., scenario_set=...)``
    (``scenario_set`` "train" or "test"; the option was called ``which`` before).

    So ``dilemmax train scenarios --set env_kwargs.game=<game>`` trains focal agents
    against the train set's backgrounds, and any code that takes an env id takes a scenario set.
    """

    renamed_options = {"which": "scenario_set"}

    @classmethod
    def version_of(cls, options) -> int:
        """The version of the game the set is built on (a run trained on it records that)."""
        return int(env_spec(options.get("game", DEFAULT_GAME)).load().version)

    def __init__(
        self,
        game: Annotated[
            str, Option("the game whose focal seats play", choices=SET_GAMES)
        ] = DEFAULT_GAME,
        scenario_set: Annotated[
            str,
            Option(
                "which of the game's scenario sets: the train set's backgrounds or the held-out "
                "test set's; the option was called ``which`` before",
                choices=("train", "test"),
            ),
        ] = "train",
    ):
        chosen = _find_set(game, scenario_set)
        built = chosen.build()
        super().__init__(built.game, built.focal, built.backgrounds, built.names)
        self.scenario_set = chosen

    @property
    def name(self) -> str:
        return f"scenarios:{self.scenario_set.name}"
