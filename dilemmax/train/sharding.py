"""Data parallelism: the env batch split over the local devices with ``jax.sharding``.

Every env-batched leaf of a runner state (env states and observations, laid out
``[seeds, E, ...]``) is sharded along E over a one-axis mesh named ``"data"``; parameters,
optimiser state and keys are replicated. The jitted program is the same as on one device: XLA's
SPMD partitioner splits the env steps and rollouts, and the gradient means over the minibatch
become cross-device reductions. Multi-host runs use the same mesh after
``jax.distributed.initialize()``.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

DATA_AXIS = "data"


def data_mesh(option: str | bool, num_envs: int) -> Mesh | None:
    """A mesh over the local devices, or None when sharding is off or pointless.

    Args:
        option: "auto" (shard when there is more than one device), "on"/True, "off"/False.
        num_envs: the env batch, which must divide evenly over the devices.
    """
    devices = jax.local_devices()
    if option in ("off", False) or (option == "auto" and len(devices) < 2):
        return None
    if num_envs % len(devices):
        if option == "auto":
            return None
        raise ValueError(f"num_envs={num_envs} does not split over {len(devices)} devices")
    return Mesh(np.asarray(devices), (DATA_AXIS,))


def runner_shardings(state: Any, mesh: Mesh) -> Any:
    """A pytree of shardings for a seed-batched runner state (leaves ``[S, ...]``)."""
    replicated = NamedSharding(mesh, PartitionSpec())
    by_env = NamedSharding(mesh, PartitionSpec(None, DATA_AXIS))
    batched = {"env_state", "obs"}
    return state.replace(
        **{
            name: jax.tree.map(
                lambda _, name=name: by_env if name in batched else replicated,
                getattr(state, name),
            )
            for name in ("params", "opt_state", "env_state", "obs", "key", "update", "env_config")
        }
    )


def place(state: Any, mesh: Mesh | None) -> Any:
    """Puts ``state`` on the mesh's devices with :func:`runner_shardings` (no-op without mesh)."""
    if mesh is None:
        return state
    return jax.device_put(state, runner_shardings(state, mesh))
