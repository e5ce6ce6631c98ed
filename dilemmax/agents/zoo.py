"""The zoo: trained populations shipped with the package, loadable by name.

``zoo:<game>/<algo>_s<k>`` names training seed ``k`` of a run folder under
``dilemmax/agents/zoo_runs/<game>/<algo>/`` (its ``config.json`` and one checkpoint), trained by
``benchmarks/scenarios/train_zoo.py``; the zoo's ``manifest.json`` holds each population's run,
seed, training command and the digest of the run's files. A seat (``--seat agent_1=zoo:...``) or a
scenario's background loads it like any trained run, with the same checks
(:meth:`dilemmax.agents.trained.TrainedPolicy.load`).

``DILEMMAX_ZOO`` (a folder of the same layout) replaces the shipped zoo, for a zoo of one's own.
Its manifest is checked whole when read: every entry an object with ``run`` (a path inside the
folder), ``seed`` (an integer >= 0) and ``digest`` (sha256 hex), and optionally ``game`` (the
name's own), ``algo``, ``command`` and ``train_seconds``; anything else is one line naming the
entry and the field.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from importlib import resources
from pathlib import Path

from dilemmax.agents.trained import TrainedPolicy
from dilemmax.envs.registry import check_version
from dilemmax.errors import UsageError

MANIFEST = "manifest.json"
_NAME = re.compile(r"[a-z_]+/[A-Za-z0-9_.-]+")


# field -> (the types it may have, what it must be); `run`, `seed` and `digest` are required.
_FIELDS = {
    "run": ((str,), "a relative path inside the zoo folder"),
    "seed": ((int,), "a training seed, an integer >= 0"),
    "digest": ((str,), "a sha256 hex digest (64 characters)"),
    "game": ((str,), "the game's id"),
    "algo": ((str,), "the algorithm's name"),
    "command": ((str,), "the training command as text"),
    "train_seconds": ((int, float), "a number of seconds >= 0"),
    "env_version": ((int,), "the game's version it was trained under, an integer >= 0"),
}
_REQUIRED = ("run", "seed", "digest")
_DIGEST = re.compile(r"[0-9a-f]{64}")


def root() -> Path:
    """The zoo folder: ``$DILEMMAX_ZOO`` if set (it must name a folder), else the package's
    ``zoo_runs``."""
    own = os.environ.get("DILEMMAX_ZOO")
    if not own:
        return Path(str(resources.files("dilemmax.agents") / "zoo_runs"))
    path = Path(own)
    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        raise UsageError(f"DILEMMAX_ZOO={own[:200]!r}: {what} (unset it to use the shipped zoo)")
    if not (path / MANIFEST).is_file():
        raise UsageError(f"DILEMMAX_ZOO={own[:200]!r}: the folder has no {MANIFEST}")
    return path


def manifest(folder: Path | None = None) -> dict[str, dict]:
    """name -> entry (game, algorithm, seed, training command, digest) of every zoo run."""
    path = (root() if folder is None else folder) / MANIFEST
    if not path.is_file():
        return {}
    try:
        entries = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UsageError(f"zoo manifest {path} is unreadable: {error}") from None
    if not isinstance(entries, dict):
        raise UsageError(f"zoo manifest {path} is not a JSON object")
    for name, entry in entries.items():
        problem = _entry_problem(name, entry)
        if problem:
            raise UsageError(f"zoo manifest {path}: entry {name[:80]!r}: {problem}")
    return entries


def _entry_problem(name: str, entry) -> str | None:
    """What is wrong with manifest entry ``name`` (None when nothing is): the name's form, then
    every field's presence, type and value, so that no later use of the entry can fail."""
    if not _NAME.fullmatch(name):
        return "a population is named <game>/<name> (letters, digits, _ . -)"
    if not isinstance(entry, dict):
        return f"is {type(entry).__name__}, not an object of fields"
    missing = [field for field in _REQUIRED if field not in entry]
    if missing:
        return f"lacks field(s) {missing}"
    for field, value in entry.items():
        if field not in _FIELDS:
            return f"unknown field {str(field)[:40]!r}; known: {sorted(_FIELDS)}"
        types, meaning = _FIELDS[field]
        if isinstance(value, bool) or not isinstance(value, types) or not _fits(field, value):
            return f"field {field!r} is {json.dumps(value)[:60]}, not {meaning}"
    if entry.get("game", name.split("/")[0]) != name.split("/")[0]:
        return f"field 'game' is {entry['game'][:40]!r}, not the game its name starts with"
    return None


def _fits(field: str, value) -> bool:
    """The value check of a field whose type is right."""
    if field in ("seed", "env_version"):
        return value >= 0
    if field == "train_seconds":
        return value >= 0 and value != float("inf")
    if field == "digest":
        return bool(_DIGEST.fullmatch(value))
    if field == "run":  # a folder inside the zoo: no absolute path, no way out
        parts = Path(value).parts
        return bool(parts) and not Path(value).is_absolute() and ".." not in parts
    return True


def names(folder: Path | None = None) -> list[str]:
    return sorted(manifest(folder))


def resolve(name: str, folder: Path | None = None) -> Path:
    """The run folder of zoo population ``name`` (``open_harvest/ippo_s0``)."""
    folder = root() if folder is None else folder
    known = manifest(folder)
    if not _NAME.fullmatch(name or "") or name not in known:
        shown = ", ".join(sorted(known)) or "none (the zoo is empty)"
        raise UsageError(f"zoo:{str(name)[:80]!r} is not in the zoo; known: {shown}")
    path = folder / known[name]["run"]
    if not (path / "config.json").is_file():
        raise UsageError(f"zoo:{name}: its run folder {path} is missing from this installation")
    return path


def load(name: str, env=None, greedy: bool = False, folder: Path | None = None):
    """Zoo population ``name`` as a seat (checked against ``env`` when given)."""
    path = verify(name, folder)
    entry = manifest(folder)[name]
    # The population's game version (docs/versions.md): a zoo agent trained under another
    # version of its game is refused. An entry without env_version predates versions: 0.
    check_version(name.split("/")[0], entry.get("env_version", 0), f"zoo:{name}")
    return TrainedPolicy.load(path, seed=entry["seed"], greedy=greedy, env=env)


def run_digest(path: Path) -> str:
    """sha256 (hex) of every file of a run folder, in name order (names included)."""
    hasher = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    base = path.parent if path.is_file() else path
    for file in files:
        hasher.update(file.relative_to(base).as_posix().encode())
        hasher.update(file.read_bytes())
    return hasher.hexdigest()


def verify(name: str, folder: Path | None = None) -> Path:
    """:func:`resolve`, then the run's files checked against the manifest's digest."""
    path = resolve(name, folder)
    want = manifest(folder)[name]["digest"]
    got = run_digest(path)
    if want != got:
        raise UsageError(f"zoo:{name}: its files do not match the manifest (digest {got[:12]})")
    return path
