"""Run folders and their checkpoints: the layout on disk, and runner states serialised bit-exactly.

This module sits below both ``dilemmax.train`` (which writes run folders) and
:mod:`dilemmax.agents.trained` (which loads a policy out of one), so neither imports the other.

A run folder holds::

    config.json          the TrainConfig (what `--resume` and `dilemmax evaluate` rebuild from)
    metrics.jsonl        one record per chunk of `log_every` updates
    checkpoints/         ckpt_<chunk>.msgpack, the newest `keep_checkpoints`
    curve.png            learning curves drawn from metrics.jsonl
    eval.json            written by `dilemmax evaluate`

Checkpoints are a runner state serialised with flax.serialization (msgpack), restored
bit-exactly: msgpack stores every array's raw bytes, so a restored state equals the saved one bit
for bit and a resumed run continues exactly where it stopped. Typed PRNG keys
(``jax.random.key``) are stored as their key data and rewrapped from the template on restore.
Files are written to a temporary name, flushed to disk and renamed, so a crash mid-write never
leaves a truncated checkpoint behind.

A checkpoint file holds ``{"runner_state": <state dict>, "chunk": int, "update": int, "sha256":
str}``; code that only needs the parameters reads it with :func:`read_raw` (no template). The
checksum covers every leaf (its path, dtype, shape and bytes) and the metadata, so a flipped bit,
a truncated or a foreign file is refused on restore with :class:`CheckpointError` naming the
file, and :func:`restore_latest_good` falls back to the previous good checkpoint. Files written
before checksums existed (no ``sha256`` key) still restore.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

from dilemmax.errors import UsageError

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
CURVE_FILE = "curve.png"
CHECKPOINT_DIR = "checkpoints"
_NAME = re.compile(r"^ckpt_(\d+)\.msgpack$")


def _is_key(x) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def _plain(tree: Any) -> Any:
    """``tree`` with typed keys replaced by their uint32 key data."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


class CheckpointError(UsageError, ValueError):
    """A checkpoint file that cannot be restored (unreadable, damaged or of another run)."""


_META_KEYS = ("chunk", "update")


def digest(state: Any, meta: Mapping[str, int]) -> str:
    """sha256 over every leaf of a state dict (path, dtype, shape, bytes) and the metadata."""
    h = hashlib.sha256()

    def visit(node, path: str) -> None:
        if isinstance(node, Mapping):
            for key in sorted(node, key=str):
                visit(node[key], f"{path}/{key}")
            return
        arr = np.ascontiguousarray(np.asarray(node))
        h.update(f"{path}|{arr.dtype.str}|{arr.shape}|".encode())
        h.update(arr.tobytes())

    visit(state, "")
    for key in sorted(meta):
        h.update(f"#{key}={int(meta[key])}".encode())
    return h.hexdigest()


def to_bytes(tree: Any, **meta) -> bytes:
    """Serialises ``tree`` (and integer metadata) to msgpack bytes, with its checksum."""
    state = serialization.to_state_dict(jax.device_get(_plain(tree)))
    state = jax.tree.map(np.asarray, state)
    meta = {k: int(v) for k, v in meta.items()}
    return serialization.msgpack_serialize(
        {"runner_state": state, **meta, "sha256": digest(state, meta)}
    )


def _load_verified(data: bytes, where: str) -> tuple[dict, dict]:
    """(state dict, metadata) of checkpoint bytes, checksum verified; else CheckpointError."""
    try:
        raw = serialization.msgpack_restore(data)
    except Exception as err:  # noqa: BLE001 - any decoding failure means a damaged file
        raise CheckpointError(
            f"{where}: not a readable checkpoint ({type(err).__name__})"
        ) from None
    if not isinstance(raw, dict) or not isinstance(raw.get("runner_state"), dict):
        raise CheckpointError(f"{where}: not a dilemmax checkpoint (no runner_state)")
    expected = raw.pop("sha256", None)
    state = raw.pop("runner_state")
    unknown = sorted(set(raw) - set(_META_KEYS), key=str)
    if unknown:
        raise CheckpointError(f"{where}: unexpected entries {unknown} (damaged?)")
    try:
        meta = {k: int(v) for k, v in raw.items()}
    except (TypeError, ValueError):
        raise CheckpointError(f"{where}: damaged metadata") from None
    if expected is not None:
        if isinstance(expected, bytes):
            expected = expected.decode("ascii", "replace")
        try:
            actual = digest(state, meta)
        except Exception:  # noqa: BLE001 - a leaf msgpack could not rebuild as an array
            raise CheckpointError(f"{where}: damaged contents") from None
        if actual != expected:
            raise CheckpointError(f"{where}: checksum mismatch (the file was changed or damaged)")
    return state, meta


