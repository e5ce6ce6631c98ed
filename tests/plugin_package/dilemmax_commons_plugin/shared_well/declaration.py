"""What dilemmax knows about the Shared Well beyond its env class, found through this package's
``"dilemmax.games"`` entry point ``shared_well``. It imports none of the game's code (the env is
named by its import path), so ``dilemmax list`` stays cheap."""

from __future__ import annotations

from dilemmax.envs.game_declaration import GameDeclaration

GAME = GameDeclaration(
    env="dilemmax_commons_plugin.shared_well.env:SharedWellEnv",
    summary="Shared Well (a plug-in): draw from a common pool whose hidden regrowth punishes greed",
    key_events=("take", "rationed", "growth", "stock"),
    action_names=("take 0", "take 1", "take 2", "take 3"),
)
