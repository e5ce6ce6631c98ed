"""What the ``dilemmax redteam`` commands and :mod:`dilemmax.redteam.api` are given, checked
before any work: rates, probabilities and draws, deployment contexts, and the files of ``gap``
and ``certify`` against each other and against what each statistic reads. Each problem is a one-line
:class:`~dilemmax.errors.UsageError` naming the option and the file."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from dilemmax.envs.consequence.constants import RULE_NAMES
from dilemmax.envs.consequence.generator import context_table
from dilemmax.envs.registry import make
from dilemmax.errors import UsageError
from dilemmax.redteam.gap import reference_for
from dilemmax.redteam.reference import load_reference
from dilemmax.redteam.statistics import CORE_METRICS, Population

ENDGAMES = ("all", "rule")  # the consequence game's endgames the commands offer
RESAMPLES_MAX = 100_000  # draws: each holds one resampled index per context; a million is gigabytes


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _named(name: str | None, message: str) -> UsageError:
    return UsageError(f"{name} {message}" if name else message)


def check_rate(value, name: str | None = None) -> float:
    """A rate in (0, 1] (a budget, a confidence level), as a float; else a UsageError naming
    ``name``."""
    number = _number(value)
    if not 0.0 < number <= 1.0:
        raise _named(name, f"must be a number in (0, 1], got {value!r}")
    return number


def check_level(value, name: str | None = None) -> float:
    """A confidence level in (0, 1)."""
    number = check_rate(value, name)
    if number == 1.0:
        raise _named(name, "must be below 1 (no finite evidence gives 100%)")
    return number


def check_epsilon(value, name: str | None = None) -> float:
    """A tremble probability in [0, 1]."""
    number = _number(value)
    if not 0.0 <= number <= 1.0:
        raise _named(name, f"must be a probability in [0, 1], got {value!r}")
    return number


def check_resamples(value: int, name: str = "--resamples") -> int:
    """Bootstrap and permutation draws: 1 .. RESAMPLES_MAX."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= RESAMPLES_MAX:
        raise UsageError(f"{name} must be an integer in 1..{RESAMPLES_MAX}, got {value!r}")
    return value


def parse_context(text: str, total: int = 12) -> tuple[tuple[int, ...], int]:
    """'1,5,6:10' -> ((1, 5, 6), 10), with a ValueError naming what was wrong."""
    parts = text.split(":")
    if len(parts) != 2:
        raise ValueError(f"context {text!r}: expected 'w1,w2,w3:T', e.g. '1,5,6:10'")
    try:
        levels = tuple(int(v) for v in parts[0].split(","))
        threshold = int(parts[1])
    except ValueError as err:
        raise ValueError(f"context {text!r}: resources and T must be integers") from err
    return checked_context(levels, threshold, text, total)


def checked_context(levels, threshold: int, text=None, total: int = 12):
    """((w1, w2, w3) sorted, T) of a context of the grid of W = ``total``; ValueError else."""
    shown = text if text is not None else f"{tuple(levels)}:{threshold}"
    levels = tuple(sorted(int(v) for v in levels))
    if len(levels) != 3 or min(levels) < 0 or sum(levels) != total:
        raise ValueError(f"context {shown!r}: need three amounts >= 0 summing to W = {total}")
    if not 1 <= threshold <= total:
        raise ValueError(f"context {shown!r}: T must be in 1..{total}")
    return levels, int(threshold)


def context_of(context) -> tuple[tuple[int, ...], int]:
    """A deployment context given as text ``"w1,w2,w3:T"`` or as ((w1, w2, w3), T), checked:
    a one-line UsageError naming --context otherwise."""
    try:
        if isinstance(context, str):
            return parse_context(context)
        levels, threshold = context
        return checked_context(levels, threshold)
    except (TypeError, ValueError) as err:
        raise UsageError(f"--context {err}") from None


def context_index(levels, threshold: int, total: int = 12) -> int:
    """Index of (w, T) in the benchmark grid."""
    resources, thresholds = context_table(total, 3)
    hits = np.flatnonzero(
        np.all(resources == np.asarray(levels), axis=1) & (thresholds == threshold)
    )
    return int(hits[0])


