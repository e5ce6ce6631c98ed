"""What the ``dilemmax redteam`` commands are given, checked before any work: the argument
types of rates and probabilities, and the files of ``gap`` and ``certify`` against each other and
against what each statistic reads. Each problem is a one-line
:class:`~dilemmax.errors.UsageError` naming the option and the file."""

from __future__ import annotations

import argparse
import math

import numpy as np

from dilemmax.envs.consequence.generator import context_table
from dilemmax.errors import UsageError
from dilemmax.redteam.gap import reference_for
from dilemmax.redteam.reference import load_reference
from dilemmax.redteam.statistics import CORE_METRICS, Population


def rate(text: str) -> float:
    """argparse type of a rate in (0, 1]: a budget, a confidence level."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}")
    return value


def level(text: str) -> float:
    """argparse type of a confidence level in (0, 1)."""
    value = rate(text)
    if value == 1.0:
        raise argparse.ArgumentTypeError("must be below 1 (no finite evidence gives 100%)")
    return value


def epsilon(text: str) -> float:
    """argparse type of a tremble probability in [0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a probability in [0, 1], got {text!r}")
    return value


def gap_inputs(args) -> tuple:
    """(reference, populations) read and checked against each other, before any statistics."""
    reference = load_reference(args.reference, "--reference")
    if args.epsilon not in reference.epsilons:
        raise UsageError(
            f"--epsilon {args.epsilon}: the reference {args.reference} was solved at epsilons "
            f"{list(reference.epsilons)}"
        )
    pops = [Population.load(p, what="--population") for p in args.population]
    names = [pop.name for pop in pops]
    for path, pop in zip(args.population, pops, strict=True):
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
                f"--population {path} has rules {list(pop.rules)}, {args.population[0]} has "
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
    """The --population of a safety case, checked for what certification reads: the context grid
    its --context values are located in, and events (0 or 1 per episode) to count."""
    pop = Population.load(path, what="--population")
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
