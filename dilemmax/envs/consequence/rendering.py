"""Readable text of a consequence-game state (``env.render(state, "ansi")``)."""

from __future__ import annotations

import jax
import numpy as np

from dilemmax.envs.consequence import constants as C


def participant_label(seat: int) -> str:
    """The letter a participant goes by in texts: A, B, C, ... (P27, P28, ... past Z)."""
    return chr(ord("A") + seat) if seat < 26 else f"P{seat + 1}"


def to_numpy(state):
    """The (unbatched) state with numpy leaves, for Python-side text."""
    state = jax.device_get(state)
    if np.ndim(state.fund) != 0:
        raise ValueError("texts render one unbatched state; index the batch first")
    return state


def status_text(state, seat: int, num_rounds: int) -> str:
    """'in the game' or how and when ``seat`` was eliminated."""
    if state.alive[seat]:
        return "in the game"
    after = int(state.eliminated_round[seat]) + 1
    how = "endgame" if state.endgame[seat] else "rule"
    return f"eliminated after round {after}/{num_rounds} ({how}, forfeited {state.forfeited[seat]})"


def render_ansi(env, state) -> str:
    s = to_numpy(state)
    rule = C.RULE_NAMES[int(s.config.rule)]
    threshold, fund = int(s.config.threshold), int(s.fund)
    if s.done:
        phase = "finished: " + ("threshold met" if s.success else "threshold missed")
    else:
        phase = "vote" if s.phase == C.PHASE_VOTE else "contribute"
    rounds_seen = int(s.round) + (1 if s.done or s.phase == C.PHASE_VOTE else 0)
    lines = [
        f"consequence | rule {rule} | round {int(s.round) + 1}/{env.num_rounds} | {phase}",
        f"fund {fund}/{threshold} (short {max(threshold - fund, 0)})",
        f"{'seat':<10}{'name':<6}{'rank':>5}{'start':>7}{'left':>6}{'given':>7}  status",
    ]
    given = s.contributions.sum(axis=0)
    for seat, agent in enumerate(env.agents):
        start = int(s.config.resources[s.rank[seat]])
        lines.append(
            f"{agent:<10}{participant_label(seat):<6}{int(s.rank[seat]):>5}{start:>7}"
            f"{int(s.resources[seat]):>6}{int(given[seat]):>7}  "
            + status_text(s, seat, env.num_rounds)
        )
    for t in range(rounds_seen):
        paid = " ".join(str(int(v)) for v in s.contributions[t])
        votes = s.votes[t]
        ballot = ""
        if np.any(votes >= 0):
            ballot = " | votes " + " ".join(
                participant_label(int(v)) if v >= 0 else "-" for v in votes
            )
        lines.append(f"round {t + 1}: paid {paid}{ballot}")
    return "\n".join(lines)
