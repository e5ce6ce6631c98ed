"""OpenCleanup (OpenSocialJax): a public-goods dilemma with hidden tool recipes.

``dilemmax.make("open_cleanup")`` builds :class:`~dilemmax.envs.open_cleanup.env.OpenCleanupEnv`.
Modules: ``constants`` (codes and numbers), ``types`` (state, configuration, layout, rule),
``generator`` (layout and rule pools, configurations), ``dynamics`` (the parts of a step),
``observation``, ``metrics``, ``policies``, ``rendering``; the text protocol: ``text`` (the
:class:`~dilemmax.envs.osj.protocol.OSJProtocol` subclass), ``view_text`` (state -> text),
``ledger`` (the typed per-agent memory) and ``prompts/`` (the system prompt files).
"""

from dilemmax.envs.game_declaration import lazy_exports

# The exports are imported on first use: reading the game's declaration (its declaration.py,
# which imports this package first) imports none of the game's code.
__getattr__ = lazy_exports(
    __name__,
    {
        "OpenCleanupEnv": "env",
        "SCRIPTED_POLICIES": "policies",
        "OpenCleanupText": "text",
        "OpenCleanupConfig": "types",
        "OpenCleanupState": "types",
    },
)

# Every game folder exports the same five names (tests/test_game_layout.py); everything else is
# imported from its module (generator, metrics, policies, ...).
__all__ = [
    "SCRIPTED_POLICIES",
    "OpenCleanupConfig",
    "OpenCleanupEnv",
    "OpenCleanupState",
    "OpenCleanupText",
]
