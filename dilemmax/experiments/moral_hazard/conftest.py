"""Plays a design's plan through the batched harness without the runner (no network): each
part's fixed seats plus the user's ``--seats``, a planted model behind a LocalChatServer."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace

import jax
import pytest

from dilemmax.cli import main
from dilemmax.experiments.moral_hazard.planted import boundary_model
from dilemmax.llm.play import BatchedPlay
from dilemmax.llm.seats import add_model_arguments, build_seat
from dilemmax.llm.server import LocalChatServer


def parse(design, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seat", action="append")
    parser.add_argument("--seats")
    add_model_arguments(parser)
    design.add_arguments(parser)
    args = parser.parse_args(argv)
    args.env, args.grid = "moral_hazard", False
    return args


def play(design, argv: list[str], out=None, resume: bool = False):
    """(plan, results, extra, report) of ``design`` under ``argv``."""
    args = parse(design, argv)
    plan = design.plan(args)
    cache: dict = {}
    results = []
    for part in plan.parts:
        seats = [
            build_seat(part.seats.get(agent) or args.seats, part.env, args, cache)
            for agent in part.env.agents
        ]
        runner = BatchedPlay(part.env, seats, part.env.text_protocol(), num_envs=16)
        results.append(runner.run(jax.random.key(0), part.episodes, part.configs, part=part.name))
    extra = design.extra(plan, args, out, resume) if design.extra else {}
    return plan, results, extra, design.analyse(plan, results, args, extra)


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
