"""Data parallelism: the env batch split over every device of the run with ``jax.sharding``.

Every env-batched leaf of a runner state (env states and observations ``[seeds, E, ...]``, the
recurrent memories ``[seeds, L, E, ...]``) is sharded along E over a one-axis mesh named
``"data"``; parameters, optimiser state and keys are replicated. The mesh spans
``jax.devices()``: after :func:`dilemmax.train.distributed.join` that is every device of every
process, so each process steps the envs of its own devices and holds only their shards. The
jitted program is the same as on one device: XLA's SPMD partitioner splits the env steps and
rollouts, and the gradient means over each minibatch (whose envs come from every device) become
cross-device reductions, so every device applies the same update to its replica.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

DATA_AXIS = "data"

# Where the env axis is in a recurrent memory leaf of a seed-batched state: the networks'
# memories and previous inputs are [S, L, E, ...], the per-env flags [S, E].
_MEMORY_ENV_AXIS = {"actor": 2, "critic": 2, "prev_action": 2, "prev_reward": 2}


def data_mesh(option: str | bool, num_envs: int) -> Mesh | None:
    """A mesh over every device of the run, or None when sharding is off or pointless.

    Args:
        option: "auto" (shard when there is more than one device), "on"/True, "off"/False.
            On several processes the mesh is always made (each process holds only its
            devices' envs), and "off" is refused.
        num_envs: the env batch, which must divide evenly over the devices.
    """
    devices = jax.devices()
    many = jax.process_count() > 1
    if option in ("off", False):
        if many:
            raise ValueError("shard=off: a run on several processes shards its envs over them")
        return None
    if option == "auto" and len(devices) < 2:
        return None
    if num_envs % len(devices):
        if option == "auto" and not many:
            return None
        raise ValueError(
            f"num_envs={num_envs} does not split over the run's {len(devices)} devices"
            f"{f' ({jax.process_count()} processes)' if many else ''}: use a multiple of "
            f"{len(devices)}"
        )
    return Mesh(np.asarray(devices), (DATA_AXIS,))


def _along(mesh: Mesh, axis: int) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec(*([None] * axis), DATA_AXIS))


def runner_shardings(state: Any, mesh: Mesh) -> Any:
    """A pytree of shardings for a seed-batched runner state (leaves ``[S, ...]``)."""
    replicated = NamedSharding(mesh, PartitionSpec())
    fields = {name: replicated for name in ("params", "opt_state", "key", "update", "env_config")}
    fields.update(env_state=_along(mesh, 1), obs=_along(mesh, 1))
    out = {name: jax.tree.map(lambda _, s=s: s, getattr(state, name)) for name, s in fields.items()}
    out["memory"] = {
        name: _along(mesh, _MEMORY_ENV_AXIS.get(name, 1)) for name in getattr(state, "memory", {})
    }
    return state.replace(**out)


def place(state: Any, mesh: Mesh | None) -> Any:
    """Puts ``state`` (the same values on every process) on the mesh's devices with
    :func:`runner_shardings`, each process filling only its own shards (no-op without mesh)."""
    if mesh is None:
        return state
    return put_global(state, runner_shardings(state, mesh))


def put_global(tree: Any, shardings: Any) -> Any:
    """``tree`` (host values, identical on every process) as global arrays of ``shardings``."""

    def put(value, sharding):
        if isinstance(value, jax.Array) and value.is_fully_addressable:
            value = np.asarray(value)
        elif isinstance(value, jax.Array):
            return jax.device_put(value, sharding)  # already global: resharded by XLA
        host = np.asarray(value)
        return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

    return jax.tree.map(put, tree, shardings)
