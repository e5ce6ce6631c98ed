"""Checkpoints: a runner state serialised with flax.serialization (msgpack), restored bit-exactly.

msgpack stores every array's raw bytes, so a restored state equals the saved one bit for bit and
a resumed run continues exactly where it stopped. Typed PRNG keys (``jax.random.key``) are stored
as their key data and rewrapped from the template on restore. Files are written to a temporary
name and renamed, so a crash mid-write never leaves a truncated checkpoint behind.

A checkpoint file holds ``{"runner_state": <state dict>, "chunk": int, "update": int}``; code
that only needs the parameters (``dilemmax.agents.trained``) reads it with
``flax.serialization.msgpack_restore`` and no template.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

CHECKPOINT_DIR = "checkpoints"
_NAME = re.compile(r"^ckpt_(\d+)\.msgpack$")


def _is_key(x) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def _plain(tree: Any) -> Any:
    """``tree`` with typed keys replaced by their uint32 key data."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def to_bytes(tree: Any, **meta) -> bytes:
    """Serialises ``tree`` (and integer metadata) to msgpack bytes."""
    state = serialization.to_state_dict(jax.device_get(_plain(tree)))
    return serialization.msgpack_serialize({"runner_state": state, **meta})


def from_bytes(template: Any, data: bytes) -> tuple[Any, dict]:
    """(tree shaped like ``template``, metadata) from ``to_bytes`` output."""
    raw = serialization.msgpack_restore(data)
    state = raw.pop("runner_state")
    if isinstance(state, dict) and getattr(template, "memory", None) == {}:
        # Feed-forward checkpoints from before recurrent training lack the (empty) memory field.
        state.setdefault("memory", {})
    restored = serialization.from_state_dict(_plain(template), state)

    def rebuild(t, r):
        if _is_key(t):
            return jax.random.wrap_key_data(jnp.asarray(r), impl=jax.random.key_impl(t))
        r = np.asarray(r)
        if r.dtype != np.dtype(t.dtype) or r.shape != tuple(t.shape):
            raise ValueError(f"checkpoint leaf {r.dtype}{r.shape} != template {t.dtype}{t.shape}")
        return jnp.asarray(r)

    return jax.tree.map(rebuild, template, restored), {k: int(v) for k, v in raw.items()}


def checkpoint_path(run_dir: str | Path, chunk: int) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / f"ckpt_{chunk:06d}.msgpack"


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Checkpoints of a run folder, oldest first."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def save(run_dir: str | Path, tree: Any, chunk: int, update: int, keep: int = 3) -> Path:
    """Writes checkpoint ``chunk`` atomically and keeps only the ``keep`` newest."""
    path = checkpoint_path(run_dir, chunk)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(to_bytes(tree, chunk=chunk, update=update))
    os.replace(tmp, path)
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    return path


def restore(path: str | Path, template: Any) -> tuple[Any, dict]:
    return from_bytes(template, Path(path).read_bytes())


def read_raw(path: str | Path) -> dict:
    """The checkpoint as nested dicts of numpy arrays (no template needed)."""
    return serialization.msgpack_restore(Path(path).read_bytes())
