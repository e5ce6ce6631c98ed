"""Shards of a play run and their merge.

A shard (``--shard i/N``, :class:`~dilemmax.llm.session_options.Shard`) plays every N-th
episode of the whole run with that episode's own keys and call keys, and writes ``shard.json``
beside its transcript: the run's identity (the shard left out), which shard it is, and each
part's episodes with their metrics, their position in the whole run's play order and the seats'
call counts.

:func:`merge` reads the shards' records, each checked totally (a foreign, damaged or
inconsistent file is a one-line error naming it), checks that they are the N shards of one run
(same identity, every shard once, every episode of the run exactly once), and gives the whole
run's results: each part's episodes back in play order, with the metrics' own dtypes and shapes,
so what is computed from them equals what the unsharded run gives. It also writes the shards'
transcripts as one, under the unsharded run's header, so the merged folder reads (and resumes)
as the run played on one machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dilemmax.commandline import output_folder, read_json_file
from dilemmax.errors import UsageError
from dilemmax.llm.play import PlayResult
from dilemmax.llm.policy import COUNTS, CallStats
from dilemmax.llm.transcript import run_key
from dilemmax.runlock import RunLock, refuse_other_writer

RECORD = "shard.json"
FORMAT = "dilemmax-shard"
VERSION = 1
STATS_FIELDS = tuple(vars(CallStats()))
# The counts a shard's record holds since shards were written; the JSON-mode counts and the
# output mode came later, and so did the prompt-cache counts (a record without them merges as
# not counted / not said).
LATER_STATS = ("json_mode_calls", "json_valid", "cached_tokens", "cache_write_tokens")
REQUIRED_STATS = tuple(f for f in COUNTS if f not in LATER_STATS)
STEPS_FILE = re.compile(r"steps_\d+\.npz")  # a part's kept steps, beside the record
DTYPE_KINDS = "biuf"  # bool, int, unsigned, float: the dtypes an episode metric has
MAX_RECORD_BYTES = 4 << 30  # far above a paper-sized sweep's (~1 kB per episode)


class ShardError(UsageError):
    """A shard record that cannot be merged (missing, damaged, foreign, or not this run's)."""


# --------------------------------------------------------------------------- writing
def write_record(
    session, command: str, identity: Mapping[str, Any], options: Mapping[str, Any], extra: dict
) -> Path:
    """``<out>/shard.json`` for a finished shard of ``session`` (a
    :class:`~dilemmax.llm.session.SessionResult`), written whole, then renamed into place.
    ``options`` (the run's options, as JSON) are what a merge gives back."""
    parts = []
    zipped = zip(session.names, session.results, session.orders, strict=True)
    for p, (name, result, order) in enumerate(zipped):
        metrics = {k: np.asarray(v) for k, v in result.metrics.items()}
        episodes = [
            {**info, "order": g, "metrics": {k: v[i].tolist() for k, v in metrics.items()}}
            for i, (info, g) in enumerate(zip(result.episodes, order, strict=True))
        ]
        steps = None
        if result.valid is not None:  # the part kept its steps: arrays beside the record
            steps = f"steps_{p}.npz"
            arrays = {"valid": result.valid, **_flat(result.infos, "infos")}
            np.savez(session.out / steps, **arrays)
            for episode, replies in zip(episodes, result.replies, strict=True):
                episode["replies"] = replies
        parts.append(
            {
                "name": name,
                "steps": steps,
                "episodes": episodes,
                "metric_dtypes": {k: v.dtype.str for k, v in metrics.items()},
                "metric_shapes": {k: list(v.shape[1:]) for k, v in metrics.items()},
                "stats": {seat: vars(s) for seat, s in result.stats.items()},
                "wall_s": result.wall_s,
            }
        )
    shard = [session.shard.index, session.shard.count]
    record = {
        "format": FORMAT,
        "version": VERSION,
        "command": command,
        "run": run_key(identity),
        "identity": as_json(dict(identity)),
        "shard": shard,
        "total": session.total,
        "options": as_json(dict(options)),
        "extra": extra,
        "parts": parts,
    }
    path = session.out / RECORD
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(record, indent=1, default=str) + "\n")
    os.replace(temporary, path)
    return path


