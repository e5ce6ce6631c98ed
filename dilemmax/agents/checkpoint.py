"""Run folders and their checkpoints: the layout on disk, and runner states serialised bit-exactly.

This module sits below both ``dilemmax.train`` (which writes run folders) and
:mod:`dilemmax.agents.trained` (which loads a policy out of one), so neither imports the other.

A run folder holds::

    config.json          the TrainConfig (what `--resume` and `dilemmax evaluate` rebuild from)
    metrics.jsonl        one record per chunk of `log_every` updates
    checkpoints/         ckpt_<chunk>.msgpack (one process) or ckpt_<chunk>/ (orbax, written
                         by every process of a multi-host run, below), the newest `keep_checkpoints`
    curve.png            learning curves drawn from metrics.jsonl
    eval.json            written by `dilemmax evaluate`

A run folder may hold both formats (a run saved on two processes and resumed on one): the
listing below orders them by chunk, and every reader (resume, evaluate, trained policies, warm
starts) takes either.

Msgpack checkpoints are a runner state serialised with flax.serialization, restored
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

Orbax checkpoints (``ckpt_<chunk>/``, the format of runs on several processes, or asked for with
``checkpointer=orbax``) hold the same state, flattened to ``{"params.actor...": array}``, as
orbax's composite of a ``state`` item (each process writes the shards it holds; orbax writes into
a temporary folder and renames it when every process is done, so a crash mid-save leaves no
checkpoint) and a ``meta`` item (JSON: chunk, update, every leaf's dtype, shape and hash, the
hash of :mod:`dilemmax.agents.hashing`, which no split over devices or processes changes). A
restore checks the checkpoint's leaves against the run's (a foreign run is refused by name),
reads each array straight into this run's sharding (so a checkpoint saved on two processes
restores on one and back) and compares the hashes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization, traverse_util

from dilemmax.agents.hashing import leaf_hashes
from dilemmax.envs.option_spec import INT32_MAX
from dilemmax.errors import UsageError

CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.jsonl"
CURVE_FILE = "curve.png"
CHECKPOINT_DIR = "checkpoints"
_NAME = re.compile(r"^ckpt_(\d+)\.msgpack$")
_ORBAX_NAME = re.compile(r"^ckpt_(\d+)$")  # orbax's own temporary folders never match
ORBAX_FORMAT = "dilemmax-orbax/1"


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


def orbax_path(run_dir: str | Path, chunk: int) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / f"ckpt_{chunk:06d}"


def is_orbax(path: str | Path) -> bool:
    """Whether ``path`` is an orbax checkpoint folder (``ckpt_<chunk>/``)."""
    path = Path(path)
    return path.is_dir() and _ORBAX_NAME.match(path.name) is not None


def _chunk_of(path: Path) -> int | None:
    m = _NAME.match(path.name) or (_ORBAX_NAME.match(path.name) if path.is_dir() else None)
    return int(m.group(1)) if m else None


def list_checkpoints(run_dir: str | Path) -> list[Path]:
    """Checkpoints of a run folder (msgpack files and orbax folders), oldest first."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    if not folder.is_dir():
        return []
    found = [(chunk, p.name, p) for p in folder.iterdir() if (chunk := _chunk_of(p)) is not None]
    return [p for *_, p in sorted(found)]


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def find_checkpoint(path: str | Path) -> tuple[Path, Path]:
    """(checkpoint, run folder) from a run folder (its newest checkpoint), a checkpoint file or
    an orbax checkpoint folder."""
    path = Path(path)
    if path.is_file() or (is_orbax(path) and path.parent.name == CHECKPOINT_DIR):
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
    prune(run_dir, keep)
    return path


def prune(run_dir: str | Path, keep: int) -> None:
    """Removes all but the ``keep`` newest checkpoints (of either format)."""
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        if old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink(missing_ok=True)


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


def restore(path: str | Path, template: Any, shardings: Any = None) -> tuple[Any, dict]:
    """(state, metadata) of one checkpoint (file or orbax folder); :class:`CheckpointError` if
    it is bad. ``shardings`` (a tree like ``template``, orbax checkpoints only): where each
    restored array goes (default: this process's first device)."""
    path = Path(path)
    if is_orbax(path):
        return restore_orbax(path, template, shardings)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise CheckpointError(f"{path}: cannot be read ({err.strerror})") from None
    return from_bytes(template, data, str(path))


