"""An exclusive lock on a run folder, shared by everything that writes one (training, language-
model play, red-teaming populations), so a second writer is refused instead of interleaved."""

from __future__ import annotations

import errno
import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: run folders go unlocked
    fcntl = None

from dilemmax.errors import UsageError

LOCK_FILE = ".lock"


class RunFolderError(UsageError, RuntimeError):
    """A run folder that cannot be used as asked (in use, no config to resume, ...)."""


class RunLock:
    """An exclusive lock on a run folder, held while a run writes into it.

    An ``fcntl.flock`` on ``<run>/.lock``: the OS drops it when the holding process exits, however
    it exits, so the file a killed run leaves behind is no obstacle. The file records the
    holder's pid for the refusal message. Platforms without ``fcntl`` get no locking.

    Args:
        run_dir: the folder (created if missing).
        what: the kind of run holding the lock ("training", "play", ...), written to the lock
            file so that a refused second writer is told what holds the folder.
    """

    def __init__(self, run_dir: str | Path, what: str = "run"):
        self.path = Path(run_dir) / LOCK_FILE
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        if fcntl is None:  # pragma: no cover - not POSIX
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            raise RunFolderError(
                f"{self.path.parent} is in use by another {_holder(self.path)}; "
                "wait for it to finish or choose another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{self.what} pid {os.getpid()}\n".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock; the file stays (harmless)
            self._fd = None

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def last_writer(run_dir: str | Path) -> str | None:
    """The kind of run that last wrote into ``run_dir`` (``"experiment"``, ``"play"``,
    ``"training"``, ...): every writer takes the folder's :class:`RunLock`, whose file keeps the
    last holder's record after it exits. None for a folder no lock was ever taken in."""
    try:
        text = (Path(run_dir) / LOCK_FILE).read_text()[:200].split()
    except (OSError, UnicodeDecodeError):
        return None
    if len(text) < 3 or text[-2] != "pid":
        return None
    return " ".join(text[:-2])


def refuse_other_writer(run_dir: str | Path, command: str, option: str = "--out") -> None:
    """A :class:`RunFolderError` when another kind of run wrote into ``run_dir``: a command must
    not write its results over those of another (an experiment's, a training run's)."""
    writer = last_writer(run_dir)
    if writer is not None and writer != command:
        raise RunFolderError(
            f"{option} {run_dir} holds the results of another command (`{writer}`); "
            "choose a new folder"
        )


def _holder(path: Path) -> str:
    """The holder as `training (pid 12)` from the lock file's `training pid 12` (a file with only
    `pid 12` reads as `run (pid 12)`)."""
    try:
        text = path.read_text()[:80].split()
    except OSError:
        text = []
    what = text[0] if text and text[0] != "pid" else "run"
    pid = text[-1] if len(text) >= 2 and text[-2] == "pid" else "unknown"
    return f"{what} (pid {pid})"