def from_bytes(template: Any, data: bytes, where: str = "checkpoint") -> tuple[Any, dict]:
    """(tree shaped like ``template``, metadata) from ``to_bytes`` output.

    Raises :class:`CheckpointError` (naming ``where``) when the bytes are unreadable, fail their
    checksum or do not fit the template."""
    state, meta = _load_verified(data, where)
    if getattr(template, "memory", None) == {}:
        # Feed-forward checkpoints from before recurrent training lack the (empty) memory field.
        state.setdefault("memory", {})
    return fit(template, state, where), meta


def fit(template: Any, state: Any, where: str = "checkpoint") -> Any:
    """The state dict ``state`` (a checkpoint's, or a part of one) as a tree shaped like
    ``template`` (arrays, or ``jax.ShapeDtypeStruct`` from ``jax.eval_shape``): the one check
    that a checkpoint belongs to the network or run it is loaded into. Raises
    :class:`CheckpointError` naming ``where`` and the first part that does not fit."""
    try:
        restored = serialization.from_state_dict(_plain(template), state)
    except Exception as err:  # noqa: BLE001 - structure of another run or a damaged tree
        raise CheckpointError(f"{where}: does not fit this run ({err})") from None

    def rebuild(t, r):
        if _is_key(t):
            return jax.random.wrap_key_data(jnp.asarray(r), impl=jax.random.key_impl(t))
        r = np.asarray(r)
        if r.dtype != np.dtype(t.dtype) or r.shape != tuple(t.shape):
            raise CheckpointError(
                f"{where}: leaf {r.dtype}{r.shape} does not fit this run ({t.dtype}{t.shape})"
            )
        return jnp.asarray(r)

    return jax.tree.map(rebuild, template, restored)


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


def find_checkpoint(path: str | Path) -> tuple[Path, Path]:
    """(checkpoint file, run folder) from a run folder (its newest checkpoint) or a file."""
    path = Path(path)
    if path.is_file():
        return path, path.parent.parent
    newest = latest_checkpoint(path)
    if newest is None:
        raise FileNotFoundError(f"no checkpoint under {path}")
    return newest, path


def save(run_dir: str | Path, tree: Any, chunk: int, update: int, keep: int = 3) -> Path:
    """Writes checkpoint ``chunk`` atomically (temporary file, fsync, rename) and keeps only
    the ``keep`` newest."""
    path = checkpoint_path(run_dir, chunk)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = to_bytes(tree, chunk=chunk, update=update)
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _sync_dir(path.parent)
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    return path


def _sync_dir(folder: Path) -> None:
    """Makes a rename durable (best effort: not every platform opens directories)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def restore(path: str | Path, template: Any) -> tuple[Any, dict]:
    """(state, metadata) of one checkpoint file; :class:`CheckpointError` if it is bad."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise CheckpointError(f"{path}: cannot be read ({err.strerror})") from None
    return from_bytes(template, data, str(path))


def restore_latest_good(
    run_dir: str | Path, template: Any, warn=print
) -> tuple[Any, dict, Path] | None:
    """The newest checkpoint of ``run_dir`` that restores: ``(state, metadata, path)``.

    A damaged newer checkpoint is named through ``warn`` and skipped; None when there is no
    checkpoint at all. Raises :class:`CheckpointError` when every checkpoint is damaged.
    """
    found = list_checkpoints(run_dir)
    problems = []
    for path in reversed(found):
        try:
            state, meta = restore(path, template)
        except CheckpointError as err:
            problems.append(str(err))
            warn(f"skipping damaged checkpoint {err}")
            continue
        return state, meta, path
    if problems:
        raise CheckpointError(f"no usable checkpoint in {run_dir}: " + "; ".join(problems))
    return None


def read_raw(path: str | Path) -> dict:
    """The checkpoint as nested dicts of numpy arrays (no template needed), checksum verified."""
    path = Path(path)
    state, meta = _load_verified(path.read_bytes(), str(path))
    return {"runner_state": state, **meta}
