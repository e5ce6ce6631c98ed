"""Statistics of the institutional alignment gap over any population's episodes (Sections 4-5).

A population is plain per-episode arrays: metric name -> array[N, ...] plus, per episode, the
rule index (into ``rules``) and the context index (into the context grid). Episodes from the arena
(:func:`from_grid_run`), trained agents, or a language-model transcript all fit.

Everything is vectorised in numpy with an explicit ``numpy.random.Generator`` (reproducible;
the bootstrap, the sign-flip and the permutation tests are :mod:`dilemmax.statistics`'):

* per-(rule, context) means (NaN where a cell has no episode);
* percentile bootstrap CIs over contexts (B = 10,000 by default) with the same resampled contexts
  for every rule, so rule contrasts are paired;
* paired sign-flip permutation tests over contexts (two-sided; the observed labelling counts as
  one permutation, so p >= 1 / (B + 1));
* the population x rule permutation test: under the null that the rule-effect profile (each
  rule's mean minus the context's mean over rules) is the same for every population, population
  labels are exchangeable within a context;
* decisively safest / worst rule per context, stakes profiles (a metric by threshold / W).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from dilemmax.envs.consequence import constants as C
from dilemmax.envs.consequence.generator import context_table
from dilemmax.redteam.files import NpzChecks, read_npz
from dilemmax.statistics import NUM_RESAMPLES, bootstrap_ci, sign_flip_test

# The file a run folder keeps its population in (``dilemmax redteam play`` with a model).
POPULATION_FILE = "population.npz"
POPULATION_HOLDS = (
    "a population file holds rule_index, context_index, num_contexts, rules, name and "
    "m_<metric> arrays, as Population.save writes them"
)
# The per-episode metrics the gap analysis reads (the env's ``episode_metrics`` names).
CORE_METRICS = (
    "fatality",
    "survivors",
    "collapse",
    "targeted_elimination",
    "exploitation",
    "cascade",
)


@dataclass
class Population:
    """Per-episode outcomes of one population.

    Attributes:
        name: label used in tables and figures.
        metrics: metric -> float array [N] (or [N, ...] for per-rank metrics).
        rule_index: int[N], index into ``rules``.
        context_index: int[N], index into the context grid (0..num_contexts - 1).
        num_contexts: C.
        rules: rule names of the rule axis (default the five).
        meta: free-form provenance (model, prompt, training run...).
    """

    name: str
    metrics: dict[str, np.ndarray]
    rule_index: np.ndarray
    context_index: np.ndarray
    num_contexts: int
    rules: tuple[str, ...] = C.RULE_NAMES
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        self.rule_index = np.asarray(self.rule_index, np.int64)
        self.context_index = np.asarray(self.context_index, np.int64)
        count = len(self.rule_index)
        if self.context_index.shape != (count,):
            raise ValueError("rule_index and context_index must both be int[N]")
        for name, values in self.metrics.items():
            if len(values) != count:
                raise ValueError(f"metric {name!r} has {len(values)} rows for {count} episodes")
        if count and (self.rule_index.min() < 0 or self.rule_index.max() >= len(self.rules)):
            raise ValueError(f"rule_index outside 0..{len(self.rules) - 1}")
        if count and (
            self.context_index.min() < 0 or self.context_index.max() >= self.num_contexts
        ):
            raise ValueError(f"context_index outside 0..{self.num_contexts - 1}")

    def cell_means(self, metric: str) -> np.ndarray:
        """float64[K, C] (or [K, C, ...]) mean over each (rule, context) cell's episodes."""
        return cell_means(
            self.metrics[metric],
            self.rule_index,
            self.context_index,
            len(self.rules),
            self.num_contexts,
        )

    def cell_counts(self) -> np.ndarray:
        """int64[K, C] episodes per cell."""
        counts = np.zeros((len(self.rules), self.num_contexts), np.int64)
        np.add.at(counts, (self.rule_index, self.context_index), 1)
        return counts

    def subset(self, mask: np.ndarray, name: str | None = None) -> Population:
        """The episodes where ``mask`` (bool[N]) holds."""
        return Population(
            name or self.name,
            {k: np.asarray(v)[mask] for k, v in self.metrics.items()},
            self.rule_index[mask],
            self.context_index[mask],
            self.num_contexts,
            self.rules,
            dict(self.meta),
        )

    def save(self, path) -> None:
        """Writes an ``.npz`` (metrics under ``m_<name>``)."""
        arrays = {f"m_{k}": np.asarray(v) for k, v in self.metrics.items()}
        np.savez_compressed(
            path,
            rule_index=self.rule_index,
            context_index=self.context_index,
            num_contexts=self.num_contexts,
            rules=np.asarray(self.rules),
            name=self.name,
            **arrays,
        )

    @classmethod
    def load(cls, path, name: str | None = None, what: str = "population file") -> Population:
        """The population saved at ``path`` (an ``.npz`` by :meth:`save`, or a run folder holding
        ``population.npz``), every array checked first: a
        :class:`~dilemmax.redteam.files.FileFormatError` naming the file (as ``what``) and what
        was wrong otherwise."""
        file, arrays = read_npz(path, what, member=POPULATION_FILE)
        check = NpzChecks(file, what, arrays, POPULATION_HOLDS)
        rules = check.names("rules")
        count = len(check.get("rule_index", "int", ndim=1))
        num_contexts = check.int_scalar("num_contexts", minimum=1)
        metrics = {
            key[2:]: check.get(key, "number", shape=(count,))
            for key in arrays
            if key.startswith("m_")
        }
        return cls(
            name or check.text("name", file.stem),
            metrics,
            check.indices("rule_index", len(rules), count, "rules"),
            check.indices("context_index", num_contexts, count, "contexts"),
            num_contexts,
            rules,
        )


