"""The zoo: trained populations shipped with the package, loadable by name.

``zoo:<game>/<algo>_s<k>`` names training seed ``k`` of a run folder under
``dilemmax/agents/zoo_runs/<game>/<algo>/`` (its ``config.json`` and one checkpoint), trained by
``benchmarks/scenarios/train_zoo.py``; the zoo's ``manifest.json`` holds each population's run,
seed, training command and the digest of the run's files. A seat (``--seat agent_1=zoo:...``) or a
scenario's background loads it like any trained run, with the same checks
(:meth:`dilemmax.agents.trained.TrainedPolicy.load`).

``DILEMMAX_ZOO`` (a folder of the same layout) replaces the shipped zoo, for a zoo of one's own.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from importlib import resources
from pathlib import Path

from dilemmax.agents.trained import TrainedPolicy
from dilemmax.errors import UsageError

MANIFEST = "manifest.json"
_NAME = re.compile(r"[a-z_]+/[A-Za-z0-9_.-]+")


def root() -> Path:
    """The zoo folder: ``$DILEMMAX_ZOO`` if set, else the package's ``zoo_runs``."""
    own = os.environ.get("DILEMMAX_ZOO")
    return Path(own) if own else Path(str(resources.files("dilemmax.agents") / "zoo_runs"))


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
    return entries


def names(folder: Path | None = None) -> list[str]:
    return sorted(manifest(folder))


def resolve(name: str, folder: Path | None = None) -> Path:
    """The run folder of zoo population ``name`` (``open_harvest/ippo_s0``)."""
    folder = root() if folder is None else folder
    known = manifest(folder)
    if not _NAME.fullmatch(name or "") or name not in known:
        shown = ", ".join(sorted(known)) or "none (the zoo is empty)"
        raise UsageError(f"zoo:{str(name)[:80]!r} is not in the zoo; known: {shown}")
    path = folder / str(known[name].get("run", name))
    if not (path / "config.json").is_file():
        raise UsageError(f"zoo:{name}: its run folder {path} is missing from this installation")
    return path


def load(name: str, env=None, greedy: bool = False, folder: Path | None = None):
    """Zoo population ``name`` as a seat (checked against ``env`` when given)."""
    path = verify(name, folder)
    seed = int(manifest(folder)[name].get("seed", 0))
    return TrainedPolicy.load(path, seed=seed, greedy=greedy, env=env)


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
    want = manifest(folder)[name].get("digest")
    got = run_digest(path)
    if want != got:
        raise UsageError(f"zoo:{name}: its files do not match the manifest (digest {got[:12]})")
    return path
