"""The registered scenarios: a train set and a test set per game.

The two sets of a game differ in both halves of what a focal agent meets: the background
populations are disjoint (no policy of a test scenario sits in a train scenario) and so are the
configurations (the grid games' held-out layouts and rules, the consequence game's held-out
rules, the moral-hazard game's held-out query cost). A focal population trained against
the train set is scored on the test set; one trained in self-play is scored on both.

Focal seats are fixed per game, so every scenario of a set runs in one program: the grid games
seat three focal agents beside two background residents (the focal agents are the majority, as
in Melting Pot's "resident" scenarios, and must sustain the commons with two strangers); the
three-agent consequence game seats one focal agent among two strangers; the moral-hazard game
pairs one focal agent with one partner.
"""

from __future__ import annotations

from typing import Annotated

from dilemmax.envs.option_declaration import Option
from dilemmax.envs.registry import env_spec
from dilemmax.scenarios.env import ScenarioEnv
from dilemmax.scenarios.spec import Scenario, ScenarioSet, by_name

GRID_FOCAL = (0, 1, 2)  # of five seats; seats 3 and 4 are the background
SOLO_FOCAL = (0,)


def _grid(game: str, split: str, name: str, background: tuple[str, str], text: str) -> Scenario:
    return Scenario(
        f"{game}/{name}",
        game,
        {"split": split},
        GRID_FOCAL,
        dict(zip((3, 4), background, strict=True)),
        text,
    )


def _solo(game: str, options: dict, name: str, background: tuple[str, ...], text: str) -> Scenario:
    seats = dict(zip(range(1, len(background) + 1), background, strict=True))
    return Scenario(f"{game}/{name}", game, options, SOLO_FOCAL, seats, text)


