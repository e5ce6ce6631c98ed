"""Tests of the shared grid mechanics on hand-built states, plus randomized property checks."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.envs import grid
from dilemmax.envs.grid import EAST, NORTH, SOUTH, WEST

SHAPE = (6, 7)
OPEN = jnp.ones(SHAPE, bool)


def _np(x):
    return np.asarray(x).tolist()


# Compiled once per argument shapes: run op by op, each of these is dozens of programs (one per
# primitive and shape). test_resolve_moves_jit_equals_no_jit and test_views_match_naive_reference
# _and_jit keep the eager paths, checked against these.
_resolve_moves = jax.jit(grid.resolve_moves)
_beam_mask = jax.jit(grid.beam_mask, static_argnums=3)
_beam_hits_agents = jax.jit(grid.beam_hits_agents, static_argnums=3)
_egocentric_views = jax.jit(grid.egocentric_views, static_argnums=(3, 4, 5, 6))
_egocentric_agent_views = jax.jit(grid.egocentric_agent_views, static_argnums=2)
_respawn_positions = jax.jit(grid.respawn_positions)
_beam_cells = jax.jit(grid.beam_cells, static_argnums=2)
_gather_cells = jax.jit(grid.gather_cells, static_argnames="fill")
_egocentric_view = jax.jit(grid.egocentric_view, static_argnames="pad_value")
_agent_grid = jax.jit(grid.agent_grid, static_argnums=1)
_occupancy = jax.jit(grid.occupancy, static_argnums=1)
_paint_agents = jax.jit(grid.paint_agents)


# --------------------------------------------------------------------------- orientation, moves
def test_turn_and_relative_orientation():
    o = jnp.array([NORTH, EAST, SOUTH, WEST])
    assert _np(grid.turn(o, -1)) == [WEST, NORTH, EAST, SOUTH]
    assert _np(grid.turn(o, 1)) == [EAST, SOUTH, WEST, NORTH]
    assert _np(grid.turn(o, 0)) == _np(o)
    # another agent facing east, seen by an observer facing north, faces right in the view
    assert int(grid.relative_orientation(EAST, NORTH)) == 1
    assert int(grid.relative_orientation(NORTH, EAST)) == 3
    assert int(grid.relative_orientation(SOUTH, SOUTH)) == 0


def test_direction_deltas_row_zero_is_north():
    assert _np(grid.DIRECTION_DELTAS) == [[-1, 0], [0, 1], [1, 0], [0, -1]]


def test_propose_moves():
    pos = jnp.array([[2, 2], [2, 2], [2, 2], [2, 2], [2, 2]])
    out = grid.propose_moves(pos, jnp.array([-1, NORTH, EAST, SOUTH, WEST]))
    assert _np(out) == [[2, 2], [1, 2], [2, 3], [3, 2], [2, 1]]


# --------------------------------------------------------------------------- beams
@pytest.mark.parametrize(
    "orientation, expected",
    [
        # faced, beyond, forward-left, forward-right
        (NORTH, [[2, 3], [1, 3], [2, 2], [2, 4]]),
        (EAST, [[3, 4], [3, 5], [2, 4], [4, 4]]),
        (SOUTH, [[4, 3], [5, 3], [4, 4], [4, 2]]),
        (WEST, [[3, 2], [3, 1], [4, 2], [2, 2]]),
    ],
)
def test_beam_footprint_each_facing(orientation, expected):
    cells, ok = _beam_cells(jnp.array([3, 3]), jnp.int32(orientation), SHAPE)
    assert _np(cells) == expected
    assert bool(ok.all())


def test_beam_off_grid_flagged():
    cells, ok = _beam_cells(jnp.array([1, 0]), jnp.int32(NORTH), SHAPE)
    assert _np(cells) == [[0, 0], [-1, 0], [0, -1], [0, 1]]
    assert _np(ok) == [True, False, False, True]


def test_beam_cells_batched_matches_single():
    pos = jnp.array([[3, 3], [0, 6], [5, 0]])
    ori = jnp.array([EAST, SOUTH, WEST])
    cells, ok = _beam_cells(pos, ori, SHAPE)
    vcells, vok = jax.vmap(lambda p, o: _beam_cells(p, o, SHAPE))(pos, ori)
    assert cells.shape == (3, 4, 2)
    assert _np(cells) == _np(vcells) and _np(ok) == _np(vok)


def test_gather_cells_fills_off_grid():
    layer = jnp.arange(42, dtype=jnp.int32).reshape(SHAPE)
    cells, _ = _beam_cells(jnp.array([1, 0]), jnp.int32(NORTH), SHAPE)
    assert _np(_gather_cells(layer, cells, fill=-7)) == [0, -7, -7, 1]
    rgb = jnp.stack([layer, layer + 100], axis=-1)
    assert _np(_gather_cells(rgb, cells[:2], fill=-1)) == [[0, 100], [-1, -1]]


@pytest.mark.slow
def test_beam_mask_and_hits():
    pos = jnp.array([[3, 3], [2, 3], [4, 4], [0, 0]])
    ori = jnp.array([NORTH, SOUTH, NORTH, NORTH])
    firing = jnp.array([True, False, True, True])
    mask = np.asarray(_beam_mask(pos, ori, firing, SHAPE))
    expected = np.zeros(SHAPE, bool)
    for r, c in [(2, 3), (1, 3), (2, 2), (2, 4), (3, 4), (2, 4), (3, 3), (3, 5)]:
        expected[r, c] = True
    assert (mask == expected).all()  # agent 3's beam is wholly off the grid
    hits = np.asarray(_beam_hits_agents(pos, ori, firing, SHAPE))
    assert hits[0, 1] and hits[2, 0]  # 0 hits 1 straight ahead; 2 hits 0 forward-left
    assert hits.sum() == 2  # agent 1 does not fire; nobody hits itself


# --------------------------------------------------------------------------- moves
def _resolve(pos, tgt, passable=OPEN, seed=0, active=None):
    return np.asarray(
        _resolve_moves(
            jax.random.key(seed), jnp.array(pos), jnp.array(tgt), passable, active=active
        )
    ).tolist()


@pytest.mark.slow
def test_move_into_wall_or_off_grid_is_blocked():
    passable = OPEN.at[2, 3].set(False)
    out = _resolve([[2, 2], [0, 0], [5, 6]], [[2, 3], [-1, 0], [5, 7]], passable)
    assert out == [[2, 2], [0, 0], [5, 6]]


def test_free_moves_succeed():
    assert _resolve([[2, 2], [4, 4]], [[1, 2], [4, 5]]) == [[1, 2], [4, 5]]


def test_staying_agent_blocks_its_cell():
    assert _resolve([[2, 2], [2, 3]], [[2, 3], [2, 3]]) == [[2, 2], [2, 3]]


def test_swap_is_blocked():
    assert _resolve([[2, 2], [2, 3]], [[2, 3], [2, 2]]) == [[2, 2], [2, 3]]


def test_chain_follows_a_leaving_agent():
    # 0 -> 1's cell, 1 -> 2's cell, 2 -> a free cell: everyone moves
    out = _resolve([[1, 1], [1, 2], [1, 3]], [[1, 2], [1, 3], [1, 4]])
    assert out == [[1, 2], [1, 3], [1, 4]]


def test_chain_stops_behind_a_blocked_head():
    passable = OPEN.at[1, 4].set(False)
    out = _resolve([[1, 1], [1, 2], [1, 3]], [[1, 2], [1, 3], [1, 4]], passable)
    assert out == [[1, 1], [1, 2], [1, 3]]


def test_three_cycle_rotates():
    pos = [[1, 1], [1, 2], [2, 2]]
    tgt = [[1, 2], [2, 2], [1, 1]]  # not a legal single step for agent 2, but a clean cycle
    assert _resolve(pos, tgt) == tgt


def test_inactive_agent_neither_moves_nor_yields():
    active = jnp.array([True, False])
    out = _resolve([[2, 2], [2, 3]], [[2, 3], [2, 4]], active=active)
    assert out == [[2, 2], [2, 3]]


def test_contested_cell_one_uniform_winner():
    pos = jnp.array([[2, 1], [2, 3], [1, 2]])
    tgt = jnp.array([[2, 2], [2, 2], [2, 2]])
    keys = jax.random.split(jax.random.key(1), 600)
    out = jax.jit(jax.vmap(lambda k: grid.resolve_moves(k, pos, tgt, OPEN)))(keys)
    at_target = np.all(np.asarray(out) == np.array([2, 2]), axis=-1)  # [600, 3]
    assert (at_target.sum(axis=1) == 1).all()  # exactly one winner every time
    wins = at_target.sum(axis=0)
    assert (wins > 150).all(), wins  # each has 1/3; 150 is > 5 sd below 200
    losers = ~at_target
    assert (np.asarray(out)[losers] == np.broadcast_to(np.asarray(pos), out.shape)[losers]).all()


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _random_configs(key, batch, num_agents, shape):
    """Random distinct positions, random moves (including illegal ones) and random walls."""
    height, width = shape
    k1, k2, k3 = jax.random.split(key, 3)
    cells = jax.vmap(lambda k: jax.random.permutation(k, height * width)[:num_agents])(
        jax.random.split(k1, batch)
    )
    pos = jnp.stack([cells // width, cells % width], axis=-1).astype(jnp.int32)
    move_dir = jax.random.randint(k2, (batch, num_agents), -1, 4)
    walls = jax.random.uniform(k3, (batch, height, width)) < 0.15
    # agents stand on passable cells
    passable = jax.vmap(lambda w, p: ~w.at[p[:, 0], p[:, 1]].set(False))(walls, pos)
    return pos, move_dir, passable


@pytest.mark.slow
def test_randomized_no_overlap_and_no_needless_block():
    batch, num_agents, shape = 3000, 6, (4, 4)  # crowded: 6 agents on 16 cells
    pos, move_dir, passable = _random_configs(jax.random.key(7), batch, num_agents, shape)
    keys = jax.random.split(jax.random.key(8), batch)

    def one(k, p, d, pas):
        tgt = grid.propose_moves(p, d)
        return tgt, grid.resolve_moves(k, p, tgt, pas)

    tgt, new = jax.jit(jax.vmap(one))(keys, pos, move_dir, passable)
    pos, tgt, new, passable = map(np.asarray, (pos, tgt, new, passable))
    for b in range(batch):
        cells = [tuple(c) for c in new[b]]
        assert len(set(cells)) == num_agents, (pos[b], tgt[b], new[b])
        for i in range(num_agents):
            moved = cells[i] != tuple(pos[b, i])
            if moved:
                assert cells[i] == tuple(tgt[b, i]) and passable[b][cells[i]]
            else:
                t = tuple(tgt[b, i])
                legal = 0 <= t[0] < shape[0] and 0 <= t[1] < shape[1] and passable[b][t]
                # an agent with a legal target only stays if that cell ends up taken
                assert not legal or t in cells, (pos[b], tgt[b], new[b], i)


@pytest.mark.slow
def test_resolve_moves_jit_equals_no_jit():
    passable = OPEN.at[0, 3].set(False)
    pos = jnp.array([[1, 1], [1, 2], [2, 2], [0, 2], [1, 3]])
    tgt = jnp.array([[1, 2], [2, 2], [2, 3], [1, 2], [0, 3]])  # chain, contest, wall
    jitted = jax.jit(grid.resolve_moves)
    for seed in range(3):
        args = (jax.random.key(seed), pos, tgt, passable)
        assert _np(grid.resolve_moves(*args)) == _np(jitted(*args))


# --------------------------------------------------------------------------- views
AHEAD, BEHIND, SIDE = 9, 1, 5


@pytest.mark.parametrize(
    "orientation, view_cell",
    [
        (NORTH, (AHEAD - 1, SIDE)),  # straight ahead
        (EAST, (AHEAD, SIDE - 1)),  # north is on the left when facing east
        (SOUTH, (AHEAD + 1, SIDE)),  # north is behind
        (WEST, (AHEAD, SIDE + 1)),  # north is on the right when facing west
    ],
)
def test_marker_north_of_agent_rotates_with_view(orientation, view_cell):
    layer = jnp.zeros((12, 16), jnp.uint8).at[5, 8].set(7)
    view = np.asarray(_egocentric_view(layer, jnp.array([6, 8]), jnp.int32(orientation)))
    assert view.shape == (AHEAD + BEHIND + 1, 2 * SIDE + 1)
    assert view.dtype == np.uint8
    assert list(zip(*np.nonzero(view), strict=True)) == [view_cell]


def test_view_far_corner_and_padding():
    layer = jnp.zeros((12, 16), jnp.int32).at[0, 3].set(5)
    # agent at (9, 8) facing north: 9 rows ahead is row 0, far left is col 3
    view = np.asarray(_egocentric_view(layer, jnp.array([9, 8]), jnp.int32(NORTH), pad_value=-1))
    assert view[0, 0] == 5
    assert (view != -1).all()
    # facing south from the same cell: the view runs off the south edge after 2 rows
    view = np.asarray(_egocentric_view(layer, jnp.array([9, 8]), jnp.int32(SOUTH), pad_value=-1))
    assert (view[: AHEAD - 2] == -1).all() and (view[AHEAD - 2 :] != -1).all()


def _naive_view(layer, pos, o, pad):
    out = np.full((AHEAD + BEHIND + 1, 2 * SIDE + 1), pad, layer.dtype)
    fwd = grid.DIRECTION_DELTAS_NP[o]
    rgt = grid.DIRECTION_DELTAS_NP[(o + 1) % 4]
    for r in range(out.shape[0]):
        for c in range(out.shape[1]):
            cell = np.asarray(pos) + (AHEAD - r) * fwd + (c - SIDE) * rgt
            if 0 <= cell[0] < layer.shape[0] and 0 <= cell[1] < layer.shape[1]:
                out[r, c] = layer[cell[0], cell[1]]
    return out


@pytest.mark.slow
def test_views_match_naive_reference_and_jit():
    rng = np.random.default_rng(0)
    layer = rng.integers(0, 50, (12, 16)).astype(np.int32)
    pos = np.stack([rng.integers(0, 12, 5), rng.integers(0, 16, 5)], axis=-1).astype(np.int32)
    ori = rng.integers(0, 4, 5).astype(np.int32)
    views = grid.egocentric_views(jnp.asarray(layer), pos, ori, pad_value=99)
    jitted = jax.jit(lambda lay, p, o: grid.egocentric_views(lay, p, o, pad_value=99))(
        jnp.asarray(layer), pos, ori
    )
    assert views.shape == (5, 11, 11)
    views = np.asarray(views)
    assert (views == np.asarray(jitted)).all()
    for i in range(5):
        assert (views[i] == _naive_view(layer, pos[i], ori[i], 99)).all()
    vmapped = jax.vmap(lambda p, o: grid.egocentric_view(jnp.asarray(layer), p, o, pad_value=99))
    assert (np.asarray(vmapped(pos, ori)) == np.asarray(views)).all()


@pytest.mark.slow
@pytest.mark.parametrize("ahead, behind, side", [(9, 1, 5), (3, 2, 1), (0, 4, 2)])
def test_sliced_2d_views_equal_the_per_cell_gather_and_the_naive_view(ahead, behind, side):
    rng = np.random.default_rng(ahead)
    layer = rng.integers(0, 200, (12, 16)).astype(np.uint8)
    pos = np.stack([rng.integers(0, 12, 16), rng.integers(0, 16, 16)], -1).astype(np.int32)
    ori = np.arange(16, dtype=np.int32) % 4  # every facing, corners and edges
    pos[:4] = [[0, 0], [11, 15], [0, 15], [11, 0]]
    # Both paths compiled (the 2-D layer is sliced, the 3-D one gathered cell by cell); jit
    # picks the same path as eager, which test_views_match_naive_reference_and_jit checks.
    sliced = np.asarray(_egocentric_views(layer, pos, ori, ahead, behind, side, 7))
    gathered = _egocentric_views(layer[..., None], pos, ori, ahead, behind, side, 7)
    np.testing.assert_array_equal(sliced, np.asarray(gathered)[..., 0])
    batched = jax.jit(
        jax.vmap(lambda lay: grid.egocentric_views(lay, pos, ori, ahead, behind, side, 7))
    )
    np.testing.assert_array_equal(np.asarray(batched(layer[None]))[0], sliced)
    for i in range(16):
        deltas = grid.DIRECTION_DELTAS_NP
        fwd, rgt = deltas[ori[i]], deltas[(ori[i] + 1) % 4]
        for r in range(ahead + behind + 1):
            for c in range(2 * side + 1):
                cell = pos[i] + (ahead - r) * fwd + (c - side) * rgt
                inside = 0 <= cell[0] < 12 and 0 <= cell[1] < 16
                want = int(layer[cell[0], cell[1]]) if inside else 7
                assert int(sliced[i, r, c]) == want


def test_view_carries_channels():
    layer = jnp.zeros((12, 16, 3), jnp.float32).at[5, 8].set(jnp.array([1.0, 2.0, 3.0]))
    view = _egocentric_view(layer, jnp.array([6, 8]), jnp.int32(NORTH))
    assert view.shape == (11, 11, 3)
    assert _np(view[AHEAD - 1, SIDE]) == [1.0, 2.0, 3.0]


@pytest.mark.slow
def test_agent_views_self_others_and_facing():
    pos = jnp.array([[6, 8], [5, 8], [6, 9]])
    ori = jnp.array([NORTH, EAST, SOUTH])
    index, facing = _egocentric_agent_views(pos, ori, (12, 16))
    index, facing = np.asarray(index), np.asarray(facing)
    assert index.shape == facing.shape == (3, 11, 11)
    for i in range(3):
        assert index[i, AHEAD, SIDE] == i and facing[i, AHEAD, SIDE] == 0
    # agent 0 facing north: agent 1 straight ahead facing right, agent 2 to its right facing down
    assert index[0, AHEAD - 1, SIDE] == 1 and facing[0, AHEAD - 1, SIDE] == 1
    assert index[0, AHEAD, SIDE + 1] == 2 and facing[0, AHEAD, SIDE + 1] == 2
    assert (index[0] >= 0).sum() == 3 and (facing[0][index[0] < 0] == -1).all()
    # agent 2 facing south: agent 0 is on its right (west), facing away from it (down)
    assert index[2, AHEAD, SIDE + 1] == 0 and facing[2, AHEAD, SIDE + 1] == 2
    # inactive agents are not drawn
    index, _ = _egocentric_agent_views(pos, ori, (12, 16), active=jnp.array([1, 0, 1], bool))
    assert (np.asarray(index) == 1).sum() == 0


def test_one_hot_codes():
    codes = jnp.array([[0, 2], [1, 5]], jnp.uint8)
    out = grid.one_hot_codes(codes, 3)
    assert out.shape == (2, 2, 3) and out.dtype == jnp.float32
    assert _np(out[0, 1]) == [0, 0, 1] and _np(out[1, 1]) == [0, 0, 0]


# --------------------------------------------------------------------------- painting, spawning
def test_agent_grid_paint_and_occupancy():
    pos = jnp.array([[0, 0], [2, 3], [5, 6]])
    g = np.asarray(_agent_grid(pos, SHAPE, active=jnp.array([True, True, False])))
    assert g[0, 0] == 0 and g[2, 3] == 1 and g[5, 6] == -1 and (g == -1).sum() == 42 - 2
    occ = np.asarray(_occupancy(pos, SHAPE))
    assert occ.sum() == 3 and occ[5, 6]
    layer = _paint_agents(jnp.zeros(SHAPE, jnp.uint8), pos, jnp.array([7, 8, 9], jnp.uint8))
    assert int(layer[2, 3]) == 8 and int(layer.sum()) == 24


def test_sample_spawn_positions_distinct_free_uniform():
    points = jnp.array([[0, 0], [0, 1], [0, 2], [0, 3], [0, 4], [9, 9]])
    valid = jnp.array([True, True, True, True, True, False])
    occupied = jnp.zeros((10, 10), bool).at[0, 4].set(True)
    keys = jax.random.split(jax.random.key(0), 800)
    out = jax.jit(jax.vmap(lambda k: grid.sample_spawn_positions(k, points, valid, 2, occupied)))(
        keys
    )
    out = np.asarray(out)
    assert out.shape == (800, 2, 2)
    assert (out[:, 0] != out[:, 1]).any(axis=-1).all()  # distinct
    assert (out[..., 0] == 0).all() and (out[..., 1] <= 3).all()  # valid and free only
    counts = np.bincount(out[:, 0, 1], minlength=4)  # agent 0's point: uniform over 4
    assert (counts > 140).all(), counts


@pytest.mark.slow
def test_respawn_positions():
    points = jnp.array([[0, 0], [0, 1], [0, 2]])
    valid = jnp.ones(3, bool)
    pos = jnp.array([[0, 1], [3, 3], [4, 4]])
    respawn = jnp.array([False, True, True])
    for seed in range(10):
        new, moved = _respawn_positions(jax.random.key(seed), pos, respawn, points, valid)
        new = np.asarray(new)
        assert _np(moved) == [False, True, True]
        assert new[0].tolist() == [0, 1]  # the staying agent keeps its cell...
        assert sorted(map(tuple, new[1:])) == [(0, 0), (0, 2)]  # ...which no one else takes
    # not enough free points: the last respawner stays where it was and is reported
    new, moved = _respawn_positions(
        jax.random.key(0), pos, respawn, points, valid, jnp.zeros((5, 5), bool).at[0, 0].set(True)
    )
    assert _np(moved) == [False, True, False] and _np(new[1]) == [0, 2] and _np(new[2]) == [4, 4]
