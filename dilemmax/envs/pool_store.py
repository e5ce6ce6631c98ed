"""Built pools kept on disk: a process that makes a grid game reads its layouts and rules back
instead of generating them again.

Generating OpenCleanup's layout pool is a vmapped program run over thousands of attempts: 3 s of
``dilemmax.make("open_cleanup")`` with a warm compilation cache and about 15 s without one, paid
by every process (each command, notebook kernel and training process). A stored pool is read in
milliseconds.

- **What a stored pool depends on is its key**: the builder's name and arguments, a digest of
  every file of the installed dilemmax package but its tests, the versions of jax, jaxlib and
  numpy, the default backend and ``XLA_FLAGS``. Any edit to the package, an upgrade or another
  backend builds the pool again under a new key, so a stale pool is never read.
- **Where**: ``$DILEMMAX_POOL_CACHE``, else ``pools`` in :func:`dilemmax.cache_home.cache_home`;
  ``DILEMMAX_POOL_CACHE=off`` builds every time and stores nothing.
- **A file is data, never code**: an ``.npz`` of the pool's arrays (read with
  ``allow_pickle=False``) and a header naming the pytree structure, each array's shape and dtype.
  A file that does not read back as the structure the caller expects (truncated, another layout,
  garbage) is built again and replaced, with a warning that names it.
- **Writes are atomic** (a temporary file in the same folder, then ``os.replace``), so processes
  that build the same pool at once each leave a whole file, and a folder that cannot be written
  costs a warning, never the run.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import json
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np

from dilemmax.cache_home import cache_home

ENV_VAR = "DILEMMAX_POOL_CACHE"
OFF = "off"
FORMAT = 1  # bumped when the file layout changes, so an old file is never misread
HEADER = "header.json"  # the npz member holding the structure and the arrays' shapes and dtypes
PACKAGE = Path(__file__).resolve().parents[1]  # the dilemmax package folder

T = TypeVar("T")


def stored(name: str, arguments: tuple, build: Callable[[], T], like: T) -> T:
    """``build()``, read from the pool store when an entry of ``name(*arguments)`` is there,
    else built and stored.

    Args:
        name: the builder, unique in the package (its module and name).
        arguments: its arguments (ints, floats, strings, bools): part of the key.
        build: computes the pool: a pytree of arrays.
        like: a pytree of the same structure (any leaves: :func:`skeleton`); a file whose
            structure differs is not read.

    Returns:
        The pytree ``build()`` returns, its leaves as JAX arrays on the default device.
    """
    folder = store_folder()
    if folder is None:
        return build()
    path = folder / f"{entry_key(name, arguments)}.npz"
    treedef = jax.tree.structure(like)
    if path.exists():
        try:
            return _read(path, treedef)
        except Exception as err:  # noqa: BLE001 - whatever is wrong with the file, build it again
            warnings.warn(
                f"pool store: {path} does not read back ({err}); building it again", stacklevel=2
            )
    pool = build()
    try:
        _write(path, pool)
    except OSError as err:
        warnings.warn(
            f"pool store: could not write {path} ({err.strerror or err}); not stored", stacklevel=2
        )
    return pool


def stored_as(like: Any) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorates a pool builder so that it goes through :func:`stored`, under its module and
    name, with every argument in the key (defaults filled in, so ``f(1)`` and ``f(1, 2)`` with a
    default of 2 are one entry); ``like`` as in :func:`stored`."""

    def decorate(build: Callable[..., T]) -> Callable[..., T]:
        name = f"{build.__module__}.{build.__qualname__}"
        signature = inspect.signature(build)

        @functools.wraps(build)
        def stored_build(*positional, **named):
            bound = signature.bind(*positional, **named)
            bound.apply_defaults()
            arguments = tuple(bound.arguments.values())
            return stored(name, arguments, lambda: build(*bound.args, **bound.kwargs), like)

        return stored_build

    return decorate


def store_folder() -> Path | None:
    """The folder pools are stored in, or None when ``DILEMMAX_POOL_CACHE=off``."""
    given = os.environ.get(ENV_VAR, "")
    if given.strip().lower() == OFF:
        return None
    return Path(given).expanduser() if given else cache_home() / "pools"


def entry_key(name: str, arguments: tuple) -> str:
    """A hex digest of the builder, its arguments and everything else a pool depends on."""
    parts = {
        "format": FORMAT,
        "name": name,
        "arguments": [repr(a) for a in arguments],
        "package": package_digest(),
        "versions": [jax.__version__, jaxlib.__version__, np.__version__],
        "backend": jax.default_backend(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


@functools.cache
def package_digest() -> str:
    """sha256 of every file of the dilemmax package but its tests (names and bytes), once per
    process: about 30 ms for the whole package (16 MB)."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE.rglob("*")):
        relative = path.relative_to(PACKAGE)
        if not path.is_file() or "__pycache__" in relative.parts or _is_test_file(path.name):
            continue
        digest.update(relative.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _is_test_file(filename: str) -> bool:
    return filename.startswith("test_") or filename == "conftest.py"


def skeleton(cls: type) -> Any:
    """An instance of the pytree dataclass ``cls`` with a placeholder in every field: the
    structure :func:`stored` checks a file against."""
    return cls(**{field.name: 0 for field in dataclasses.fields(cls)})


def _read(path: Path, treedef) -> Any:
    """The pytree stored at ``path``; ValueError naming the mismatch when it is not ``treedef``'s
    structure or an array is not what the header says."""
    # Opened here so that the file is closed whatever np.load raises on a broken one.
    with open(path, "rb") as file, np.load(file, allow_pickle=False) as data:
        header = json.loads(bytes(data[HEADER]).decode())
        if header.get("format") != FORMAT or header.get("structure") != str(treedef):
            raise ValueError("another format or structure than this version's")
        leaves = []
        for i, (shape, dtype) in enumerate(zip(header["shapes"], header["dtypes"], strict=True)):
            array = data[f"leaf_{i}"]
            if list(array.shape) != shape or str(array.dtype) != dtype:
                raise ValueError(
                    f"array {i} is {array.dtype}{list(array.shape)}, not {dtype}{shape}"
                )
            leaves.append(jnp.asarray(array))
    if len(leaves) != treedef.num_leaves:
        raise ValueError(f"{len(leaves)} arrays, the structure has {treedef.num_leaves}")
    return jax.tree.unflatten(treedef, leaves)


def _write(path: Path, pool: Any) -> None:
    """Stores ``pool`` at ``path`` atomically (a whole file or none)."""
    leaves, treedef = jax.tree.flatten(pool)
    arrays = [np.asarray(jax.device_get(x)) for x in leaves]
    header = {
        "format": FORMAT,
        "structure": str(treedef),
        "shapes": [list(a.shape) for a in arrays],
        "dtypes": [str(a.dtype) for a in arrays],
    }
    members = {f"leaf_{i}": a for i, a in enumerate(arrays)}
    members[HEADER] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".tmp", delete=False) as tmp:
        try:
            np.savez(tmp, **members)
            tmp.close()
            os.replace(tmp.name, path)
        except OSError:
            Path(tmp.name).unlink(missing_ok=True)
            raise