HARVEST_TRAIN = (
    _grid(
        "open_harvest",
        "train",
        "sustainable_residents",
        ("scripted:sustainable",) * 2,
        "two residents who leave the last apples of a patch to regrow",
    ),
    _grid(
        "open_harvest",
        "train",
        "oracle_residents",
        ("scripted:oracle",) * 2,
        "two residents who know the pay table and pick only the best-paying stage",
    ),
)
HARVEST_TEST = (
    _grid(
        "open_harvest",
        "held_out",
        "greedy_residents",
        ("scripted:greedy",) * 2,
        "two greedy residents who eat every apple they see: can the focal agents keep the "
        "orchard alive anyway?",
    ),
    _grid(
        "open_harvest",
        "held_out",
        "random_residents",
        ("scripted:random",) * 2,
        "two residents who wander at random: the orchard is the focal agents' to keep",
    ),
    _grid(
        "open_harvest",
        "held_out",
        "ippo_residents",
        ("zoo:open_harvest/ippo_s1",) * 2,
        "two residents trained by IPPO in self-play (the zoo's seed 1) on the train layouts",
    ),
)
CLEANUP_TRAIN = (
    _grid(
        "open_cleanup",
        "train",
        "greedy_residents",
        ("scripted:greedy",) * 2,
        "two residents who only harvest and never clean: the focal agents must clean for all",
    ),
)
CLEANUP_TEST = (
    _grid(
        "open_cleanup",
        "held_out",
        "cleaning_residents",
        ("scripted:informed_cleaner",) * 2,
        "two residents who know the recipes and clean: the focal agents must not free-ride "
        "so far that the orchard dies",
    ),
    _grid(
        "open_cleanup",
        "held_out",
        "random_residents",
        ("scripted:random",) * 2,
        "two residents who wander at random: nobody else cleans",
    ),
    _grid(
        "open_cleanup",
        "held_out",
        "ippo_residents",
        ("zoo:open_cleanup/ippo_s1",) * 2,
        "two residents trained by IPPO in self-play (the zoo's seed 1) on the train layouts",
    ),
)
TRAIN_RULES = {"rules": ("AON", "RE", "DV")}
TEST_RULES = {"rules": ("RP", "PP")}
CONSEQUENCE_TRAIN = (
    _solo(
        "consequence",
        TRAIN_RULES,
        "fair_strangers",
        ("scripted:fair_share",) * 2,
        "two strangers who pay their proportional share of the threshold",
    ),
    _solo(
        "consequence",
        TRAIN_RULES,
        "free_riders",
        ("scripted:all_zero",) * 2,
        "two strangers who never contribute: the focal agent alone stands between the group "
        "and the rule",
    ),
)
CONSEQUENCE_TEST = (
    _solo(
        "consequence",
        TEST_RULES,
        "rp_exploiters",
        ("scripted:starve_then_cover",) * 2,
        "two strangers who starve the first round so the rule removes someone, then cover "
        "the threshold (the paper's exploitation under RP)",
    ),
    _solo(
        "consequence",
        TEST_RULES,
        "trembling_cooperators",
        ("scripted:cooperative_tremble",) * 2,
        "two strangers who cover the threshold richest-first with a trembling hand",
    ),
    _solo(
        "consequence",
        TEST_RULES,
        "ippo_strangers",
        ("zoo:consequence/ippo_s1",) * 2,
        "two strangers trained by IPPO in self-play (the zoo's seed 1), under rules they never "
        "trained on",
    ),
)
# Both under the uninformative mapping, where the public utilities do not give the case away
# (under the others an agent that never queries is never wrong, and every partner is alike).
MH_TRAIN = {"cost": 0.1, "mapping": "uninformative"}
MH_TEST = {"cost": 0.25, "mapping": "uninformative"}
MORAL_HAZARD_TRAIN = (
    _solo(
        "moral_hazard",
        MH_TRAIN,
        "cooperative_partner",
        ("scripted:teacher",),
        "a partner who queries, warns and reads the board",
    ),
    _solo(
        "moral_hazard",
        MH_TRAIN,
        "self_interested_partner",
        ("scripted:holmstrom",),
        "a partner who queries only when its private share pays for the cost",
    ),
)
MORAL_HAZARD_TEST = (
    _solo(
        "moral_hazard",
        MH_TEST,
        "never_queries",
        ("scripted:always_local",),
        "a partner who never queries: no warning will come for the focal agent's case",
    ),
    _solo(
        "moral_hazard",
        MH_TEST,
        "random_partner",
        ("scripted:random_control",),
        "a partner who plays the paper's random valid-action control",
    ),
    _solo(
        "moral_hazard",
        MH_TEST,
        "rl2_partner",
        ("zoo:moral_hazard/rl2_s1",),
        "a recurrent (RL^2) partner from the zoo, trained in self-play at another cost",
    ),
    _solo(
        "moral_hazard",
        MH_TEST,
        "pivotal_partner",
        ("scripted:isolation_partner",),
        "a partner who queries and warns the focal agent, but picks its own unsafe option "
        "unless the focal agent queries and warns it: the focal agent's help is pivotal",
    ),
)

SETS: dict[str, ScenarioSet] = {
    s.name: s
    for s in (
        ScenarioSet("open_harvest/train", HARVEST_TRAIN),
        ScenarioSet("open_harvest/test", HARVEST_TEST),
        ScenarioSet("open_cleanup/train", CLEANUP_TRAIN),
        ScenarioSet("open_cleanup/test", CLEANUP_TEST),
        ScenarioSet("consequence/train", CONSEQUENCE_TRAIN),
        ScenarioSet("consequence/test", CONSEQUENCE_TEST),
        ScenarioSet("moral_hazard/train", MORAL_HAZARD_TRAIN),
        ScenarioSet("moral_hazard/test", MORAL_HAZARD_TEST),
    )
}
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

    So ``dilemmax train scenarios --set env_kwargs.game=open_harvest`` trains focal agents
    against the train set's backgrounds, and any code that takes an env id takes a scenario set.
    """

    renamed_options = {"which": "scenario_set"}

    @classmethod
    def version_of(cls, options) -> int:
        """The version of the game the set is built on (a run trained on it records that)."""
        return int(env_spec(options.get("game", "open_harvest")).load().version)

    def __init__(
        self,
        game: Annotated[str, Option("the game whose focal seats play", choices=SET_GAMES)] = (
            "open_harvest"
        ),
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
