"""The packed view both grid games observe through: codes, packing and decoding."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.envs import packed_view as PV
from dilemmax.envs.open_cleanup import constants as CC
from dilemmax.envs.open_harvest import constants as HC


def test_both_games_use_the_shared_who_codes_and_fit_the_cell_bits():
    assert (CC.AGENT_NONE, CC.AGENT_SELF, CC.AGENT_OTHER_BASE) == (
        PV.WHO_NOBODY,
        PV.WHO_SELF,
        PV.WHO_OTHER,
    )
    assert (HC.WHO_NOBODY, HC.WHO_SELF, HC.WHO_OTHER) == (PV.WHO_NOBODY, PV.WHO_SELF, PV.WHO_OTHER)
    assert max(CC.NUM_CELL_CODES, HC.NUM_CELL_CODES) <= 1 << PV.CELL_BITS


@pytest.mark.slow
def test_decoded_window_names_cells_facings_and_the_observer():
    # A 5 x 5 map, two agents: agent 0 at (2, 2) facing north, agent 1 at (1, 2) facing south,
    # frozen. Windows of 1 ahead, 0 behind, 1 aside.
    cells = jnp.arange(25, dtype=jnp.uint8).reshape(5, 5) % 7
    positions = jnp.asarray([[2, 2], [1, 2]], jnp.int32)
    orientations = jnp.asarray([0, 2], jnp.int32)
    info = PV.agent_info(orientations, jnp.asarray([0, 3], jnp.int32))
    np.testing.assert_array_equal(info, [1, 7])
    layer = PV.packed_layer(cells, positions, info)
    assert layer.dtype == jnp.uint16 and int(layer[1, 2]) == int(cells[1, 2]) | 7 << PV.CELL_BITS
    cell, who, seen = PV.observe_channels(layer, positions, orientations, 1, 0, 1, pad_cell=6)
    assert cell.shape == who.shape == seen.shape == (2, 2, 3)
    np.testing.assert_array_equal(cell[0], np.asarray(cells)[1:3, 1:4])
    # Agent 0 sees agent 1 straight ahead, facing towards it (relative facing 2), and itself.
    np.testing.assert_array_equal(who[0], [[0, PV.WHO_OTHER + 2, 0], [0, PV.WHO_SELF, 0]])
    np.testing.assert_array_equal(seen[0], [[0, 7, 0], [0, 1, 0]])
    # Agent 1, facing south, sees agent 0 ahead of it, facing towards it as well.
    np.testing.assert_array_equal(who[1], [[0, PV.WHO_OTHER + 2, 0], [0, PV.WHO_SELF, 0]])