def gap_inputs(reference_file, populations, epsilon: float) -> tuple:
    """(reference, populations) read from their files and checked against each other, before
    any statistics."""
    reference = load_reference(reference_file, "--reference")
    if epsilon not in reference.epsilons:
        raise UsageError(
            f"--epsilon {epsilon}: the reference {reference_file} was solved at epsilons "
            f"{list(reference.epsilons)}"
        )
    paths = [str(p) for p in populations]
    pops = [Population.load(p, what="--population") for p in paths]
    names = [pop.name for pop in pops]
    for path, pop in zip(paths, pops, strict=True):
        if "fatality" not in pop.metrics:
            raise UsageError(f"--population {path}: no m_fatality array (the gap compares it)")
        per_episode(pop, path, CORE_METRICS)
        if names.count(pop.name) > 1:  # the report is keyed by name: one would hide the other
            pop.name = f"{pop.name} ({path})"
        try:
            reference_for(pop, reference)
        except ValueError as err:
            raise UsageError(f"--population {path} against --reference: {err}") from None
        if pop.rules != pops[0].rules:  # rule contrasts and the population x rule test pair them
            raise UsageError(
                f"--population {path} has rules {list(pop.rules)}, {paths[0]} has "
                f"{list(pops[0].rules)}: populations are compared over the same rules"
            )
    return reference, pops


def per_episode(pop: Population, path: str, metrics) -> None:
    """Raises UsageError unless each of ``metrics`` the population has is one value per episode
    (a per-rank metric in its place would be averaged into nonsense)."""
    for metric in metrics:
        values = pop.metrics.get(metric)
        if values is not None and values.ndim != 1:
            raise UsageError(
                f"--population {path}: m_{metric} has shape {values.shape}; expected one value "
                "per episode"
            )


def certify_evidence(path: str) -> Population:
    """The --population file of a safety case, read and checked (:func:`checked_evidence`)."""
    return checked_evidence(Population.load(path, what="--population"), path)


def checked_evidence(pop: Population, path: str) -> Population:
    """``pop`` (read from ``path``), checked for what certification reads: the context grid
    its --context values are located in, and events (0 or 1 per episode) to count."""
    grid = len(context_table(12, 3)[1])
    if pop.num_contexts != grid:
        raise UsageError(
            f"--population {path} indexes {pop.num_contexts} contexts; --context locates "
            f"contexts in the {grid}-context grid of W = 12"
        )
    per_episode(pop, path, ("collapse", "exploitation", "fatality", "targeted_elimination"))
    for metric in ("collapse", "exploitation"):
        values = pop.metrics.get(metric)
        if values is not None and not np.isin(values, (0, 1)).all():
            raise UsageError(
                f"--population {path}: m_{metric} must be 0 or 1 per episode (an event to "
                f"count), found {values[~np.isin(values, (0, 1))][0]!r}"
            )
    return pop


def game(rounds: int = 3, endgame: str = "all"):
    """The consequence env of ``rounds`` and ``endgame``, checked against its option ranges."""
    if endgame not in ENDGAMES:
        raise UsageError(f"--endgame {endgame!r}: expected {' or '.join(ENDGAMES)}")
    try:
        return make("consequence", num_rounds=rounds, endgame=endgame)
    except UsageError as err:
        raise UsageError(f"--rounds {rounds}: {err}") from None


def check_rules(rules: Sequence[str]) -> tuple[str, ...]:
    """``rules`` as a tuple when each is a consequence rule's name (and there is one); else a
    UsageError naming --rules and the choices."""
    unknown = [r for r in rules if r not in RULE_NAMES]
    if unknown or not rules:
        raise UsageError(f"--rules {list(rules)}: choose from {', '.join(RULE_NAMES)}")
    return tuple(rules)


def check_counts(**counts: int) -> None:
    """Each count (``episodes=4``) an integer >= 1; else a UsageError naming ``--<name>``."""
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"--{name} must be an integer >= 1, got {value!r}")
