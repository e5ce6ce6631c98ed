"""Warm starts: a fresh run's parameters taken from another run's checkpoint (a curriculum)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.agents import checkpoint
from dilemmax.agents.checkpoint import find_checkpoint
from dilemmax.runlock import RunFolderError


def warm_start_params(params: Any, source: str | Path, num_seeds: int) -> Any:
    """``params`` (seeds first) replaced by those of ``source``'s newest checkpoint (a run
    folder) or of a checkpoint, either format; a source of one seed seeds every seed.
    :class:`RunFolderError` names what does not match."""
    path = Path(source)
    try:
        ckpt, _ = find_checkpoint(path)
        raw = checkpoint.read_raw(ckpt)
    except (FileNotFoundError, OSError, checkpoint.CheckpointError) as err:
        reason = f"no usable checkpoint ({err})"
        raise RunFolderError(f"init_from={str(source)!r}: {reason}") from None
    loaded = raw["runner_state"]["params"]
    ours = jax.tree_util.tree_flatten_with_path(params)[0]
    theirs = dict(jax.tree_util.tree_flatten_with_path(loaded)[0])
    leaves = []
    for where, mine in ours:
        name = jax.tree_util.keystr(where)
        other = theirs.get(where)
        if other is None:
            raise RunFolderError(f"init_from={str(source)!r}: it has no parameter {name}")
        other = np.asarray(other)
        if other.shape[1:] != mine.shape[1:] or other.shape[0] not in (1, num_seeds):
            raise RunFolderError(
                f"init_from={str(source)!r}: parameter {name} has shape {other.shape}, this "
                f"run's is {tuple(mine.shape)} (seeds first): the networks differ"
            )
        leaves.append(jnp.broadcast_to(jnp.asarray(other, mine.dtype), mine.shape))
    if len(theirs) != len(ours):
        raise RunFolderError(f"init_from={str(source)!r}: its network has other parameters")
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(params), leaves)
