"""Reading the ``.npz`` files the red-teaming commands are given, checked before any use.

A population or a reference file may come from anywhere: another version of the library, a
colleague's script, a download cut short, a text file given by mistake. :func:`read_npz` reads
every array of such a file or raises :class:`FileFormatError`; :class:`NpzChecks` then checks
each array the caller needs (present, of the right kind and shape, finite, indices in range).
Every message names the file and what was wrong, and the ``dilemmax`` command prints it as one
line with exit status 2 (a FileFormatError is a :class:`~dilemmax.errors.UsageError`).
"""

from __future__ import annotations

import tokenize
import zipfile
import zlib
from pathlib import Path

import numpy as np

from dilemmax.errors import UsageError

# The most a file may unpack to. The library's own files are a few megabytes; past this a file
# is not one of them, and unpacking it would only exhaust memory.
MAX_UNPACKED_BYTES = 1 << 30

# What numpy's and zipfile's readers raise on a damaged or foreign archive (numpy reads an
# array's header with Python's tokenizer, hence the TokenError and SyntaxError).
READ_ERRORS = (
    OSError,
    ValueError,
    EOFError,
    KeyError,
    TypeError,
    MemoryError,
    NotImplementedError,
    RuntimeError,  # zipfile: a member flagged as encrypted
    UnicodeError,
    SyntaxError,
    tokenize.TokenError,
    zipfile.BadZipFile,
    zlib.error,
)

KINDS = {"int": "iu", "number": "iufb", "str": "U"}


class FileFormatError(UsageError, ValueError):
    """A file that is not what the command reads; the message names the file and the problem."""


def read_npz(path, what: str, member: str | None = None) -> tuple[Path, dict[str, np.ndarray]]:
    """(the file read, name -> array) of every array in the ``.npz`` at ``path``.

    Args:
        what: how the message names the file (``"--population"``, ``"reference file"``).
        member: a file name looked up inside ``path`` when ``path`` is a folder (a run folder
            holding ``population.npz``).
    """
    file = Path(path)
    if file.is_dir():
        if member is None or not (file / member).is_file():
            inside = f" with no {member} in it" if member else ""
            raise FileFormatError(f"{what} {file} is a folder{inside}; expected an .npz file")
        file = file / member
    if not file.is_file():
        raise FileFormatError(f"{what} {file}: no such file")
    if not zipfile.is_zipfile(file):
        raise FileFormatError(f"{what} {file} is not an .npz archive (numpy's savez format)")
    try:
        _check_unpacked_size(file, what)
        with np.load(file, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except FileFormatError:
        raise
    except READ_ERRORS as err:
        raise FileFormatError(f"{what} {file} cannot be read as an .npz archive: {err}") from None
    foreign = sorted(name for name, value in arrays.items() if not isinstance(value, np.ndarray))
    if foreign:
        raise FileFormatError(f"{what} {file} holds members that are not arrays: {foreign[:5]}")
    return file, arrays


def _check_unpacked_size(file: Path, what: str) -> None:
    with zipfile.ZipFile(file) as archive:
        size = sum(info.file_size for info in archive.infolist())
    if size > MAX_UNPACKED_BYTES:
        raise FileFormatError(
            f"{what} {file} unpacks to {size} bytes (more than {MAX_UNPACKED_BYTES}); "
            "not a file this command writes"
        )


class NpzChecks:
    """The arrays of one file, each taken by the caller with the checks it needs.

    Args:
        holds: what such a file holds, for the message on a missing array.
    """

    def __init__(self, file: Path, what: str, arrays: dict[str, np.ndarray], holds: str):
        self.file, self.what, self.arrays, self.holds = file, what, arrays, holds

    def fail(self, problem: str) -> FileFormatError:
        return FileFormatError(f"{self.what} {self.file}: {problem}")

    def get(self, name: str, kind: str, ndim: int | None = None, shape=None) -> np.ndarray:
        """The array ``name``: present, of ``kind`` (a key of :data:`KINDS`), with ``ndim``
        dimensions or the leading ``shape``, and finite where it holds numbers."""
        if name not in self.arrays:
            raise self.fail(f"no array {name!r} ({self.holds})")
        value = self.arrays[name]
        if value.dtype.kind not in KINDS[kind]:
            raise self.fail(f"array {name!r} holds {value.dtype}; expected {kind} values")
        if ndim is not None and value.ndim != ndim:
            raise self.fail(f"array {name!r} has shape {value.shape}; expected {ndim} dimensions")
        if shape is not None and value.shape[: len(shape)] != tuple(shape):
            raise self.fail(
                f"array {name!r} has shape {value.shape}; expected it to start with {tuple(shape)}"
            )
        if kind == "number" and value.size and not np.isfinite(value.astype(np.float64)).all():
            bad = int(np.sum(~np.isfinite(value.astype(np.float64))))
            raise self.fail(f"array {name!r} has {bad} values that are not finite numbers")
        return value

    def int_scalar(self, name: str, minimum: int = 0) -> int:
        value = self.get(name, "int", ndim=0)
        if int(value) < minimum:
            raise self.fail(f"{name} is {int(value)}; expected at least {minimum}")
        return int(value)

    def text(self, name: str, default: str) -> str:
        """A string scalar, or ``default`` where the file has none (older files)."""
        if name not in self.arrays:
            return default
        return str(self.get(name, "str", ndim=0))

    def names(self, name: str) -> tuple[str, ...]:
        """A non-empty 1-D array of distinct strings."""
        values = tuple(str(v) for v in self.get(name, "str", ndim=1))
        if not values:
            raise self.fail(f"array {name!r} is empty")
        if len(set(values)) != len(values):
            raise self.fail(f"array {name!r} repeats a name: {list(values)}")
        return values

    def indices(self, name: str, size: int, count: int, of: str) -> np.ndarray:
        """A 1-D int array of ``count`` entries, each in 0..size-1 (``of`` says what they index)."""
        values = self.get(name, "int", ndim=1)
        if len(values) != count:
            raise self.fail(f"array {name!r} has {len(values)} entries; expected {count}")
        outside = values[(values < 0) | (values >= size)]
        if outside.size:
            raise self.fail(
                f"{name} {int(outside[0])} is outside 0..{size - 1} (the file's {size} {of}), "
                f"as are {outside.size} of its {count} entries"
            )
        return values.astype(np.int64)
