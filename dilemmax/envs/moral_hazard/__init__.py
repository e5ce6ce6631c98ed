"""The Dialogue Moral Hazard Game (env id ``moral_hazard``).

Costly, other-benefiting information acquisition in a ring of n agents: pay a query cost to
learn the hidden unsafe option of your successor's case, warn it on a public board, and let
every owner use the warnings in its final choice. See :mod:`.env` for the mechanics,
:mod:`.constants` for the action encoding and :mod:`.observation` for the observation layout.
"""

from dilemmax.envs.game_declaration import lazy_exports

# The exports are imported on first use: reading the game's declaration (its declaration.py,
# which imports this package first) imports none of the game's code.
__getattr__ = lazy_exports(
    __name__,
    {
        "MoralHazardEnv": "env",
        "SCRIPTED_POLICIES": "policies",
        "MoralHazardText": "text",
        "MoralHazardConfig": "types",
        "MoralHazardState": "types",
    },
)

# Every game folder exports the same five names (tests/test_game_layout.py); everything else is
# imported from its module (generator, metrics, policies, ...).
__all__ = [
    "SCRIPTED_POLICIES",
    "MoralHazardConfig",
    "MoralHazardEnv",
    "MoralHazardState",
    "MoralHazardText",
]
