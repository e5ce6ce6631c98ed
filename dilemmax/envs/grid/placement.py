"""Agents on the grid: painting them into layers, occupancy, and (re)spawning on free cells."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dilemmax.envs.grid.core import as_shape


def paint_agents(
    layer: jax.Array,
    positions: jax.Array,
    values: jax.Array,
    active: jax.Array | None = None,
) -> jax.Array:
    """``layer`` with ``values[i]`` written on agent i's cell (inactive agents skipped).

    Args:
        layer: [H, W, *C].
        positions: int32[A, 2].
        values: [A, *C] or a scalar, cast to ``layer.dtype``.
        active: optional bool[A].

    Returns:
        [H, W, *C].
    """
    height, width = layer.shape[:2]
    flat_index = positions[:, 0] * width + positions[:, 1]
    if active is not None:
        flat_index = jnp.where(active, flat_index, height * width)  # dropped below
    flat = layer.reshape((height * width,) + layer.shape[2:])
    values = jnp.broadcast_to(jnp.asarray(values, layer.dtype), flat_index.shape + layer.shape[2:])
    return flat.at[flat_index].set(values, mode="drop").reshape(layer.shape)


def agent_grid(
    positions: jax.Array,
    shape,
    fill: int = -1,
    active: jax.Array | None = None,
) -> jax.Array:
    """int32[H, W]: the index of the agent on each cell, ``fill`` where there is none.

    Args:
        positions: int32[A, 2].
        shape: static grid shape.
        fill: value of empty cells.
        active: optional bool[A]; inactive agents are left out.
    """
    height, width = as_shape(shape)
    grid = jnp.full((height, width), fill, jnp.int32)
    return paint_agents(grid, positions, jnp.arange(positions.shape[0], dtype=jnp.int32), active)


def occupancy(positions: jax.Array, shape, active: jax.Array | None = None) -> jax.Array:
    """bool[H, W]: True on cells with an (active) agent."""
    height, width = as_shape(shape)
    return paint_agents(jnp.zeros((height, width), bool), positions, True, active)


# --------------------------------------------------------------------------- spawning
def sample_spawn_positions(
    key: jax.Array,
    spawn_points: jax.Array,
    spawn_valid: jax.Array,
    num_agents: int,
    occupied: jax.Array | None = None,
) -> jax.Array:
    """Distinct free spawn points, a uniformly random subset in a uniformly random order.

    Needs at least ``num_agents`` spawn points that are valid and not occupied; if there are
    fewer, the surplus agents get unusable points (use :func:`respawn_positions`, which reports
    it, where that can happen).

    Args:
        key: PRNG key.
        spawn_points: int32[S, 2], padded lists allowed.
        spawn_valid: bool[S], False for padding.
        num_agents: static A <= S.
        occupied: optional bool[H, W]; spawn points on True cells are not used.

    Returns:
        int32[A, 2].
    """
    chosen, _ = _pick_free_spawns(key, spawn_points, spawn_valid, num_agents, occupied)
    return spawn_points[chosen]


def _pick_free_spawns(key, spawn_points, spawn_valid, count, occupied):
    """(int32[count] indices into spawn_points, bool[count] whether each pick is usable)."""
    free = spawn_valid
    if occupied is not None:
        free = free & ~occupied[spawn_points[:, 0], spawn_points[:, 1]]
    # Ranking i.i.d. uniform scores picks a uniform random subset in uniform random order;
    # unusable points rank below every usable one.
    scores = jax.random.uniform(key, spawn_valid.shape) + free.astype(jnp.float32) * 2.0
    _, chosen = jax.lax.top_k(scores, count)
    return chosen, free[chosen]


def respawn_positions(
    key: jax.Array,
    positions: jax.Array,
    respawn: jax.Array,
    spawn_points: jax.Array,
    spawn_valid: jax.Array,
    occupied: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Sends the agents flagged in ``respawn`` to distinct free spawn points.

    Cells of agents that stay put count as occupied; so do ``occupied`` cells. Respawning agents
    do not block spawn points with their old cells.

    Args:
        key: PRNG key.
        positions: int32[A, 2].
        respawn: bool[A].
        spawn_points: int32[S, 2], with S >= A.
        spawn_valid: bool[S].
        occupied: optional bool[H, W], extra cells to avoid.

    Returns:
        positions: int32[A, 2], new cells for respawned agents (unchanged for the others, and for
            a respawning agent that found no free point).
        moved: bool[A], True for agents that were actually relocated.
    """
    num_agents = positions.shape[0]
    staying = ~respawn
    # A spawn point is blocked when a staying agent stands on it or the caller marks it.
    on_point = jnp.all(spawn_points[:, None, :] == positions[None, :, :], axis=-1)  # [S, A]
    blocked = jnp.any(on_point & staying[None, :], axis=1)
    if occupied is not None:
        blocked = blocked | occupied[spawn_points[:, 0], spawn_points[:, 1]]
    chosen, usable = _pick_free_spawns(key, spawn_points, spawn_valid & ~blocked, num_agents, None)
    # The k-th respawning agent takes the k-th pick.
    rank = jnp.cumsum(respawn.astype(jnp.int32)) - 1
    pick = chosen[jnp.clip(rank, 0, num_agents - 1)]
    moved = respawn & usable[jnp.clip(rank, 0, num_agents - 1)]
    return jnp.where(moved[:, None], spawn_points[pick], positions), moved
