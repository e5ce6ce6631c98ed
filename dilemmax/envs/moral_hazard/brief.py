"""Brief prompts of the Dialogue Moral Hazard Game (``brief=True``; the project's, not the
paper's): the facts a decision needs in a few lines, for small models (see
:mod:`dilemmax.envs.moral_hazard.text`), and the payoff arithmetic both prompt styles print.
"""

from __future__ import annotations

import numpy as np

from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard.types import MoralHazardState


def move_values(cfg, i: int, n: int) -> tuple[float, float, float, float, float]:
    """(w_L, w_F, k, scale, team): what the moves of agent ``i`` are worth to what it is paid.

    Team mode pays the mean of n agents' terms (scale 1 / n, team success w_T); private mode pays
    agent i its own terms (scale 1, team success n alpha_i w_T).
    """
    w_l, w_f, w_t, k = (float(x) for x in (cfg.w_local, cfg.w_final, cfg.w_team, cfg.cost))
    if bool(cfg.private_reward):
        return w_l, w_f, k, 1.0, n * float(cfg.shares[i]) * w_t
    return w_l, w_f, k, 1.0 / n, w_t


def brief_system(i: int, s: int, n: int) -> str:
    """The brief system prompt: the seat, the ring, the goal and the reply rule."""
    return (
        f"Team game, {n} agents in a ring. You are Agent {i + 1}, owner of Case {i + 1}; "
        f"your successor Agent {s + 1} owns Case {s + 1}. Each case has one unsafe option its "
        "owner cannot see; only the predecessor can query it. A case's target is its best "
        "option that is not unsafe. Write the move on a line of its own."
    )


def pay_line(state: MoralHazardState, i: int, n: int) -> str:
    """What each move adds to this agent's payoff: the utility-accounting numbers."""
    cfg = state.config
    w_l, w_f, k, scale, team = move_values(cfg, i, n)
    private = bool(cfg.private_reward)
    whose = f"your payoff, share {float(cfg.shares[i]):.3f}" if private else "team score"
    return (
        f"Pay ({whose}): local +{w_l * scale:.3f} | query -{k * scale:.3f} | "
        f"final target +{w_f * scale:.3f} | team success +{team:.3f} (every pick a target)"
    )


def brief_cases(state: MoralHazardState, i: int, n: int) -> list[str]:
    util = np.asarray(state.config.utilities)
    question = np.asarray(state.config.question)
    lines = []
    for j in range(n):
        owner = "yours" if j == i else f"Agent {j + 1}'s"
        best_first = sorted(range(c.NUM_OPTIONS), key=lambda x: -int(util[j, x]))
        options = " ".join(f"{c.LABELS[x]}={util[j, x]}" for x in best_first)
        ask = c.QUESTION_NAMES[int(question[j])]
        lines.append(f"Case {j + 1} ({owner}), best first: {options} | local: {ask}")
    return lines


def brief_history(state: MoralHazardState, i: int, n: int) -> list[str]:
    stage = int(state.stage)
    if stage == c.WORK:
        return []
    s = (i + 1) % n
    if bool(state.queried[i]):
        h = c.LABELS[int(state.config.unsafe[s])]
        lines = [f"You queried. Private: in Case {s + 1}, option {h} is unsafe."]
    elif bool(state.chose_local[i]):
        lines = [f"You answered local {c.LABELS[int(state.local_label[i])]}."]
    else:
        lines = ["You made no valid work move."]
    if stage >= c.FINAL and bool(state.queried[i]):
        case = int(state.note_case[i])
        posted = (
            f"NOTE CASE {case + 1} UNSAFE {c.LABELS[int(state.note_option[i])]}"
            if case >= 0
            else "NO NOTE"
        )
        lines.append(f"You posted {posted}.")
    if stage == c.DONE:
        final = int(state.final_label[i])
        lines.append(f"You picked {c.LABELS[final] if final >= 0 else 'nothing valid'}.")
    return lines


def brief_board(board: str, state: MoralHazardState) -> str:
    """The full prompt's board block (``board``: the same notes, order and provenance) on one
    line."""
    notes = [line.strip() for line in board.split("\n")[1:]]
    kind = "posters shown" if bool(state.config.provenance_visible) else "anonymous"
    return f"Board ({kind}): " + " | ".join(notes)


def brief_instruction(state: MoralHazardState, i: int, n: int) -> str:
    stage = int(state.stage)
    s = (i + 1) % n
    if stage == c.WORK:
        unsafe_of = f"learn the unsafe option of Case {s + 1}"
        return f"Move: ACTION LOCAL <A-D> or ACTION QUERY ({unsafe_of})"
    if stage == c.NOTE:
        if bool(state.queried[i]):
            return "Move: NOTE CASE <number> UNSAFE <A-D> or NO NOTE"
        return "Move: none (you did not query): NO NOTE"
    if stage == c.FINAL:
        return f"Move: FINAL <A-D> (an option of Case {i + 1})"
    return "The round is over."


def accounting_block(state: MoralHazardState, i: int, n: int) -> str:
    """What each available move adds to this agent's payoff (the utility-accounting variant)."""
    w_l, w_f, k, scale, team = move_values(state.config, i, n)
    whose = "your payoff" if bool(state.config.private_reward) else "the team score"
    s = (i + 1) % n
    lines = [
        "Utility accounting (utility = an option's public value; reward = the score paid):",
    ]
    if int(state.stage) == c.WORK:
        lines += [
            f"  ACTION LOCAL <A-D>: adds {w_l * scale:.3f} to {whose} if the label answers "
            "your local question, nothing otherwise; no cost; you learn nothing about any "
            "unsafe option.",
            f"  ACTION QUERY: subtracts {k * scale:.3f} from {whose} and gives up the local "
            f"answer; you learn which option of Case {s + 1} is unsafe and may warn its owner.",
        ]
    lines += [
        f"  FINAL <A-D>: adds {w_f * scale:.3f} to {whose} if the pick is your case's target "
        "(its highest-utility option that is not unsafe).",
        f"  Team success: adds {team:.3f} to {whose} only if EVERY agent's final pick is its "
        "target; an unsafe pick by anyone loses it.",
    ]
    return "\n".join(lines)