def restore_latest_good(
    run_dir: str | Path, template: Any, warn=print, shardings: Any = None, agree=None
) -> tuple[Any, dict, Path] | None:
    """The newest checkpoint of ``run_dir`` that restores: ``(state, metadata, path)``.

    A damaged newer checkpoint is named through ``warn`` and skipped; None when there is no
    checkpoint at all. Raises :class:`CheckpointError` when every checkpoint is damaged.
    ``agree`` (several processes): turns this process's "restored" into all processes' verdict,
    so that every process falls back past a checkpoint any of them could not restore.
    """
    found = list_checkpoints(run_dir)
    problems = []
    for path in reversed(found):
        error = None
        try:
            state, meta = restore(path, template, shardings)
        except CheckpointError as err:
            error = err
        if agree is not None and not agree(error is None):
            error = error or CheckpointError(f"{path}: another process could not restore it")
        if error is not None:
            problems.append(str(error))
            warn(f"skipping damaged checkpoint {error}")
            continue
        return state, meta, path
    if problems:
        raise CheckpointError(f"no usable checkpoint in {run_dir}: " + "; ".join(problems))
    return None


def read_raw(path: str | Path) -> dict:
    """The checkpoint as nested dicts of numpy arrays (no template needed), checksum verified."""
    path = Path(path)
    if is_orbax(path):
        return read_raw_orbax(path)
    state, meta = _load_verified(path.read_bytes(), str(path))
    return {"runner_state": state, **meta}


# ----------------------------------------------------------------------------- orbax format
_SEP = "."


def _flat(tree: Any, keep_empty: bool = False) -> tuple[dict, Any]:
    """(``{"a.b": leaf}``, the state dict) of a tree, typed keys as their key data; with
    ``keep_empty``, empty dicts (a feed-forward run's memory) stay as markers."""
    state = serialization.to_state_dict(_plain(tree))
    return traverse_util.flatten_dict(state, keep_empty_nodes=keep_empty, sep=_SEP), state


def _unflat(flat: dict) -> dict:
    return traverse_util.unflatten_dict(flat, sep=_SEP)


def _orbax():
    # orbax-checkpoint is the optional `distributed` extra: imported only where a run uses it.
    try:
        import orbax.checkpoint as ocp  # noqa: PLC0415
    except ImportError as err:
        raise UsageError(
            "orbax checkpoints need orbax-checkpoint: pip install 'dilemmax[distributed]'"
        ) from err
    return ocp


def orbax_checkpointer(asynchronous: bool = False):
    """An orbax checkpointer of the composite this module writes (async: saves return once
    the arrays are copied off the devices and finish in the background)."""
    ocp = _orbax()
    handler = ocp.CompositeCheckpointHandler()
    return ocp.AsyncCheckpointer(handler) if asynchronous else ocp.Checkpointer(handler)


def save_orbax(run_dir, tree: Any, chunk: int, update: int, checkpointer=None) -> Path:
    """Starts writing checkpoint ``chunk`` as an orbax folder (every process calls it with the
    same global state). With an async ``checkpointer`` it returns before the files are
    complete: ``checkpointer.wait_until_finished()`` before relying on them, then
    :func:`prune`."""
    ocp = _orbax()
    flat, _ = _flat(tree)
    hashes = leaf_hashes(flat)
    leaves = {
        k: {"dtype": jnp.dtype(v.dtype).name, "shape": list(v.shape), "hash": hashes[k]}
        for k, v in flat.items()
    }
    meta = {"format": ORBAX_FORMAT, "chunk": int(chunk), "update": int(update), "leaves": leaves}
    path = orbax_path(run_dir, chunk)
    checkpointer = checkpointer or orbax_checkpointer()
    args = ocp.args.Composite(state=ocp.args.StandardSave(flat), meta=ocp.args.JsonSave(meta))
    checkpointer.save(path, args=args, force=True)  # a damaged one skipped on resume is replaced
    return path


