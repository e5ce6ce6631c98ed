"""What dilemmax knows about OpenHarvest beyond its env class: registered through the
``dilemmax.games`` entry point ``open_harvest`` (pyproject.toml). Imports none of the game's
code, so listing the games stays cheap."""

from __future__ import annotations

from dilemmax.envs.game_declaration import (
    GameDeclaration,
    ScenarioDeclaration,
    ScenarioSetDeclaration,
)

# Three focal agents beside two background residents (the focal agents are the majority, as in
# Melting Pot's "resident" scenarios); the test set plays the held-out layouts and rules.
SCENARIO_SETS = {
    "train": ScenarioSetDeclaration(
        {"split": "train"},
        focal=3,
        scenarios=(
            ScenarioDeclaration(
                "sustainable_residents",
                ("scripted:sustainable",) * 2,
                "two residents who leave the last apples of a patch to regrow",
            ),
            ScenarioDeclaration(
                "oracle_residents",
                ("scripted:oracle",) * 2,
                "two residents who know the pay table and pick only the best-paying stage",
            ),
        ),
    ),
    "test": ScenarioSetDeclaration(
        {"split": "held_out"},
        focal=3,
        scenarios=(
            ScenarioDeclaration(
                "greedy_residents",
                ("scripted:greedy",) * 2,
                "two greedy residents who eat every apple they see: can the focal agents keep "
                "the orchard alive anyway?",
            ),
            ScenarioDeclaration(
                "random_residents",
                ("scripted:random",) * 2,
                "two residents who wander at random: the orchard is the focal agents' to keep",
            ),
            ScenarioDeclaration(
                "ippo_residents",
                ("zoo:open_harvest/ippo_s1",) * 2,
                "two residents trained by IPPO in self-play (the zoo's seed 1) on the train "
                "layouts",
            ),
        ),
    ),
}

GAME = GameDeclaration(
    env="dilemmax.envs.open_harvest.env:OpenHarvestEnv",
    summary="OpenSocialJax Commons Harvest: apples regrow only near apples, under hidden pay rules",
    key_events=("ate", "zap_fired", "zapped", "num_apples"),
    trial_figures=("apples_per_trial", "return_per_trial", "payoffs_known_per_trial"),
    action_names="dilemmax.envs.open_harvest.constants:ACTION_NAMES",
    grid_view="dilemmax.envs.open_harvest.replay_view:GRID_VIEW",
    paper="OpenSocialJax: Evaluating Social Adaptation in Sequential Social Dilemmas with "
    "Open-Ended Environmental Dynamics",
    reproduces="Commons Harvest with procedurally generated layouts and hidden pay and regrowth "
    "rules",
    scenario_sets=SCENARIO_SETS,
)
