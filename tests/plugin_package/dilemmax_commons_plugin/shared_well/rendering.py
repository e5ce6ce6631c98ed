"""The whole state of one episode as text (``env.render(state)``): the hidden regrowth too."""

from __future__ import annotations

from dilemmax_commons_plugin.shared_well.types import SharedWellState


def render_ansi(state: SharedWellState) -> str:
    takes = ", ".join(str(int(t)) for t in state.last_take)
    return (
        f"shared_well  round={int(state.round)}  stock={int(state.stock)}/"
        f"{int(state.config.capacity)}  hidden growth g={int(state.config.growth)}\n"
        f"last takes: {takes}  last regrowth: {int(state.last_growth)}"
    )
