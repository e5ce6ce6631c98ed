"""An omniscient plain-text view of one state (``env.render(state)``), for logs and debugging.

Unlike the agents' prompts (:mod:`dilemmax.envs.moral_hazard.text`) it shows the hidden unsafe
options, the targets and everyone's moves.
"""

from __future__ import annotations

import numpy as np

from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard import generator
from dilemmax.envs.moral_hazard.types import MoralHazardState


def _label(x: int) -> str:
    return c.LABELS[x] if 0 <= x < c.NUM_OPTIONS else "-"


def render_ansi(state: MoralHazardState) -> str:
    """The whole state of one (unbatched) episode as text."""
    cfg = state.config
    util = np.asarray(cfg.utilities)
    unsafe = np.asarray(cfg.unsafe)
    question = np.asarray(cfg.question)
    targets = np.asarray(generator.target_options(cfg.utilities, cfg.unsafe))
    n = util.shape[0]
    stage = c.STAGE_NAMES[int(state.stage)]
    mode = "private" if bool(cfg.private_reward) else "team"
    provenance = "visible" if bool(cfg.provenance_visible) else "anonymous"
    lines = [
        f"moral_hazard  n={n}  stage={stage}  mapping={c.MAPPING_NAMES[int(cfg.mapping)]}  "
        f"provenance={provenance}  payoff={mode}",
        f"w_L={float(cfg.w_local):.2f} w_F={float(cfg.w_final):.2f} "
        f"w_T={float(cfg.w_team):.2f} k={float(cfg.cost):.2f} "
        "shares=" + ", ".join(f"{x:.3f}" for x in np.asarray(cfg.shares)),
    ]
    for i in range(n):
        options = " ".join(f"{c.LABELS[x]}={util[i, x]}" for x in range(c.NUM_OPTIONS))
        if bool(state.queried[i]):
            work = "QUERY"
        elif bool(state.chose_local[i]):
            work = f"LOCAL {_label(int(state.local_label[i]))}"
        else:
            work = "-"
        note_case = int(state.note_case[i])
        note = (
            f"NOTE CASE {note_case + 1} UNSAFE {_label(int(state.note_option[i]))}"
            if note_case >= 0
            else "-"
        )
        lines.append(
            f"case {i + 1}: {options}  ask={c.QUESTION_NAMES[question[i]]}  "
            f"unsafe={_label(unsafe[i])} target={_label(targets[i])} | work={work} "
            f"note={note} final={_label(int(state.final_label[i]))}"
        )
    return "\n".join(lines)
