"""What dilemmax knows about the moral-hazard game beyond its env class: registered through the
``dilemmax.games`` entry point ``moral_hazard`` (pyproject.toml). Imports none of the game's
code, so listing the games stays cheap."""

from __future__ import annotations

from dilemmax.envs.game_declaration import (
    GameDeclaration,
    ScenarioDeclaration,
    ScenarioSetDeclaration,
)

# One focal agent and one partner, both under the uninformative mapping, where the public
# utilities do not give the case away (under the others an agent that never queries is never
# wrong, and every partner is alike); the test set's query cost is one the train set never has.
SCENARIO_SETS = {
    "train": ScenarioSetDeclaration(
        {"cost": 0.1, "mapping": "uninformative"},
        focal=1,
        scenarios=(
            ScenarioDeclaration(
                "cooperative_partner",
                ("scripted:teacher",),
                "a partner who queries, warns and reads the board",
            ),
            ScenarioDeclaration(
                "self_interested_partner",
                ("scripted:holmstrom",),
                "a partner who queries only when its private share pays for the cost",
            ),
        ),
    ),
    "test": ScenarioSetDeclaration(
        {"cost": 0.25, "mapping": "uninformative"},
        focal=1,
        scenarios=(
            ScenarioDeclaration(
                "never_queries",
                ("scripted:always_local",),
                "a partner who never queries: no warning will come for the focal agent's case",
            ),
            ScenarioDeclaration(
                "random_partner",
                ("scripted:random_control",),
                "a partner who plays the paper's random valid-action control",
            ),
            ScenarioDeclaration(
                "rl2_partner",
                ("zoo:moral_hazard/rl2_s1",),
                "a recurrent (RL^2) partner from the zoo, trained in self-play at another cost",
            ),
            ScenarioDeclaration(
                "pivotal_partner",
                ("scripted:isolation_partner",),
                "a partner who queries and warns the focal agent, but picks its own unsafe "
                "option unless the focal agent queries and warns it: the focal agent's help is "
                "pivotal",
            ),
        ),
    ),
}

GAME = GameDeclaration(
    env="dilemmax.envs.moral_hazard.env:MoralHazardEnv",
    summary="Dialogue Moral Hazard Game: pay a private cost to reveal a hazard that protects a "
    "teammate",
    key_events=("query", "note_posted", "local", "decided", "final_correct"),
    action_names="dilemmax.envs.moral_hazard.constants:action_names",
    paper="Moral Hazard in Multi-Agent Language Models",
    reproduces="the Dialogue Moral Hazard Game: its conditions grid, the incentive isolation and "
    "the fine-tuning mechanisms",
    scenario_sets=SCENARIO_SETS,
)
