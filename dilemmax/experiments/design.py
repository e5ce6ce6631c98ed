"""What a paper's experiment is to ``dilemmax experiment``: a :class:`Design`.

A design says what to play (its :class:`Plan`: parts, each a game, its configurations and its
seats) and what to make of it (``analyse``: a :class:`Report` of results, markdown tables and
figures). The runner (``dilemmax.experiments.runner``) plays every part through the batched
harness under one transcript (resume, progress bar, the seat options of ``dilemmax play``), then
writes ``results.json``, one ``<table>.md`` per table and one ``<figure>.png`` per figure.
Results of several runs combine into the cross-model tables through ``combine``.

A design declares its own parameters once, as a frozen dataclass (``Design.params``: each field
its type, its default, the paper's size, and its help in ``metadata``). The command line's
``dilemmax experiment <design> --x ...`` options, Inspect's ``-T x=...`` parameters of the design's
task and :func:`dilemmax.experiments.run`'s keyword arguments are all read off those fields. A
design plans from its parameters and the run's
:class:`~dilemmax.llm.session_options.SessionOptions` (the seats the user gave, the seed, the run
folder, the model options): never from a command line.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dilemmax.errors import UsageError
from dilemmax.llm.play import PlayResult
from dilemmax.llm.session import Part
from dilemmax.llm.session_options import SessionOptions

__all__ = ["Design", "DesignParams", "NoParams", "ParamError", "Part", "Plan", "Report",
           "SessionOptions", "make_params", "param_names", "param_values"]  # fmt: skip


# --------------------------------------------------------------------------- parameters
class ParamError(UsageError):
    """A parameter value its field's type refuses (``name``, and ``problem``: what is wrong)."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"parameter {name}: {problem}")
        self.name, self.problem = name, problem


def param_kind(cls: type, spec: dataclasses.Field) -> tuple[type, bool]:
    """(the parameter's value type: bool, int, float, str or tuple, whether None is allowed),
    read off its annotation."""
    hint = typing.get_type_hints(cls)[spec.name]
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    optional = type(None) in args
    (kind,) = [typing.get_origin(a) or a for a in args if a is not type(None)]
    return kind, optional


@dataclass(frozen=True)
class DesignParams:
    """A design's own parameters (a frozen dataclass subclassing this one, fields declared with
    :func:`~dilemmax.envs.option_declaration.setting`). Every value is checked against its
    field's type when the parameters are made, so a bad value from the command line, an Inspect
    ``-T`` or a notebook is the same one-line :class:`~dilemmax.errors.UsageError` naming the
    parameter. Lenient where the caller cannot choose the type: ``-T no_probes=true`` arrives as
    text, ``-T rules=RP`` as one word, ``costs=(0, 0.4)`` from Python as a sequence."""

    def __post_init__(self) -> None:
        for spec in dataclasses.fields(self):
            value = _coerced(type(self), spec, getattr(self, spec.name))
            object.__setattr__(self, spec.name, value)


# Module functions, not methods: a design may name a parameter anything (``names``, ``values``).
def param_names(cls: type[DesignParams]) -> list[str]:
    """The parameters of a design's ``params`` dataclass, in declaration order."""
    return [f.name for f in dataclasses.fields(cls)]


def make_params(cls: type[DesignParams], values: Mapping[str, Any], where: str = ""):
    """The parameters ``values`` names (missing ones at their defaults); an unknown name is a
    one-line UsageError listing the known ones."""
    known = param_names(cls)
    unknown = sorted(set(values) - set(known))
    if unknown:
        prefix = f"{where}: " if where else ""
        raise UsageError(f"{prefix}no parameter {unknown[0]!r}; parameters: {known}")
    return cls(**values)


def param_values(params: DesignParams) -> dict[str, Any]:
    """name -> value, in name order (what a run's identity and results record)."""
    return {name: getattr(params, name) for name in sorted(param_names(type(params)))}


_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


def _coerced(cls: type, spec: dataclasses.Field, value: Any) -> Any:
    kind, optional = param_kind(cls, spec)
    name = spec.name
    if value is None:
        if optional:
            return None
        raise ParamError(name, "needs a value (got None)")
    if kind is bool:
        if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
            return value.strip().lower() in _TRUE
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif kind is str:
        if (
            spec.metadata.get("list")
            and isinstance(value, Sequence | int | float)
            and not (isinstance(value, str | bool))
        ):
            items = value if isinstance(value, Sequence) else [value]
            return ",".join(str(v) for v in items)
        if isinstance(value, str):
            return value
    elif kind is tuple:
        if isinstance(value, str):
            return (value,)
        if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
            return tuple(value)
    raise ParamError(name, f"{str(value)[:40]!r} is not {_KIND_WORDS[kind]}")


_KIND_WORDS = {
    bool: "true or false",
    int: "a whole number",
    float: "a number",
    str: "text",
    tuple: "a list of words",
}


@dataclass(frozen=True)
class NoParams(DesignParams):
    """The parameters of a design that has none."""


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
    """A paper's experiment, run by ``dilemmax experiment <name>`` and
    :func:`dilemmax.experiments.run`.

    Attributes:
        name: ``<game>/<design>`` (``moral_hazard/isolation``).
        section: the paper and section it reproduces.
        summary: one line for ``dilemmax experiment --list``.
        params: its parameters' dataclass (a :class:`DesignParams`; defaults the paper's sizes).
        plan: (params, run) -> the :class:`Plan` to play.
        analyse: (plan, one PlayResult per part in plan order, params, run, extra) ->
            :class:`Report`; ``extra`` is what ``extra`` returned ({} without one).
        combine: several runs' ``results.json`` contents -> the cross-model :class:`Report`
            (None: the design has no cross-run table).
        extra: run after playing and before ``analyse``, for what is asked of a model outside
            the game (the moral-hazard probes): (plan, params, run) -> a JSON-serialisable dict
            handed to ``analyse``.
    """

    name: str
    section: str
    summary: str
    params: type[DesignParams]
    plan: Callable[[Any, SessionOptions], Plan]
    analyse: Callable[[Plan, Sequence[PlayResult], Any, SessionOptions, dict], Report]
    combine: Callable[[Sequence[Mapping[str, Any]]], Report] | None = None
    extra: Callable[[Plan, Any, SessionOptions], dict] | None = None