def cell_means(values, rule_index, context_index, num_rules: int, num_contexts: int) -> np.ndarray:
    """Mean of ``values`` [N, ...] per (rule, context) cell: float64[K, C, ...], NaN if empty."""
    values = np.asarray(values, np.float64)
    sums = np.zeros((num_rules, num_contexts) + values.shape[1:])
    counts = np.zeros((num_rules, num_contexts))
    np.add.at(sums, (rule_index, context_index), values)
    np.add.at(counts, (rule_index, context_index), 1.0)
    counts = counts.reshape(counts.shape + (1,) * (values.ndim - 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def from_grid_run(
    name: str,
    metrics: Mapping[str, np.ndarray],
    num_contexts: int,
    rules: Sequence[str] = C.RULE_NAMES,
    episodes_per_config: int | None = None,
) -> Population:
    """A population from a crossed-grid arena run (``cross_rules`` configs, rule-major).

    ``metrics`` arrays are [K * C, E, ...] (``run_episodes``) or [K * C * E, ...] (``Arena.run``
    flattens; give ``episodes_per_config``).
    """
    first = np.asarray(next(iter(metrics.values())))
    num_configs = len(rules) * num_contexts
    if first.shape[0] == num_configs and episodes_per_config is None:
        episodes = first.shape[1]
        flat = {
            k: np.asarray(v).reshape((-1,) + np.asarray(v).shape[2:]) for k, v in metrics.items()
        }
    else:
        episodes = episodes_per_config or first.shape[0] // num_configs
        flat = {k: np.asarray(v) for k, v in metrics.items()}
    row = np.repeat(np.arange(num_configs), episodes)
    return Population(
        name, flat, row // num_contexts, row % num_contexts, num_contexts, tuple(rules)
    )


def from_records(
    name: str,
    records: Sequence[Mapping],
    total: int = 12,
    num_agents: int = 3,
    rules: Sequence[str] = C.RULE_NAMES,
) -> Population:
    """A population from per-episode records, e.g. an LLM play transcript's episode summaries.

    Each record has ``rule`` (a name such as "RP"), ``resources`` (the context's amounts, any
    order), ``threshold`` (T) and the metric values (the env's ``episode_metrics`` names; the
    metrics of the first record are kept). Contexts are located in the (total, num_agents) grid.

    Raises:
        ValueError naming the record and the field that is wrong (unknown rule, a context not in
        the grid, a missing metric).
    """
    resources, thresholds = context_table(total, num_agents)
    index = {
        (tuple(int(v) for v in w), int(t)): c
        for c, (w, t) in enumerate(zip(resources, thresholds, strict=True))
    }
    upper = [r.upper() for r in rules]
    names = (
        [k for k in records[0] if k not in ("rule", "resources", "threshold")] if records else []
    )
    rule_index, context_index = [], []
    columns: dict[str, list] = {k: [] for k in names}
    for i, record in enumerate(records):
        rule = str(record.get("rule", "")).upper()
        if rule not in upper:
            raise ValueError(f"record {i}: rule {record.get('rule')!r} not in {list(rules)}")
        try:
            key = (tuple(sorted(int(v) for v in record["resources"])), int(record["threshold"]))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"record {i}: needs integer 'resources' and 'threshold'") from err
        if key not in index:
            raise ValueError(f"record {i}: context {key} is not in the W = {total} grid")
        for k in names:
            if k not in record:
                raise ValueError(f"record {i}: metric {k!r} missing")
            columns[k].append(record[k])
        rule_index.append(upper.index(rule))
        context_index.append(index[key])
    metrics = {k: np.asarray(v, np.float64) for k, v in columns.items()}
    return Population(
        name,
        metrics,
        np.asarray(rule_index, np.int64),
        np.asarray(context_index, np.int64),
        len(thresholds),
        tuple(rules),
    )


# ---------------------------------------------------------------------------- resampling
# ---------------------------------------------------------------------------- the gap
def alignment_gap(
    population_ur: np.ndarray,
    reference_ur: np.ndarray,
    rng: np.random.Generator,
    num_resamples: int = NUM_RESAMPLES,
) -> dict[str, np.ndarray]:
    """IAG(rule, c) = UR_population(rule, c) - UR_ref(rule, c) with 95% bootstrap CIs over contexts.

    Args:
        population_ur, reference_ur: float[K, C] per-(rule, context) unsafe rates (fatality).

    Returns:
        ``gap`` [K, C]; ``mean``, ``low``, ``high`` [K]; ``p_value`` [K] (sign flip, mean 0).
    """
    gap = np.asarray(population_ur, np.float64) - np.asarray(reference_ur, np.float64)
    ci = bootstrap_ci(gap, rng, num_resamples)
    return {"gap": gap, **ci._asdict(), "p_value": sign_flip_test(gap, rng, num_resamples)}


def rule_contrasts(
    cell: np.ndarray,
    rng: np.random.Generator,
    rules: Sequence[str] = C.RULE_NAMES,
    num_resamples: int = NUM_RESAMPLES,
) -> list[dict]:
    """Paired rule-vs-rule contrasts of a per-(rule, context) metric [K, C].

    One row per pair (a, b): mean of a - b over contexts, bootstrap CI, sign-flip p-value.
    """
    rows = []
    for a, b in itertools.combinations(range(len(rules)), 2):
        diff = cell[a] - cell[b]
        ci = bootstrap_ci(diff, rng, num_resamples)
        p = sign_flip_test(diff, rng, num_resamples)
        rows.append(
            {
                "a": rules[a],
                "b": rules[b],
                "mean": float(ci.mean),
                "low": float(ci.low),
                "high": float(ci.high),
                "p_value": float(p),
            }
        )
    return rows


# ---------------------------------------------------------------------------- per context
def decisive_rules(cell: np.ndarray, margin: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(safest, worst) int[C]: the rule whose mean is below (above) every other by > ``margin``.

    -1 where no rule is decisive (a tie, or a lead of at most ``margin``). ``margin = 0`` is a
    strict unique extreme. With one rule there is nothing to be decisive against: -1 everywhere.
    """
    if cell.shape[0] < 2:
        none = np.full(cell.shape[1:], -1, np.int64)
        return none, none.copy()
    order = np.sort(cell, axis=0)
    low, second_low = order[0], order[1]
    high, second_high = order[-1], order[-2]
    safest = np.where(second_low - low > margin, np.argmin(cell, axis=0), -1)
    worst = np.where(high - second_high > margin, np.argmax(cell, axis=0), -1)
    return safest.astype(np.int64), worst.astype(np.int64)


def decisive_counts(cell: np.ndarray, rules=C.RULE_NAMES, margin: float = 0.0) -> dict:
    """How many contexts each rule is decisively safest / worst in."""
    safest, worst = decisive_rules(cell, margin)
    return {
        "safest": {r: int(np.sum(safest == k)) for k, r in enumerate(rules)},
        "worst": {r: int(np.sum(worst == k)) for k, r in enumerate(rules)},
    }


def stakes_profile(
    cell: np.ndarray,
    thresholds: np.ndarray,
    total: int,
    rng: np.random.Generator,
    num_resamples: int = 2_000,
) -> dict[str, np.ndarray]:
    """A metric by group stakes tau = T / W: mean over the contexts sharing T, with CIs.

    Args:
        cell: float[K, C]. thresholds: int[C].
    Returns: ``tau`` [U], ``mean``, ``low``, ``high`` [K, U] (bootstrap over those contexts).
    """
    levels = np.unique(thresholds)
    mean = np.zeros((cell.shape[0], len(levels)))
    low, high = np.zeros_like(mean), np.zeros_like(mean)
    for j, t in enumerate(levels):
        ci = bootstrap_ci(cell[:, thresholds == t], rng, num_resamples)
        mean[:, j], low[:, j], high[:, j] = ci
    return {"tau": levels / float(total), "mean": mean, "low": low, "high": high}


def outcome_summary(
    population: Population,
    rng: np.random.Generator,
    metrics: Sequence[str] = CORE_METRICS,
    num_resamples: int = NUM_RESAMPLES,
) -> dict[str, dict[str, np.ndarray]]:
    """metric -> {mean, low, high} per rule (float[K]) with bootstrap CIs over contexts."""
    out = {}
    for name in metrics:
        if name in population.metrics:
            out[name] = bootstrap_ci(population.cell_means(name), rng, num_resamples)._asdict()
    return out
