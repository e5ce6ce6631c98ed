"""OpenHarvest (OpenSocialJax): a common-pool orchard with hidden ripeness rules.

``dilemmax.make("open_harvest")`` builds :class:`~dilemmax.envs.open_harvest.env.OpenHarvestEnv`.
Modules as in every game folder: ``constants``, ``types`` (state, configuration, layout, rule),
``generator`` (layout and rule pools, configurations), ``dynamics``, ``observation``,
``metrics``, ``policies``, ``rendering``; the text protocol: ``text`` (the
:class:`~dilemmax.envs.osj.protocol.OSJProtocol` subclass), ``view_text`` (state -> text),
``ledger`` (the typed per-agent memory) and ``prompts/`` (the system prompt files).
"""

from dilemmax.envs.game_declaration import lazy_exports

# The exports are imported on first use: reading the game's declaration (its declaration.py,
# which imports this package first) imports none of the game's code.
__getattr__ = lazy_exports(
    __name__,
    {
        "OpenHarvestEnv": "env",
        "SCRIPTED_POLICIES": "policies",
        "OpenHarvestText": "text",
        "OpenHarvestConfig": "types",
        "OpenHarvestState": "types",
    },
)

# Every game folder exports the same five names (tests/test_game_layout.py); everything else is
# imported from its module (generator, metrics, policies, ...).
__all__ = [
    "SCRIPTED_POLICIES",
    "OpenHarvestConfig",
    "OpenHarvestEnv",
    "OpenHarvestState",
    "OpenHarvestText",
]
