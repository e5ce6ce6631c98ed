"""OpenCleanup (OpenSocialJax): a public-goods dilemma with hidden tool recipes.

``dilemmax.make("open_cleanup")`` builds :class:`~dilemmax.envs.open_cleanup.env.OpenCleanupEnv`.
Modules: ``constants`` (codes and numbers), ``types`` (state, configuration, layout, rule),
``generator`` (layout and rule pools, configurations), ``dynamics`` (the parts of a step),
``observation``, ``metrics``, ``policies``, ``rendering``; the text protocol: ``text`` (the
:class:`~dilemmax.envs.osj.protocol.OSJProtocol` subclass), ``view_text`` (state -> text),
``ledger`` (the typed per-agent memory) and ``prompts/`` (the system prompt files).
"""

from dilemmax.envs.open_cleanup.env import OpenCleanupEnv
from dilemmax.envs.open_cleanup.policies import SCRIPTED_POLICIES
from dilemmax.envs.open_cleanup.text import OpenCleanupText
from dilemmax.envs.open_cleanup.types import OpenCleanupConfig, OpenCleanupState

# Every game folder exports the same five names (tests/test_game_layout.py); everything else is
# imported from its module (generator, metrics, policies, ...).
__all__ = [
    "SCRIPTED_POLICIES",
    "OpenCleanupConfig",
    "OpenCleanupEnv",
    "OpenCleanupState",
    "OpenCleanupText",
]
