"""What an OpenSocialJax agent sees, in plain Python: its window, a beam's cells, names.

Both grid games describe positions as (row, col) with row 0 the north edge, and the agents as
letters A, B, ...; these helpers are the one place that says so for the text protocol and the
ansi pictures. They run outside JAX on one unbatched state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from dilemmax.envs import grid as G

FACING_NAMES = ("north", "east", "south", "west")  # grid.py order of orientations
DIRECTION_DELTAS = ((-1, 0), (0, 1), (1, 0), (0, -1))  # (row, col) step of N, E, S, W

# The 11 x 11 egocentric window of both games: 9 ahead, 1 behind, 5 to each side.
_VIEW_OFFSETS = np.asarray(G.view_offsets(9, 1, 5))


def agent_letter(index: int) -> str:
    """Agent 0 is A, agent 1 is B, ... (the papers' names)."""
    return chr(ord("A") + int(index))


def view_cells(position, facing: int, shape: tuple[int, int]) -> set[tuple[int, int]]:
    """The in-bounds cells of the 11 x 11 egocentric window (9 ahead, 1 behind, 5 aside)."""
    offsets = _VIEW_OFFSETS[int(facing)].reshape(-1, 2) + np.asarray(position).reshape(1, 2)
    h, w = shape
    keep = (offsets[:, 0] >= 0) & (offsets[:, 0] < h) & (offsets[:, 1] >= 0) & (offsets[:, 1] < w)
    return set(map(tuple, offsets[keep].tolist()))


def beam_cells(position, facing: int) -> list[tuple[int, int]]:
    """The 4 cells a beam covers (faced, beyond, the two beside the faced cell), in numpy-free
    Python: same footprint and order as :func:`dilemmax.envs.grid.beam_cells`."""
    fwd = DIRECTION_DELTAS[int(facing)]
    right = DIRECTION_DELTAS[(int(facing) + 1) % 4]
    r0, c0 = int(position[0]), int(position[1])
    return [
        (r0 + f * fwd[0] + s * right[0], c0 + f * fwd[1] + s * right[1])
        for f, s in G.BEAM_FORWARD_RIGHT
    ]


def manhattan(a, b) -> int:
    return abs(int(a[0]) - int(b[0])) + abs(int(a[1]) - int(b[1]))


def view_map(
    position,
    facing: int,
    shape: tuple[int, int],
    occupant: Mapping[tuple[int, int], int],
    me: int,
    token: Callable[[int, int], str],
    row_label: str,
) -> list[str]:
    """The 11 x 11 window drawn north-up, one line per row: column numbers on top, each row
    labelled with ``row_label.format(row)``; ``##`` beyond the edge, ``ME`` for agent ``me``,
    ``@B`` for agent B (``occupant``: cell -> agent), else ``token(row, col)``."""
    cells = _VIEW_OFFSETS[int(facing)].reshape(-1, 2) + np.asarray(position).reshape(1, 2)
    rows = range(int(cells[:, 0].min()), int(cells[:, 0].max()) + 1)
    cols = range(int(cells[:, 1].min()), int(cells[:, 1].max()) + 1)
    height, width = shape
    out = ["     " + " ".join(f"{c:>2}" for c in cols)]
    for r in rows:
        tokens = []
        for c in cols:
            if not (0 <= r < height and 0 <= c < width):
                tokens.append("##")
            elif (j := occupant.get((r, c))) is not None:
                tokens.append("ME" if j == me else "@" + agent_letter(j))
            else:
                tokens.append(token(r, c))
        out.append(row_label.format(r) + " ".join(tokens))
    return out
