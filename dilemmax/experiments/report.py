"""What an experiment writes, and reading it back for ``dilemmax experiment combine``.

A run folder gets ``results.json`` (the design, its paper section, the model calls made, the
seats, the options and the design's own results under ``"results"``), one ``<table>.md`` per
table and one ``<figure>.png`` per figure (matplotlib's Agg backend: no display needed); a
figure that cannot be drawn is named under ``figures_failed`` instead.
:func:`read_results` checks a ``results.json`` from elsewhere before a design's ``combine`` sees
it: a foreign or damaged file is a one-line error naming it.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dilemmax.commandline import headless_pyplot, read_json_file
from dilemmax.errors import UsageError
from dilemmax.experiments.design import Report

FORMAT = "dilemmax-experiment"
VERSION = 1
FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
MAX_RESULTS_BYTES = 256 << 20  # a results.json this large is no experiment's


class ResultsError(UsageError):
    """A results.json that is not a run of the design asked for (or not one at all)."""


def write_report(out: Path, header: Mapping[str, Any], report: Report) -> list[Path]:
    """``results.json`` (``header`` and the report's results), tables and figures in ``out``;
    the paths written, in that order.

    A figure that cannot be drawn (a design's drawing code meeting data it did not foresee)
    fails no run: it is named in one line on stderr and under ``figures_failed`` in
    results.json, and the results and tables are written all the same. results.json is written
    last, so a folder holding it holds the whole report.
    """
    for name in [*report.tables, *report.figures]:
        if not FILE_NAME.fullmatch(name):
            raise ValueError(f"table / figure name {name!r} is not a plain file name")
    tables = [
        _write_text(out / f"{name}.md", markdown.rstrip("\n") + "\n")
        for name, markdown in report.tables.items()
    ]
    drawn, failed = _draw_figures(out, report.figures)
    payload = _payload(header, report, sorted(path.stem for path in drawn), failed)
    return [_write_text(out / "results.json", _dumps(payload)), *tables, *drawn]


def results_payload(header: Mapping[str, Any], report: Report) -> dict:
    """What ``results.json`` would hold for a run written nowhere (no figure drawn), as it reads
    back from the file."""
    return json.loads(_dumps(_payload(header, report, [], {})))


def _payload(header, report: Report, figures: list[str], failed: dict[str, str]) -> dict:
    return {
        "format": FORMAT,
        "version": VERSION,
        **header,
        "tables": sorted(report.tables),
        "figures": figures,
        **({"figures_failed": failed} if failed else {}),
        "results": report.results,
    }


def _draw_figures(out: Path, figures: Mapping[str, Any]) -> tuple[list[Path], dict[str, str]]:
    """(the PNGs drawn, figure -> why it could not be drawn)."""
    if not figures:
        return [], {}
    pyplot = headless_pyplot()  # pyplot loads only when a design has figures to draw
    drawn, failed = [], {}
    for name, draw in figures.items():
        path = out / f"{name}.png"
        try:
            draw(str(path))
        except Exception as error:  # any drawing failure is named, and the run goes on
            failed[name] = f"{type(error).__name__}: {' '.join(str(error).split())[:200]}"
            path.unlink(missing_ok=True)
            print(f"figure {name} not drawn ({failed[name]})", file=sys.stderr)
        else:
            drawn.append(path)
        finally:
            pyplot.close("all")
    return drawn, failed


def _dumps(payload: Mapping[str, Any]) -> str:
    """JSON with non-finite numbers as null (JSON has no NaN) and numpy scalars as numbers."""
    return json.dumps(_finite(payload), indent=1, default=_plain, allow_nan=False) + "\n"


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, str):  # numpy arrays and scalars
        return _finite(value.tolist())
    return value


def _plain(value: Any) -> Any:
    return str(value)


def _write_text(path: Path, text: str) -> Path:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
    return path


def read_results(folder: str | Path, design: str) -> dict:
    """``folder/results.json`` of a finished run of ``design``, checked before use."""
    path = Path(folder) / "results.json"
    data = read_json_file(
        path, MAX_RESULTS_BYTES, ResultsError, "experiment's results.json",
        f"no results.json (is {folder} a finished run?)",
    )  # fmt: skip
    problem = _problem(data, design)
    if problem:
        raise ResultsError(f"{path}: {problem}")
    return data


def _problem(data: Any, design: str) -> str:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return "not the results of a dilemmax experiment"
    if data.get("version") != VERSION:
        return f"results version {data.get('version')!r}, this dilemmax reads {VERSION}"
    if data.get("design") != design:
        return f"results of {str(data.get('design'))[:60]!r}, not of {design!r}"
    if data.get("combined_from") is not None:
        return "results combined from several runs; combine the runs themselves"
    for name, kind in (("results", dict), ("options", dict), ("seats", dict)):
        if not isinstance(data.get(name), kind):
            return f"{name} is not a {kind.__name__}"
    return ""
