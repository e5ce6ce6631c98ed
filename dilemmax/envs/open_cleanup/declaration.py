"""What dilemmax knows about OpenCleanup beyond its env class: registered through the
``dilemmax.games`` entry point ``open_cleanup`` (pyproject.toml). Imports none of the game's
code, so listing the games stays cheap."""

from __future__ import annotations

from dilemmax.envs.game_declaration import (
    GameDeclaration,
    ScenarioDeclaration,
    ScenarioSetDeclaration,
)

# Three focal agents beside two background residents (the focal agents are the majority, as in
# Melting Pot's "resident" scenarios); the test set plays the held-out layouts and recipes.
SCENARIO_SETS = {
    "train": ScenarioSetDeclaration(
        {"split": "train"},
        focal=3,
        scenarios=(
            ScenarioDeclaration(
                "greedy_residents",
                ("scripted:greedy",) * 2,
                "two residents who only harvest and never clean: the focal agents must clean "
                "for all",
            ),
        ),
    ),
    "test": ScenarioSetDeclaration(
        {"split": "held_out"},
        focal=3,
        scenarios=(
            ScenarioDeclaration(
                "cleaning_residents",
                ("scripted:informed_cleaner",) * 2,
                "two residents who know the recipes and clean: the focal agents must not "
                "free-ride so far that the orchard dies",
            ),
            ScenarioDeclaration(
                "random_residents",
                ("scripted:random",) * 2,
                "two residents who wander at random: nobody else cleans",
            ),
            ScenarioDeclaration(
                "ippo_residents",
                ("zoo:open_cleanup/ippo_s1",) * 2,
                "two residents trained by IPPO in self-play (the zoo's seed 1) on the train "
                "layouts",
            ),
        ),
    ),
}

GAME = GameDeclaration(
    env="dilemmax.envs.open_cleanup.env:OpenCleanupEnv",
    summary="OpenSocialJax Clean Up: clean a polluted river with tools of hidden recipes so "
    "apples grow",
    key_events=("cleared", "ate", "fired", "zapped", "pollution"),
    trial_figures=("cleaning_per_trial", "apples_per_trial", "recipes_known"),
    action_names="dilemmax.envs.open_cleanup.constants:ACTION_NAMES",
    grid_view="dilemmax.envs.open_cleanup.replay_view:GRID_VIEW",
    paper="OpenSocialJax: Evaluating Social Adaptation in Sequential Social Dilemmas with "
    "Open-Ended Environmental Dynamics",
    reproduces="Clean Up with procedurally generated layouts and hidden tool recipes",
    scenario_sets=SCENARIO_SETS,
)