def _orbax_meta(path: Path) -> dict:
    """The checkpoint's meta item, read as JSON and checked entry by entry."""
    try:
        meta = json.loads((path / "meta" / "metadata").read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path}: no readable metadata ({type(err).__name__})") from None
    meta = meta if isinstance(meta, dict) else {}
    leaves = meta.get("leaves")
    ints = all(type(meta.get(k)) is int for k in _META_KEYS)
    if meta.get("format") != ORBAX_FORMAT or not isinstance(leaves, dict) or not ints:
        raise CheckpointError(f"{path}: not a dilemmax orbax checkpoint (damaged metadata?)")
    for name, leaf in leaves.items():
        ok = isinstance(leaf, dict) and isinstance(leaf.get("hash"), str)
        try:  # sizes bounded: read_raw allocates what the metadata claims
            ok = ok and all(type(n) is int and 0 <= n <= INT32_MAX for n in leaf["shape"])
            ok = ok and math.prod(leaf["shape"]) < 2**33 and jnp.dtype(leaf["dtype"]) is not None
        except (TypeError, ValueError, KeyError):
            ok = False
        if not ok:
            raise CheckpointError(f"{path}: damaged metadata of leaf {name}")
    return meta


def _read_orbax(path: Path, meta: dict, targets: dict) -> dict:
    """The arrays of the checkpoint's state item, each read into its target's sharding, their
    hashes compared with the metadata's."""
    ocp = _orbax()
    try:
        restored = orbax_checkpointer().restore(
            path, args=ocp.args.Composite(state=ocp.args.StandardRestore(targets))
        )["state"]
    except Exception as err:  # noqa: BLE001 - any read failure means a damaged checkpoint
        raise CheckpointError(f"{path}: not a readable checkpoint ({type(err).__name__})") from None
    if set(restored) != set(targets):
        raise CheckpointError(f"{path}: damaged contents (other arrays than its metadata lists)")
    for name, actual in leaf_hashes(restored).items():
        if actual != meta["leaves"][name]["hash"]:
            raise CheckpointError(
                f"{path}: checksum mismatch in {name} (the checkpoint was changed or damaged)"
            )
    return restored


def _target(shape, dtype, sharding=None) -> jax.ShapeDtypeStruct:
    """What orbax reads an array into (default: this process's first device)."""
    sharding = sharding or jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    return jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype), sharding=sharding)


def restore_orbax(path: Path, template: Any, shardings: Any = None) -> tuple[Any, dict]:
    """(state shaped like ``template``, metadata) of an orbax checkpoint, each array read into
    its sharding in ``shardings`` (a tree like ``template``; default: the first local device).
    A checkpoint of another run (other leaves, shapes or dtypes) is refused naming the leaf."""
    meta = _orbax_meta(path)
    wanted, _ = _flat(template)
    placed = _flat(shardings)[0] if shardings is not None else {}
    saved = meta["leaves"]
    for name in sorted(set(wanted) | set(saved)):
        if name not in saved or name not in wanted:
            where = "this run" if name in wanted else "the checkpoint"
            raise CheckpointError(f"{path}: does not fit this run (only {where} has {name})")
        t, s = wanted[name], saved[name]
        if (jnp.dtype(s["dtype"]), tuple(s["shape"])) != (jnp.dtype(t.dtype), tuple(t.shape)):
            raise CheckpointError(
                f"{path}: leaf {name} {s['dtype']}{tuple(s['shape'])} does not fit "
                f"this run ({t.dtype}{tuple(t.shape)})"
            )
    targets = {k: _target(t.shape, t.dtype, placed.get(k)) for k, t in wanted.items()}
    restored = _read_orbax(path, meta, targets)
    state = _unflat({**_flat(template, keep_empty=True)[0], **restored})
    tree = serialization.from_state_dict(_plain(template), state)
    rewrap = lambda t, r: (
        jax.random.wrap_key_data(r, impl=jax.random.key_impl(t)) if _is_key(t) else r
    )
    return jax.tree.map(rewrap, template, tree), {k: meta[k] for k in _META_KEYS}


def read_raw_orbax(path: Path) -> dict:
    """An orbax checkpoint as :func:`read_raw` gives a msgpack one (nested dicts of numpy
    arrays, hashes verified), without a template: its metadata says every leaf's shape."""
    meta = _orbax_meta(path)
    targets = {k: _target(v["shape"], v["dtype"]) for k, v in meta["leaves"].items()}
    restored = _read_orbax(path, meta, targets)
    state = _unflat({k: np.asarray(v) for k, v in restored.items()})
    return {"runner_state": state, **{k: meta[k] for k in _META_KEYS}}
