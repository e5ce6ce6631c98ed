"""A response cache across runs (``--cache [DIR]``): a reply already paid for is never paid again.

An entry is keyed on everything that decides a reply: the seat's model and endpoint
(:func:`dilemmax.llm.seats.reply_identity`: kind, model or folder, base URLs, every generation
option of :class:`~dilemmax.llm.config.GenerateConfig` but how calls travel), the full message
list, the reply's JSON schema, and a sample index. The sample index is the run's ``--seed``, the
episode, and how many times the same request was asked for that episode earlier in the run
(counted in play order, replayed calls too): at temperature > 0 every episode, and every repeat
within one, draws its own sample, as Inspect's epochs do, while a second run of the same
command, a shard of it, or another design that plays the same episodes on the same seed (the
reveal design's hidden arm after the homogeneous design) finds every reply it shares.

On disk the cache is content-addressed: ``DIR/ab/abcdef....json``, named by the sha256 of the
key's canonical JSON. An entry is written to a temporary file in its own folder, then moved into
place (``os.replace``), so processes and shards writing one folder at once never see half an
entry; a reader takes an entry it cannot read (garbled, cut short, another key's) as a miss.
Calls that failed are never cached. A hit is recorded in the transcript as such (``"cached":
true``, no tokens, the original usage under ``"cached_usage"``) and counts against no limit.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dilemmax.cache_home import cache_home
from dilemmax.errors import UsageError
from dilemmax.llm.client import ChatRequest, Completion

KEY_VERSION = 1  # bumped when the key's layout changes, so old entries are never misread
MAX_ENTRY_BYTES = 16 << 20  # no reply is this large; a bigger file is not an entry


def default_folder() -> Path:
    """``$XDG_CACHE_HOME/dilemmax/responses`` (default ``~/.cache/dilemmax/responses``)."""
    return cache_home() / "responses"


def cache_folder(given: str | Path | bool | None) -> Path | None:
    """The folder ``--cache`` names: a path, True for :func:`default_folder`, None (or False)
    for no cache."""
    if given is None or given is False:
        return None
    return default_folder() if given is True else Path(given).expanduser()


def canonical(value: Any) -> str:
    """One JSON text per value: sorted keys, no spaces, ASCII (tuples as lists)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)


def digest(model: Mapping[str, Any], request: ChatRequest, sample: Sequence[Any]) -> str:
    """The sha256 of the canonical JSON of a reply's key."""
    key = {
        "v": KEY_VERSION,
        "model": model,
        "messages": [dict(m) for m in request.messages],
        "schema": request.json_schema,
        "sample": list(sample),
    }
    return hashlib.sha256(canonical(key).encode()).hexdigest()


class ResponseCache:
    """The cache folder: :meth:`get` and :meth:`put` by digest, safe across processes.

    Raises:
        UsageError: the folder cannot be made or written (one line naming it).
    """

    def __init__(self, folder: str | Path):
        self.folder = Path(folder).expanduser()
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.folder, prefix=".probe-"):
                pass
        except OSError as error:
            raise UsageError(f"--cache {folder}: cannot write there ({error.strerror})") from None
        self.write_errors = 0

    def path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> Completion | None:
        """The reply stored under ``key``; None when there is none or it cannot be read."""
        path = self.path(key)
        try:
            if path.stat().st_size > MAX_ENTRY_BYTES:
                return None
            entry = json.loads(path.read_bytes())
        except (OSError, ValueError, RecursionError):
            return None
        return _completion(entry, key)

    def put(self, key: str, completion: Completion) -> None:
        """Stores a reply (never a failed call's). A write that fails (a full disk) is counted
        and skipped: the run goes on, the reply is in its transcript."""
        if completion.error:
            return
        entry = {
            "key": key,
            "reply": completion.text,
            "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens,
            "reasoning_tokens": completion.reasoning_tokens,
            "cached_tokens": getattr(completion, "cached_tokens", 0),
            "output": completion.output,
        }
        path = self.path(key)
        temp = None
        try:
            path.parent.mkdir(exist_ok=True)
            with tempfile.NamedTemporaryFile(
                "w", dir=path.parent, prefix=".tmp-", suffix=".json", delete=False
            ) as handle:
                temp = handle.name
                handle.write(canonical(entry))
            os.replace(temp, path)
        except OSError:
            self.write_errors += 1
            if temp is not None:
                Path(temp).unlink(missing_ok=True)


def _completion(entry: Any, key: str) -> Completion | None:
    """A stored entry as the reply it holds, checked field by field (else None: a miss)."""
    if not isinstance(entry, dict) or entry.get("key") != key:
        return None
    text = entry.get("reply")
    counts = [entry.get(k, 0) for k in ("prompt_tokens", "completion_tokens", "reasoning_tokens")]
    if not isinstance(text, str) or not all(_is_count(c) for c in counts):
        return None
    output = entry.get("output", "")
    return Completion(
        text,
        prompt_tokens=counts[0],
        completion_tokens=counts[1],
        reasoning_tokens=counts[2],
        output=output if isinstance(output, str) else "",
    )


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class RunCache:
    """The cache as one run uses it: each seat's model identity, and each request's sample index.

    Args:
        folder: the cache folder (:class:`ResponseCache`).
        seed: the run's ``--seed`` (part of every sample index).
        identity_of: seat name -> what decides its replies
            (:func:`dilemmax.llm.seats.reply_identity` under the run's model options).
    """

    def __init__(
        self, folder: str | Path, seed: int, identity_of: Callable[[str], Mapping[str, Any]]
    ):
        self.store, self.seed, self.identity_of = ResponseCache(folder), seed, identity_of
        self._identities: dict[str, Mapping[str, Any]] = {}
        self._asked: dict[tuple[str, int], int] = {}  # (request, episode) -> times asked

    def key(self, seat: str, request: ChatRequest, episode: int) -> str:
        """The digest of ``request`` asked of ``seat`` for ``episode``, the next time it is
        asked in this run (called in play order, once per ask, replayed ones too)."""
        if seat not in self._identities:
            self._identities[seat] = self.identity_of(seat)
        model = self._identities[seat]
        base = digest(model, request, ())
        seen = self._asked.get((base, episode), 0)
        self._asked[(base, episode)] = seen + 1
        return digest(model, request, (self.seed, episode, seen))

    def get(self, key: str) -> Completion | None:
        return self.store.get(key)

    def put(self, key: str, completion: Completion) -> None:
        self.store.put(key, completion)


def hit_row(completion: Completion) -> dict[str, Any]:
    """A cache hit's transcript fields: no tokens spent, the original usage kept apart."""
    usage = {
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": completion.completion_tokens,
        "reasoning_tokens": completion.reasoning_tokens,
    }
    return {"cached": True, "cached_usage": usage}


def served(completion: Completion) -> Completion:
    """A stored reply as the call it answers: nothing spent (no tokens, no latency)."""
    return Completion(completion.text, output=completion.output)
