"""What a paper's experiment is to ``dilemmax experiment``: a :class:`Design`.

A design says what to play (its :class:`Plan`: parts, each a game, its configurations and its
seats) and what to make of it (``analyse``: a :class:`Report` of results, markdown tables and
figures). The runner (``dilemmax.experiments.runner``) plays every part through the batched
harness under one transcript (resume, progress bar, the seat options of ``dilemmax play``), then
writes ``results.json``, one ``<table>.md`` per table and one ``<figure>.png`` per figure.
Results of several runs combine into the cross-model tables through ``combine``.

A design module builds its parts from the user's namespace (``args``: the options of
``dilemmax play`` plus the design's own, added by ``add_arguments``), so the paper's sizes are
the defaults and a quick look shrinks them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dilemmax.llm.play import PlayResult
from dilemmax.llm.session import Part  # noqa: F401 (the session plays parts; designs import it here)


@dataclass(frozen=True)
class Plan:
    """What a design plays: its parts in order, and anything ``analyse`` needs beside them."""

    parts: Sequence[Part]
    context: Mapping[str, Any] = field(default_factory=dict)  # e.g. the grid's costs and shares

    @property
    def calls(self) -> float:
        """Expected model calls of the whole plan."""
        runs = [
            p.episodes * _num_configs(p) * (p.env.num_agents if p.rotate else 1) for p in self.parts
        ]
        return sum(r * p.calls_per_episode for r, p in zip(runs, self.parts, strict=True))


def _num_configs(part: Part) -> int:
    return 1 if part.config_names is None else len(part.config_names)


@dataclass
class Report:
    """What ``analyse`` (or ``combine``) gives back, written by the runner.

    Attributes:
        results: JSON-serialisable results (``DIR/results.json``).
        tables: table name -> markdown (``DIR/<name>.md``), same rows, columns and units as the
            paper's table.
        figures: figure name -> a function that draws the figure into the PNG path it is given.
    """

    results: dict[str, Any]
    tables: dict[str, str] = field(default_factory=dict)
    figures: dict[str, Callable[[str], None]] = field(default_factory=dict)


@dataclass(frozen=True)
class Design:
    """A paper's experiment, run by ``dilemmax experiment <name>``.

    Attributes:
        name: ``<game>/<design>`` (``moral_hazard/isolation``).
        section: the paper and section it reproduces.
        summary: one line for ``dilemmax experiment --list``.
        add_arguments: adds the design's own options (sizes to shrink, cells to keep).
        plan: args -> the :class:`Plan` to play.
        analyse: (plan, one PlayResult per part in plan order, args, extra) -> :class:`Report`;
            ``extra`` is what ``extra`` returned ({} without one).
        combine: several runs' ``results.json`` contents -> the cross-model :class:`Report`
            (None: the design has no cross-run table).
        extra: run after playing and before ``analyse``, for what is asked of a model outside
            the game (the moral-hazard probes): (plan, args, out folder or None, resume) -> a
            JSON-serialisable dict handed to ``analyse``.
    """

    name: str
    section: str
    summary: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    plan: Callable[[argparse.Namespace], Plan]
    analyse: Callable[[Plan, Sequence[PlayResult], argparse.Namespace, dict], Report]
    combine: Callable[[Sequence[Mapping[str, Any]]], Report] | None = None
    extra: Callable[..., dict] | None = None


def add_option(parser: argparse.ArgumentParser, flag: str, **kwargs) -> None:
    """Adds ``flag`` to a design's parser unless it has it already: the runner's shared options
    (and a sibling design's, where designs share a parser) win."""
    if flag not in parser._option_string_actions:  # argparse keeps no public lookup
        parser.add_argument(flag, **kwargs)
