"""The JSONL transcript of a play run, and resuming from it.

One line per model call, written and flushed as the call returns, so a crash loses at most the
calls that were in flight. Each call carries a deterministic key (run part, episode, env index,
step, agent, call kind and ordinal) and a hash of its prompt. Resuming reads the transcript back
and answers every call whose key is recorded with the recorded reply (after checking that the
prompt hash matches, so a changed prompt protocol cannot silently reuse old replies); only the
missing calls go to the model. A partial last line (the process died mid-write) is cut off.

Every answered call is kept, whatever its text: a reply holding a lone surrogate (``"\\ud800"``
in the server's JSON, which UTF-8 cannot encode) is written as its JSON escape and read back as
the same string.

Line types: ``{"type": "run", ...}`` (first line: the run's identity, and the games it plays
with their versions, ``"games": ["moral_hazard-v0"]``, and the text protocols its prompts were
rendered with, ``"protocols": ["moral_hazard-text-v1"]``), ``{"type": "call", ...}``
and ``{"type": "episode", ...}`` (an episode's metrics, when it ends), and ``{"type": "seat",
...}`` (something that happened to a model seat, such as its server refusing structured output:
docs/transcripts.md, "Seat events"). A reader skips line types it does not know, so a transcript
written before a line type existed resumes as before.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from dilemmax.envs.text import Prompt
from dilemmax.envs.typecheck import field_problem
from dilemmax.errors import EnvVersionError, UsageError

_SURROGATE = re.compile("[\ud800-\udfff]")


class TranscriptError(UsageError, RuntimeError):
    """A transcript that cannot be used as asked (nothing to resume, a damaged header, ...)."""


class TranscriptMismatch(TranscriptError):
    """The transcript on disk does not belong to this run (different command or prompts)."""


def prompt_hash(prompt: Prompt) -> str:
    """A short, stable hash of what the model was asked (system, user, kind, schema)."""
    payload = json.dumps(
        [prompt.system, prompt.user, prompt.kind, prompt.json_schema],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def call_key(part: str, episode: int, env: int, step: int, agent: str, kind: str, ordinal: int):
    """The deterministic identity of one model call within a run."""
    return f"{part}|e{episode}|n{env}|t{step}|{agent}|{kind}{ordinal}"


def run_key(identity: Mapping[str, Any]) -> str:
    """A hash of everything that decides a run's calls (env, options, seats, seeds, sizes)."""
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        if isinstance(value, Mapping):
            return {str(k): _jsonable(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [_jsonable(v) for v in value]
        return repr(value)


def read_lines(path: Path) -> tuple[list[dict], int]:
    """The complete JSON lines of ``path`` and the byte length they span.

    A last line without its newline is a write the process did not finish: it is left out (and
    the returned length stops before it). A complete line that is not a JSON object is skipped.
    """
    numbered, end = numbered_lines(path)
    return [row for _, row in numbered], end


def numbered_lines(path: Path) -> tuple[list[tuple[int, dict]], int]:
    """:func:`read_lines` with each line's number in the file (from 1), for messages."""
    if not path.exists():
        return [], 0
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1  # 0 when there is no complete line
    rows = []
    for number, raw in enumerate(data[:end].split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append((number, row))
    return rows, end


# What each field of each line type holds (docs/transcripts.md), checked before a line from
# a file is used (a resume's replies, a replay page), so that a hand-written or foreign
# transcript gets one line naming the file, the line and the field rather than a traceback. A
# field a line leaves out is not checked (older transcripts lack some); others are free.
_TOKENS = int | None
LINE_FIELDS: dict[str, dict[str, Any]] = {
    "run": {
        "run": str,
        "identity": Mapping[str, Any],
        "games": list[str],
        "protocols": list[str],
    },
    "call": {
        **dict.fromkeys(("key", "part", "seat", "agent", "kind", "prompt_hash"), str),
        **dict.fromkeys(("env", "episode", "step", "action"), int),
        **dict.fromkeys(("system", "prompt", "reply", "error", "parse_error"), str | None),
        **dict.fromkeys(("output", "output_refused"), str | None),
        **dict.fromkeys(("valid", "recovered"), bool),
        "fields": Mapping[str, Any] | None,
        **dict.fromkeys(("prompt_tokens", "completion_tokens", "reasoning_tokens"), _TOKENS),
        **dict.fromkeys(("cached_tokens", "cache_write_tokens", "retries"), _TOKENS),
        "latency_s": float | None,
        "cached": bool | None,  # answered from the response cache (--cache), or not
        "cached_usage": Mapping[str, Any] | None,
    },
    "episode": {
        "id": str,
        "part": str,
        "episode": int,
        "config_index": int | None,
        "seats": Mapping[str, str],
        "steps": int,
        "truncated": bool,
        "metrics": Mapping[str, Any],
        "start": Mapping[str, Any],
        "actions": Mapping[str, list[int]],
    },
    "seat": {"seat": str, "event": str},
    "totals": {"seats": Mapping[str, Any]},
}


def line_problem(row: Mapping[str, Any]) -> str | None:
    """What is wrong with a line's fields ("games='x' is not allowed: expected a list of
    strings"), None when nothing; a line type not in :data:`LINE_FIELDS` is not checked."""
    for name, hint in LINE_FIELDS.get(row.get("type"), {}).items():
        problem = field_problem(name, row[name], hint) if name in row else None
        if problem:
            return problem
    return None


def check_lines(path: Path, numbered: Sequence[tuple[int, Mapping[str, Any]]]) -> None:
    """Raises :class:`TranscriptError` naming the file, line and field of the first line whose
    fields do not hold what docs/transcripts.md says they hold."""
    for number, row in numbered:
        problem = line_problem(row)
        if problem:
            raise TranscriptError(f"{path} line {number}: {problem} (docs/transcripts.md)")


def _json_line(row: Mapping[str, Any]) -> str:
    """``row`` as one JSON line that UTF-8 can always encode: non-ASCII text stays readable, and
    lone surrogates (no UTF-8 form) become their ``\\uXXXX`` escapes, which read back as them."""
    text = json.dumps(_jsonable(dict(row)), ensure_ascii=False)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n"


def _check_header(path: Path) -> None:
    """The first line of an existing transcript is its run header, or the file is damaged."""
    with open(path, "rb") as handle:
        first = handle.readline(1 << 20)
    try:
        head = json.loads(first)
        problem = "" if isinstance(head, dict) and head.get("type") == "run" else "not a run line"
    except ValueError as error:
        problem = f"not JSON ({error})"
    if problem:
        raise TranscriptError(
            f"{path} line 1 is damaged ({problem[:120]}): without its run header the run cannot "
            "be identified or resumed; start a new --out"
        )


def _check_games(path: Path, head: Mapping[str, Any], games: Sequence[str]) -> None:
    """Refuses to resume a transcript recorded under another version of a game it plays
    (``games``: ``"<game>-v<N>"`` labels). A header without them predates versions: v0."""
    differ = _versions_differ(head, "games", games)
    if differ:
        recorded, current = differ
        raise EnvVersionError(
            f"{path} was recorded under {recorded}, but this dilemmax plays {current} "
            "(docs/versions.md): its replies cannot be replayed; use a new --out"
        )


def _versions_differ(head: Mapping[str, Any], field: str, labels: Sequence[str]):
    """(recorded, current), each ``"<name>-v<N>"`` label joined, when the header's ``field``
    names other versions than ``labels``; None when they agree or there is nothing to check. A
    header without the field predates versions: v0."""
    if not labels:
        return None
    recorded = head.get(field) or [f"{label.rsplit('-v', 1)[0]}-v0" for label in labels]
    if sorted(set(recorded)) == sorted(set(labels)):
        return None
    return ", ".join(sorted(set(recorded))), ", ".join(sorted(set(labels)))


def protocol_label(game: str, protocol: Any) -> str:
    """``"open_cleanup-text-v1"``: the text protocol a game's prompts are rendered with, and its
    version (``TextProtocol.protocol_version``; ``game``: the game or its ``env_label``)."""
    return f"{game.rsplit('-v', 1)[0]}-text-v{int(getattr(protocol, 'protocol_version', 0))}"


def _check_protocols(path: Path, head: Mapping[str, Any], protocols: Sequence[str]) -> None:
    """Refuses to resume a transcript whose prompts were rendered under another version of a
    text protocol (its recorded replies answer other prompts). A header without them predates
    protocol versions: v0."""
    differ = _versions_differ(head, "protocols", protocols)
    if differ:
        recorded, current = differ
        raise TranscriptMismatch(
            f"{path} was recorded under text protocol {recorded}, but this dilemmax renders "
            f"{current} (docs/versions.md): its replies answer other prompts; use a new --out"
        )


class Transcript:
    """Appends call and episode lines to ``path``; replays recorded calls on resume.

    Args:
        path: the JSONL file.
        identity: what identifies the run (hashed into ``run`` on the first line).
        resume: read existing lines and replay them; otherwise the file must not exist yet.
        games: the ``"<game>-v<N>"`` labels of the games it plays.
        protocols: the ``"<game>-text-v<N>"`` labels of the text protocols (:func:`protocol_label`).

    Raises:
        FileExistsError: not resuming and the file exists.
        TranscriptError: resuming a file that does not exist, or whose first line is damaged.
        TranscriptMismatch: resuming a file written by a different run, or under another
            text protocol version.
    """

    def __init__(
        self,
        path: str | Path,
        identity: Mapping[str, Any],
        resume: bool = False,
        games: Sequence[str] = (),
        protocols: Sequence[str] = (),
    ):
        self.path = Path(path)
        self.run = run_key(identity)
        self.resumed = bool(resume)
        self.recorded: dict[str, dict] = {}
        self.episodes_written: set[str] = set()
        self.seat_events: list[dict] = []  # {"type": "seat", ...} lines, read back and new
        if self.path.exists() and not resume:
            raise FileExistsError(
                f"{self.path} exists: pass --resume to continue that run, or choose a new --out"
            )
        if resume and not self.path.is_file():
            raise TranscriptError(
                f"--resume: there is no {self.path} to continue; drop --resume to start the run"
            )
        numbered, end = numbered_lines(self.path) if resume else ([], 0)
        rows = [row for _, row in numbered]
        if end:
            _check_header(self.path)
            check_lines(self.path, numbered)
        if rows:
            head = rows[0]
            if head.get("run") != self.run:
                raise TranscriptMismatch(
                    f"{self.path} belongs to another run (run key {head.get('run')!r}, this "
                    f"command's is {self.run!r}): resume with the same command, or use a new --out"
                )
            _check_games(self.path, head, games)
            _check_protocols(self.path, head, protocols)
        for row in rows:
            if row.get("type") == "call" and isinstance(row.get("key"), str):
                self.recorded.setdefault(row["key"], row)
            elif row.get("type") == "episode":
                self.episodes_written.add(str(row.get("id")))
            elif row.get("type") == "seat":
                self.seat_events.append(row)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()  # client threads record calls as they return
        self._file: IO[str] = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 (kept open)
        self._file.truncate(end)  # drop a partial last line before appending
        self._file.seek(end)
        if not rows:
            header = {"type": "run", "run": self.run, "identity": _jsonable(dict(identity))}
            header.update({"games": sorted(set(games))} if games else {})
            self._write({**header, **({"protocols": sorted(set(protocols))} if protocols else {})})

    @property
    def resumable(self) -> bool:
        """Whether ``--resume`` can continue this run if it stops now: it is itself a resume, or
        it has recorded a call or an episode. (A fresh start that recorded nothing is undone,
        folder or transcript, so the corrected command starts again without ``--resume``.)"""
        return self.resumed or bool(self.recorded or self.episodes_written)

    def replay(self, key: str, prompt: Prompt) -> dict | None:
        """The recorded call for ``key`` (None if missing); its prompt must hash the same."""
        row = self.recorded.get(key)
        if row is None:
            return None
        if row.get("prompt_hash") != prompt_hash(prompt):
            raise TranscriptMismatch(
                f"call {key}: the prompt differs from the one recorded in {self.path} (the "
                "protocol or its options changed); start a new --out"
            )
        return row

    def record_call(self, row: Mapping[str, Any]) -> None:
        row = {"type": "call", **row}
        with self._lock:
            self.recorded[row["key"]] = row
        self._write(row)

    def record_seat_event(self, seat: str, event: str, row: Mapping[str, Any]) -> bool:
        """Writes ``{"type": "seat", "seat": seat, "event": event, ...row}`` unless the
        transcript already holds that event of that seat (a resumed run that meets it again);
        returns whether it wrote the line."""
        with self._lock:
            if any(e.get("seat") == seat and e.get("event") == event for e in self.seat_events):
                return False
            line = {"type": "seat", "seat": seat, "event": event, **_jsonable(dict(row))}
            self.seat_events.append(line)
        self._write(line)
        return True

    def record_totals(self, seats: Mapping[str, Any]) -> None:
        """Writes ``{"type": "totals", "seats": {seat: {calls, prompt_tokens, cached_tokens,
        ...}}}``: what the run's model seats spent, replayed calls included, when it ends (each
        resume writes a new one; the last one counts)."""
        self._write({"type": "totals", "seats": _jsonable(dict(seats))})

    def record_episode(self, episode_id: str, row: Mapping[str, Any]) -> None:
        if episode_id in self.episodes_written:
            return
        self.episodes_written.add(episode_id)
        self._write({"type": "episode", "id": episode_id, **_jsonable(dict(row))})

    def _write(self, row: Mapping[str, Any]) -> None:
        line = _json_line(row)
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()

    def __enter__(self) -> Transcript:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
