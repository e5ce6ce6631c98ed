"""Intervals and tests over many episodes, runs, contexts or models: the one home every layer
uses (the games' metrics, evaluations, play results, red-teaming, scenarios, the papers' tables).

Randomness is named by the ``rng`` argument, and it decides where a function runs:

- a JAX PRNG key: in JAX (float32, jittable and vmappable; one row of samples, vmap for more;
  ``mask`` marks the valid entries);
- a seed (int) or a ``numpy.random.Generator``: in float64 numpy over the last axis of
  ``values`` [..., N], every leading row on the same draws (paired), NaNs dropped. A Generator
  is advanced, so the calls sharing one draw one stream.

Intervals (every one holds its estimate: ``low <= estimate <= high``, even where every value is
equal and the resampled means differ from the mean by an ulp):

- :func:`bootstrap_ci`: percentile bootstrap of a mean (Monte Carlo), as :class:`Interval`, and
  :func:`bootstrap_rows` of every row of a table at once (a play run's metrics);
- :func:`exact_bootstrap`: the same with every one of the n^n resamples counted (n <= 10);
- :func:`cluster_share_ci`: shares of labelled items with a bootstrap over their clusters;
- :func:`t_interval`: the 95% Student t interval of a mean; :func:`standard_error` of a mean;
- :func:`wilson_interval` and :func:`clopper_pearson`: a binomial rate's (low, high).

Tests: :func:`sign_flip_test` (paired, two-sided; exact or Monte Carlo),
:func:`population_rule_test` (a population x rule interaction, labels permuted within contexts),
:func:`benjamini_hochberg` and :func:`holm` (multiplicity), :func:`paired_dz` (effect size);
:func:`isotonic` and :func:`level_crossing` (where a noisy rising rate reaches a level).

Only what runs vectorised over many cells or resamples (the bootstraps, the sign-flip and
permutation tests, in :mod:`~dilemmax.statistics.resampling`) is written here; the rest
(:mod:`~dilemmax.statistics.closed_form`) is scipy's: ``binomtest(...).proportion_ci``, ``t``,
``sem``, ``false_discovery_control`` (``scipy.stats``) and ``optimize.isotonic_regression``.
Import every name from ``dilemmax.statistics``.
"""

from dilemmax.statistics.closed_form import (
    T95,
    T95_DOF,
    Interval,
    benjamini_hochberg,
    clopper_pearson,
    holm,
    isotonic,
    level_crossing,
    normal_quantile,
    paired_dz,
    standard_error,
    t95,
    t_interval,
    wilson_interval,
)
from dilemmax.statistics.resampling import (
    BOOTSTRAP_BLOCK,
    EXACT_BOOTSTRAP_MAX,
    EXACT_SIGN_FLIP_MAX,
    NUM_RESAMPLES,
    Rng,
    bootstrap_ci,
    bootstrap_rows,
    cluster_share_ci,
    exact_bootstrap,
    population_rule_test,
    sign_flip_test,
)

__all__ = [
    "BOOTSTRAP_BLOCK",
    "EXACT_BOOTSTRAP_MAX",
    "EXACT_SIGN_FLIP_MAX",
    "Interval",
    "NUM_RESAMPLES",
    "Rng",
    "T95",
    "T95_DOF",
    "benjamini_hochberg",
    "bootstrap_ci",
    "bootstrap_rows",
    "clopper_pearson",
    "cluster_share_ci",
    "exact_bootstrap",
    "holm",
    "isotonic",
    "level_crossing",
    "normal_quantile",
    "paired_dz",
    "population_rule_test",
    "sign_flip_test",
    "standard_error",
    "t95",
    "t_interval",
    "wilson_interval",
]
