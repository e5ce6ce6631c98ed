"""Tests of the shared grid rendering."""

import numpy as np
import pytest

from dilemmax.envs.grid import EAST, NORTH, SOUTH, WEST
from dilemmax.envs.grid_render import render_cells

BACKGROUND = (10, 120, 30)
RED = (250, 0, 0)


def _render(orientation, scale=8, **kwargs):
    cells = np.zeros((3, 4, 3), np.uint8) + np.array(BACKGROUND, np.uint8)
    return render_cells(
        cells, np.array([[1, 2]]), np.array([orientation]), np.array([RED]), scale, **kwargs
    )


def test_shape_background_and_agent_cell():
    image = _render(NORTH)
    assert image.shape == (24, 32, 3) and image.dtype == np.uint8
    outside = np.ones((24, 32), bool)
    outside[8:16, 16:24] = False
    assert (image[outside] == BACKGROUND).all()
    tile = image[8:16, 16:24]
    assert (tile == RED).all(axis=-1).sum() >= 16  # a visible arrowhead


@pytest.mark.parametrize("orientation", [NORTH, EAST, SOUTH, WEST])
def test_arrow_points_the_way_the_agent_faces(orientation):
    tile = _render(orientation, scale=16)[16:32, 32:48]
    red = (tile == RED).all(axis=-1)
    # the half of the cell the agent faces holds the narrow tip, so fewer agent pixels
    halves = {
        NORTH: (red[:8], red[8:]),
        SOUTH: (red[8:], red[:8]),
        EAST: (red[:, 8:], red[:, :8]),
        WEST: (red[:, :8], red[:, 8:]),
    }
    facing_half, back_half = halves[orientation]
    assert facing_half.sum() < back_half.sum() / 2


def test_inactive_agents_hidden_and_highlight_tints():
    image = _render(NORTH, active=np.array([False]))
    assert (image == BACKGROUND).all()
    lit = np.zeros((3, 4), bool)
    lit[0, 0] = True
    image = _render(NORTH, highlight=lit, active=np.array([False]))
    expected = ((np.array(BACKGROUND) + np.array((255, 255, 170))) / 2).astype(np.uint8)
    assert (image[:8, :8] == expected).all() and (image[8:, :] == BACKGROUND).all()
