"""The run folder's owner: an exclusive lock shared by everything that writes one (training,
language-model play, experiments, scenario evaluations, red-teaming), so a second writer is
refused instead of interleaved, and the record of the command that wrote it, so that no other
command writes its files over that one's (a play run over a scenario evaluation's scores, a
training run into a play run, a replay page over a transcript)."""

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

# What a command's lock recorded before it had a name of its own (`redteam play` wrote `play`):
# its folders from then are still its own.
FORMER_NAMES = {"redteam play": ("play",), "redteam ablate": ("ablation",)}


class RunFolderError(UsageError, RuntimeError):
    """A run folder that cannot be used as asked (in use, no config to resume, ...)."""


class RunLock:
    """An exclusive lock on a run folder, held while a run writes into it.

    An ``fcntl.flock`` on ``<run>/.lock``: the OS drops it when the holding process exits, however
    it exits, so the file a killed run leaves behind is no obstacle. The file records the
    holder's pid for the refusal message. Platforms without ``fcntl`` get no locking.

    The lock is also the folder's owner: a folder whose lock another kind of run took before
    (``what`` differs from the record the last holder left) is refused too, whoever holds it
    now: the runs of two commands would write their files over each other's.

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
        earlier = _writer_of(os.read(fd, 200).decode(errors="replace"))
        if earlier is not None and not is_own(earlier, self.what):
            os.close(fd)
            raise RunFolderError(foreign_folder(self.path.parent, earlier, self.what))
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{self.what} pid {os.getpid()}\n".encode(), 0)
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
        return _writer_of((Path(run_dir) / LOCK_FILE).read_text()[:200])
    except (OSError, UnicodeDecodeError):
        return None


def _writer_of(record: str) -> str | None:
    """``"play merge"`` from a lock file's ``play merge pid 12`` (None: no writer recorded)."""
    words = record.split()
    if len(words) < 3 or words[-2] != "pid":
        return None
    return " ".join(words[:-2])


def is_own(writer: str, command: str) -> bool:
    """Whether a folder ``writer`` wrote is ``command``'s own: the same command (under its name
    or a former one), or its shards' merge, whose folder is the whole run (``play --resume``
    continues what ``play merge`` wrote) and the other way round."""
    return _run_of(writer) == _run_of(command) or writer in FORMER_NAMES.get(command, ())


def _run_of(kind: str) -> str:
    """The command whose runs ``kind`` writes: ``play`` for ``play merge``."""
    return kind.removesuffix(" merge")


def foreign_folder(run_dir: str | Path, writer: str, command: str, option: str = "") -> str:
    """The one-line refusal of ``command`` writing into ``run_dir``, which ``writer`` wrote."""
    where = f"{option} {run_dir}" if option else str(run_dir)
    return (
        f"{where} holds the results of another command (`{writer}`), which {command} would "
        "write over; choose a new folder"
    )


def refuse_other_writer(run_dir: str | Path, command: str, option: str = "--out") -> None:
    """A :class:`RunFolderError` when another kind of run wrote into ``run_dir``: a command must
    not write its results over those of another (an experiment's, a training run's). What
    :class:`RunLock` refuses when it is taken, checked before any work."""
    writer = last_writer(run_dir)
    if writer is not None and not is_own(writer, command):
        raise RunFolderError(foreign_folder(run_dir, writer, command, option))


def refuse_run_file(path: str | Path, command: str, option: str) -> None:
    """A :class:`RunFolderError` when the file ``path`` (a rollout's transcript, a replay page)
    would go into a folder another command's run owns, among that run's own files."""
    folder = Path(path).parent
    writer = last_writer(folder)
    if writer is not None and not is_own(writer, command):
        raise RunFolderError(
            f"{option} {path} is inside {folder}, the run folder of `{writer}`, whose files "
            f"{command} must not write over; choose a path outside it"
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
