"""What dilemmax knows about the consequence game beyond its env class: registered through the
``dilemmax.games`` entry point ``consequence`` (pyproject.toml). Imports none of the game's
code, so listing the games stays cheap."""

from __future__ import annotations

from dilemmax.envs.game_declaration import (
    GameDeclaration,
    ScenarioDeclaration,
    ScenarioSetDeclaration,
)

# One focal agent among two strangers; the test set's rules are ones the train set never plays.
SCENARIO_SETS = {
    "train": ScenarioSetDeclaration(
        {"rules": ("AON", "RE", "DV")},
        focal=1,
        scenarios=(
            ScenarioDeclaration(
                "fair_strangers",
                ("scripted:fair_share",) * 2,
                "two strangers who pay their proportional share of the threshold",
            ),
            ScenarioDeclaration(
                "free_riders",
                ("scripted:all_zero",) * 2,
                "two strangers who never contribute: the focal agent alone stands between the "
                "group and the rule",
            ),
        ),
    ),
    "test": ScenarioSetDeclaration(
        {"rules": ("RP", "PP")},
        focal=1,
        scenarios=(
            ScenarioDeclaration(
                "rp_exploiters",
                ("scripted:starve_then_cover",) * 2,
                "two strangers who starve the first round so the rule removes someone, then "
                "cover the threshold (the paper's exploitation under RP)",
            ),
            ScenarioDeclaration(
                "trembling_cooperators",
                ("scripted:cooperative_tremble",) * 2,
                "two strangers who cover the threshold richest-first with a trembling hand",
            ),
            ScenarioDeclaration(
                "ippo_strangers",
                ("zoo:consequence/ippo_s1",) * 2,
                "two strangers trained by IPPO in self-play (the zoo's seed 1), under rules they "
                "never trained on",
            ),
        ),
    ),
}

GAME = GameDeclaration(
    env="dilemmax.envs.consequence.env:ConsequenceEnv",
    summary="IABench-CA threshold game: a deployment rule decides who is eliminated when the "
    "fund is short",
    key_events=("contributions", "eliminated", "fund", "rule_elimination"),
    paper="Institutional red-teaming (IABench-CA, consequence allocation)",
    reproduces="the threshold game of Section 3, its 228 contexts x 5 deployment rules and the "
    "cooperative-refinement reference of Appendix 11",
    scenario_sets=SCENARIO_SETS,
)
