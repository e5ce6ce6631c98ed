"""Helpers of the moral-hazard design tests (no network): a design's options parsed as the runner
parses them, a design run through ``dilemmax experiment`` in-process, and a planted model
behind a LocalChatServer."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from dilemmax.cli import main
from dilemmax.experiments.cli import parse_design_argv
from dilemmax.experiments.moral_hazard.planted import boundary_model
from dilemmax.llm.server import LocalChatServer


def parse(design, argv: list[str]) -> tuple:
    """(params, run options) of ``dilemmax experiment <design> <argv>``."""
    return parse_design_argv(design, argv)


def run_experiment(command: list[str], out: Path) -> SimpleNamespace:
    """``dilemmax experiment <command> --out out`` in-process: the run folder's results (the
    design's own under ``results``), tables (name -> markdown) and files."""
    assert main(["experiment", *command, "--out", str(out), "--no-progress"]) == 0
    whole = json.loads((out / "results.json").read_text())
    tables = {p.stem: p.read_text() for p in out.glob("*.md")}
    return SimpleNamespace(whole=whole, results=whole["results"], tables=tables, out=out)


@pytest.fixture(scope="session")
def planted_server():
    """A planted boundary model (queries iff alpha > alpha*(k) + 0.02; under a team contract
    iff k < 0.30) on 127.0.0.1."""
    with LocalChatServer(boundary_model(shift=0.02, team_cost_cut=0.30)) as server:
        yield server