def as_json(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples as lists, anything else as its text)."""
    return json.loads(json.dumps(value, default=str))


# --------------------------------------------------------------------------- reading
@dataclass
class Merged:
    """The shards of one run as that run.

    Attributes:
        results: one PlayResult per part, episodes in the whole run's order.
        options: the first shard's recorded options (``out`` the merge's folder, no shard, no
            resume, no json).
        identity: the run's identity (without the shard); ``extra``: shard 0's extra results.
        out: the merge's folder.
    """

    results: list[PlayResult]
    options: dict
    identity: dict
    extra: dict
    out: Path
    run: str = ""
    created: bool = False

    def undo(self) -> None:
        """Removes what the merge wrote (its transcript; the folder, if the merge made it), for
        a caller whose use of the merge failed: ``--out`` is then as it was before."""
        if self.created:  # everything in it is the merge's
            shutil.rmtree(self.out, ignore_errors=True)
        else:
            (self.out / "transcript.jsonl").unlink(missing_ok=True)


def merge(
    dirs: Sequence[str],
    out: str | None,
    command: str,
    check: Callable[[dict, dict], None] | None = None,
) -> Merged:
    """The shards in ``dirs`` merged into ``out`` (its merged transcript written there).

    Every shard file (records, steps files) is read and checked first, then ``check(options,
    identity)`` (the command's own checks of the recorded options); only then is ``out``
    made and written, so a refused merge leaves it as it was."""
    if not dirs:
        raise ShardError(f"{command} merge: name the shards' folders (SHARD_DIR...)")
    if not out:
        raise ShardError(f"{command} merge needs --out DIR for the merged run")
    records = [(Path(d), read_record(Path(d), command)) for d in dirs]
    check_same_run(records)
    results = [_merged_part(records, p) for p in range(len(records[0][1]["parts"]))]
    for p, result in enumerate(results):
        _merged_steps(records, p, result)
    first = records[0][1]
    options = {**first["options"], "out": str(out), "shard": None, "resume": False}
    options["json"] = None
    if check is not None:
        try:
            check(options, first["identity"])
        except UsageError as error:
            raise ShardError(f"{records[0][0] / RECORD}: {error}") from None
    refuse_other_writer(out, f"{command} merge")
    folder, created = output_folder(out, "--out")
    with RunLock(folder, f"{command} merge"):
        for name in ("transcript.jsonl", "results.json"):
            if (folder / name).exists():
                raise ShardError(f"--out {folder} already holds {name}; choose a new folder")
        _merge_transcripts([d for d, _ in records], folder, first)
    options["out"] = str(folder)
    extra = next(r["extra"] for _, r in records if r["shard"][0] == 0)
    return Merged(results, options, first["identity"], extra, folder, first["run"], created)


def read_record(folder: Path, command: str) -> dict:
    """A shard's record, every field checked (one-line :class:`ShardError` naming the file)."""
    path = folder / RECORD
    data = read_json_file(
        path,
        MAX_RECORD_BYTES,
        ShardError,
        "shard record",
        "no shard record (run the shard to its end)",
    )
    problem = _record_problem(data, command)
    if problem:
        raise ShardError(f"{path}: {problem}")
    return data


def _record_problem(data: Any, command: str) -> str:
    """What is wrong with a record ('' when nothing): format, fields, their types and ranges."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return "not a dilemmax shard record"
    if data.get("version") != VERSION:
        return f"shard record version {data.get('version')!r}, this dilemmax reads {VERSION}"
    if data.get("command") != command:
        return f"a shard of `dilemmax {data.get('command')}`, not of `dilemmax {command}`"
    shard, total = data.get("shard"), data.get("total")
    if not (_ints(shard, 2) and 0 <= shard[0] < shard[1]):
        return f"shard {shard!r} is not [i, N] with 0 <= i < N"
    if not (_is_int(total) and total >= 0):
        return f"total {total!r} is not a count"
    for name, kind in (("identity", dict), ("options", dict), ("extra", dict), ("parts", list)):
        if not isinstance(data.get(name), kind):
            return f"{name} is not a {kind.__name__}"
    if not isinstance(data.get("run"), str):
        return "run is not a run key"
    for p, part in enumerate(data["parts"]):
        problem = _part_problem(part)
        if problem:
            return f"part {p}: {problem}"
    return ""


def _part_problem(part: Any) -> str:
    if not isinstance(part, dict):
        return "not an object"
    dtypes, shapes = part.get("metric_dtypes"), part.get("metric_shapes")
    if not (isinstance(dtypes, dict) and isinstance(shapes, dict) and set(dtypes) == set(shapes)):
        return "metric_dtypes / metric_shapes do not name the same metrics"
    for name, dtype in dtypes.items():
        if not (isinstance(dtype, str) and len(dtype) <= 8 and _dtype_ok(dtype)):
            return f"metric {name!r}: dtype {str(dtype)[:20]!r} is not a number type"
        if not (isinstance(shapes[name], list) and all(_is_int(d) for d in shapes[name])):
            return f"metric {name!r}: shape {str(shapes[name])[:40]} is not a list of sizes"
    stats = part.get("stats")
    if not isinstance(stats, dict):
        return "stats is not an object"
    for seat, counts in stats.items():
        if not (
            isinstance(counts, dict) and set(REQUIRED_STATS) <= set(counts) <= set(STATS_FIELDS)
        ):
            return f"stats of {str(seat)[:60]!r} do not hold {list(REQUIRED_STATS)}"
        if not all(_is_number(v) for k, v in counts.items() if k in COUNTS):
            return f"stats of {str(seat)[:60]!r} are not numbers"
        if not _output_fields_ok(counts):
            return f"stats of {str(seat)[:60]!r}: the output mode fields are not text"
    if not (isinstance(part.get("episodes"), list) and _is_number(part.get("wall_s"))):
        return "episodes is not a list or wall_s not a number"
    steps = part.get("steps")
    if steps is not None and not (isinstance(steps, str) and STEPS_FILE.fullmatch(steps)):
        return f"steps {str(steps)[:40]!r} is not a steps file of the shard"
    for e, episode in enumerate(part["episodes"]):
        if not (isinstance(episode, dict) and _is_int(episode.get("order"))):
            return f"episode {e} has no order"
        if not (isinstance(episode.get("id"), str) and isinstance(episode.get("metrics"), dict)):
            return f"episode {e} has no id or metrics"
        if set(episode["metrics"]) != set(dtypes):
            return f"episode {e}'s metrics are not the part's ({sorted(dtypes)})"
        if steps is not None and not _replies_ok(episode.get("replies")):
            return f"episode {e}'s replies are not a list of act replies"
    return ""


def check_same_run(records: Sequence[tuple[Path, dict]]) -> None:
    """The records are the N shards of one run: same identity and sizes, each shard once, and
    every episode of the run exactly once, each in the shard it belongs to."""
    first_dir, first = records[0]
    count = first["shard"][1]
    seen: dict[int, Path] = {}
    for folder, record in records:
        mine, theirs = record["identity"], first["identity"]
        if mine != theirs:
            differ = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
            raise ShardError(
                f"{folder} is a shard of another run than {first_dir} (their {', '.join(differ)} "
                "differ; only --shard, --out and the server options may)"
            )
        for name in ("run", "total"):
            if record[name] != first[name]:
                raise ShardError(
                    f"{folder} is a shard of another run than {first_dir} ({name} differs)"
                )
        names = [p.get("name") for p in record["parts"]]
        if names != [p.get("name") for p in first["parts"]]:
            raise ShardError(f"{folder} plays other parts than {first_dir}")
        index, n = record["shard"]
        if n != count:
            raise ShardError(f"{folder} is shard {index}/{n}, {first_dir} one of {count}")
        if index in seen:
            raise ShardError(f"{folder} and {seen[index]} are both shard {index}/{count}")
        seen[index] = folder
    missing = sorted(set(range(count)) - set(seen))
    if missing:
        raise ShardError(f"shard(s) {', '.join(f'{i}/{count}' for i in missing)} not given")
    orders: dict[int, Path] = {}
    for folder, record in records:
        index = record["shard"][0]
        for part in record["parts"]:
            for episode in part["episodes"]:
                g = episode["order"]
                if g in orders:
                    raise ShardError(f"episode {episode['id']} is in both {orders[g]} and {folder}")
                if not 0 <= g < first["total"] or g % count != index:
                    raise ShardError(f"{folder}: episode {episode['id']} is not shard {index}'s")
                orders[g] = folder
    if len(orders) != first["total"]:
        lost = first["total"] - len(orders)
        raise ShardError(f"{lost} of the run's {first['total']} episodes are in no shard given")


def _merged_part(records, p: int) -> PlayResult:
    """Part ``p`` of the run: every shard's episodes in play order, metrics in their dtypes."""
    parts = [record["parts"][p] for _, record in records]
    episodes = sorted((e for part in parts for e in part["episodes"]), key=lambda e: e["order"])
    typed = next((part for part in parts if part["episodes"]), parts[0])
    metrics = {}
    for name, dtype in typed["metric_dtypes"].items():
        shape = (len(episodes), *typed["metric_shapes"][name])
        try:
            values = np.asarray([e["metrics"][name] for e in episodes], dtype=np.dtype(dtype))
        except (TypeError, ValueError, OverflowError):
            values = None
        if values is None or values.shape != shape:
            raise ShardError(f"part {p}: metric {name!r} of an episode is not of shape {shape[1:]}")
        metrics[name] = values
    stats: dict[str, CallStats] = {}
    for part in parts:
        for seat, counts in part["stats"].items():
            stats[seat] = stats.get(seat, CallStats()).merged(CallStats(**counts))
    left_out = ("order", "metrics", "replies")
    infos = [{k: v for k, v in e.items() if k not in left_out} for e in episodes]
    return PlayResult(metrics, infos, stats, float(sum(part["wall_s"] for part in parts)))


def _merged_steps(records, p: int, result: PlayResult) -> None:
    """Part ``p``'s kept steps (infos, valid, replies) from the shards, in play order."""
    # A shard that played none of the part's episodes has nothing to keep: left out.
    parts = [(f, record["parts"][p]) for f, record in records if record["parts"][p]["episodes"]]
    kept = {part["steps"] is not None for _, part in parts}
    if kept <= {False}:
        return
    if kept != {True}:
        raise ShardError(f"part {p}: some shards kept its steps and some did not")
    orders, arrays = [], []
    for folder, part in parts:
        path = folder / part["steps"]
        try:
            with np.load(path, allow_pickle=False) as data:
                loaded = {k: data[k] for k in data.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as error:  # cut short, say
            raise ShardError(f"{path}: not a readable steps file ({str(error)[:120]})") from None
        count = len(part["episodes"])
        if "valid" not in loaded or any(len(a) != count for a in loaded.values()):
            raise ShardError(f"{path}: its arrays do not hold the shard's {count} episodes")
        orders += [e["order"] for e in part["episodes"]]
        arrays.append(loaded)
    if any(a.keys() != arrays[0].keys() for a in arrays):
        raise ShardError(f"part {p}: the shards' steps files hold different infos")
    permutation = np.argsort(np.asarray(orders), kind="stable")
    joined = {k: np.concatenate([a[k] for a in arrays])[permutation] for k in arrays[0]}
    result.valid = joined.pop("valid")
    result.infos = _nested(joined, "infos")
    replies = [e["replies"] for _, part in parts for e in part["episodes"]]
    result.replies = [replies[i] for i in permutation]


def _flat(tree: Mapping[str, Any], prefix: str) -> dict[str, np.ndarray]:
    """A nested dict of arrays as ``prefix/a/b`` -> array."""
    out = {}
    for key, value in tree.items():
        name = f"{prefix}/{key}"
        out |= _flat(value, name) if isinstance(value, Mapping) else {name: np.asarray(value)}
    return out


def _nested(flat: Mapping[str, np.ndarray], prefix: str) -> dict[str, Any]:
    """:func:`_flat` undone."""
    out: dict[str, Any] = {}
    for name, value in flat.items():
        *path, leaf = name.removeprefix(prefix + "/").split("/")
        node = out
        for key in path:
            node = node.setdefault(key, {})
        node[leaf] = value
    return out


def _replies_ok(replies: Any) -> bool:
    return isinstance(replies, list) and all(
        isinstance(r, dict) and _is_int(r.get("step")) and isinstance(r.get("agent"), str)
        for r in replies
    )


def _merge_transcripts(dirs: Sequence[Path], folder: Path, first: dict) -> None:
    """The shards' call and episode lines, copied byte for byte, under the whole run's header,
    in shard order (a partial last line of a shard, which resuming would cut, is left out)."""
    shards = [_transcript_bytes(shard_dir / "transcript.jsonl") for shard_dir in dirs]
    # The whole run's header: the first shard's, which records the game and text protocol
    # versions every shard of the run was played under, with the whole run's key and identity.
    header = {**_first_line(shards[0], dirs[0] / "transcript.jsonl"), "type": "run"}
    header.update(run=first["run"], identity=first["identity"])
    with open(folder / "transcript.jsonl", "wb") as handle:
        handle.write((json.dumps(header, default=str) + "\n").encode())
        for data in shards:
            lines = data[: data.rfind(b"\n") + 1].split(b"\n")[1:]  # its own header dropped
            handle.writelines(line + b"\n" for line in lines if line.strip())


def _transcript_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise ShardError(f"{path}: cannot read the shard's transcript ({error})") from None


def _first_line(data: bytes, path: Path) -> dict:
    try:
        header = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        header = None
    if not isinstance(header, dict):
        raise ShardError(f"{path}: its first line is not a transcript header")
    return header


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _output_fields_ok(counts: dict) -> bool:
    """The output mode of a seat's stats: modes as text, the switch None or its call and error."""
    modes = [counts.get(k, "") for k in ("output_requested", "output_in_effect")]
    switch = counts.get("output_switch")
    if switch is not None and not (
        isinstance(switch, dict) and all(isinstance(v, str) for v in switch.values())
    ):
        return False
    return all(isinstance(mode, str) for mode in modes)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _ints(value: Any, length: int) -> bool:
    return isinstance(value, list) and len(value) == length and all(_is_int(v) for v in value)


def _dtype_ok(text: str) -> bool:
    try:
        return np.dtype(text).kind in DTYPE_KINDS
    except TypeError:
        return False
