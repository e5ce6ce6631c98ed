"""The files a fine-tuning command is given, checked before any model is loaded.

A dataset (a folder written by ``dilemmax finetune data``, or a JSONL file), a model folder and
an adapter folder may come from anywhere: another version of the library, a download cut short, a
file given by mistake. Each is checked here, and what is wrong is a :class:`DatasetError` (or the
client's :class:`~dilemmax.llm.hf_client.ModelFolderError`) naming the file, the line and what was
expected, which the ``dilemmax`` command prints as one line with exit status 2, instead of a
traceback minutes later from inside TRL.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from dilemmax.errors import UsageError
from dilemmax.finetune.datasets import SPLITS, DatasetSpec
from dilemmax.llm.hf_client import check_adapter_folder, check_model_folder

# The fields each trainer reads from a record (``dilemmax finetune data`` writes them all).
SFT_FIELDS = ("prompt", "completion")
RLOO_FIELDS = ("prompt", "target", "context", "legal", "num_agents", "protocol")
# A hub id (``org/name``): a --model that is no local folder is handed to transformers as one.
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


class DatasetError(UsageError, ValueError):
    """A dataset file that is not what the command reads; the message names the file."""


# ------------------------------------------------------------------------------ records
def _messages(value, name: str, where: str) -> None:
    """A TRL conversation: a non-empty list of {"role": str, "content": str}."""
    if not isinstance(value, list) or not value:
        raise DatasetError(f"{where}: {name!r} must be a non-empty list of messages")
    for message in value:
        if not (
            isinstance(message, Mapping)
            and isinstance(message.get("role"), str)
            and isinstance(message.get("content"), str)
        ):
            raise DatasetError(f"{where}: each {name!r} message needs a string role and content")


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_record(record, where: str, need: Sequence[str]) -> None:
    """Raises DatasetError unless ``record`` has the fields ``need`` names, each of its kind."""
    if not isinstance(record, Mapping):
        raise DatasetError(f"{where}: a record must be a JSON object, got {type(record).__name__}")
    missing = [name for name in need if name not in record]
    if missing:
        raise DatasetError(f"{where}: the record has no {', '.join(map(repr, missing))}")
    for name in need:
        value = record[name]
        if name in ("prompt", "completion"):
            _messages(value, name, where)
        elif name in ("target", "num_agents") and not _integer(value):
            raise DatasetError(f"{where}: {name!r} must be an integer, got {value!r:.40}")
        elif name == "context" and not isinstance(value, str):
            raise DatasetError(f"{where}: 'context' must be a JSON string")
        elif name == "legal" and not (
            isinstance(value, list) and value and all(_integer(a) for a in value)
        ):
            raise DatasetError(f"{where}: 'legal' must be a non-empty list of integers")
    if "protocol" in record and not isinstance(record["protocol"], str):
        raise DatasetError(f"{where}: 'protocol' must be a JSON string of protocol options")


def _split_file(data: Path, split: str, option: str) -> Path:
    if data.is_dir():
        file = data / f"{split}.jsonl"
        if not file.is_file():
            present = sorted(p.name for p in data.glob("*.jsonl")) or "no .jsonl file"
            raise DatasetError(
                f"{option} {data} has no {split}.jsonl (it holds {present}); expected a folder "
                "written by `dilemmax finetune data`, or a .jsonl file"
            )
        return file
    if not data.is_file():
        raise DatasetError(f"{option} {data}: no such file or folder")
    return data


def read_records(
    data, split: str, need: Sequence[str] = SFT_FIELDS, option: str = "--data"
) -> list[dict[str, Any]]:
    """The records of ``split`` in the dataset ``data`` (a dataset folder or a JSONL file), each
    checked for the fields ``need``; a DatasetError naming the file and line otherwise, and for a
    file with no record of ``split``."""
    file = _split_file(Path(data), split, option)
    records = []
    try:
        with file.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                where = f"{option} {file} line {number}"
                try:
                    record = json.loads(line)
                except ValueError as err:
                    raise DatasetError(f"{where} is not JSON: {err}") from None
                check_record(record, where, ())
                if record.get("split", split) == split:
                    check_record(record, where, need)
                    records.append(record)
    except (OSError, UnicodeError) as err:
        raise DatasetError(f"{option} {file} cannot be read as UTF-8 text: {err}") from None
    if not records:
        raise DatasetError(f"{option} {file} holds no {split} records")
    return records


def read_spec(data, option: str = "--data") -> DatasetSpec:
    """The :class:`DatasetSpec` of the dataset folder ``data`` (its ``spec.json``), checked."""
    file = Path(data) / "spec.json"
    if not file.is_file():
        raise DatasetError(f"{option} {data} has no spec.json (a `dilemmax finetune data` folder)")
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeError, ValueError) as err:
        raise DatasetError(f"{option} {file} is not readable JSON: {err}") from None
    if not isinstance(raw, dict):
        raise DatasetError(f"{option} {file} is not a JSON object")
    names = {f.name for f in fields(DatasetSpec)}
    values = {k: v for k, v in raw.items() if k in names}
    try:
        for name in ("costs", "team_weights", "num_agents", "provenances", "fractions"):
            if name in values:
                values[name] = tuple(values[name])
        spec = DatasetSpec(**values)
    except (TypeError, ValueError) as err:
        raise DatasetError(f"{option} {file} is not a dataset spec: {err}") from None
    if not isinstance(spec.protocol_options, Mapping):
        raise DatasetError(f"{option} {file}: protocol_options must be a JSON object")
    return spec


# ------------------------------------------------------------------------ model folders
def check_model(name: str, option: str = "--model", local: bool = False) -> str:
    """``name`` if it is a local model folder that passes the client's checks, or else (unless
    ``local``: the play client loads folders only) has the form of a hub id, which transformers
    then resolves; a one-line error otherwise."""
    path = Path(name)
    if local or path.exists() or not HUB_ID.fullmatch(name):
        check_model_folder(path, option)
    return name


def check_adapter(path: str | None, option: str = "--adapter") -> str | None:
    """``path`` (or None) checked as a PEFT adapter folder."""
    if path is not None:
        check_adapter_folder(path, option)
    return path


def check_splits(data, option: str = "--data") -> None:
    """Every split file a dataset folder names is readable (used before long evaluations)."""
    for split in SPLITS:
        if (Path(data) / f"{split}.jsonl").is_file():
            read_records(data, split, (), option)
