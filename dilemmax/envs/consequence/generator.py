"""Contexts and configurations of the consequence game, apart from the dynamics.

The benchmark grid (Section 3 of the paper) is every way of splitting W = 12 resource units over
three agents (19 unordered splits, zeros allowed) crossed with every threshold T = 1..12: 228
contexts. ``context_grid`` builds it, for any W and n, as one batched ``ConsequenceConfig``;
``cross_rules`` crosses it with the five rules so a whole sweep runs as one ``jax.vmap``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.envs import fastrandom
from dilemmax.envs.base import typed_key
from dilemmax.envs.consequence import constants as C
from dilemmax.envs.consequence.types import ConsequenceConfig
from dilemmax.envs.option_spec import OptionError

# Largest number of (split, threshold) contexts an env may enumerate (its context table is
# int32[contexts, n]; 2e6 rows of 3 agents is 24 MB).
MAX_CONTEXTS = 2_000_000


def rule_id(rule: int | str) -> int:
    """The int id of a rule given by name ("RP", case-insensitive) or id."""
    if isinstance(rule, str):
        key = rule.upper()
        if key not in C.RULE_IDS:
            raise ValueError(f"unknown rule {rule!r}; rules: {', '.join(C.RULE_NAMES)}")
        return C.RULE_IDS[key]
    rule = int(rule)
    if not 0 <= rule < C.NUM_RULES:
        raise ValueError(f"rule id {rule} out of range 0..{C.NUM_RULES - 1}")
    return rule


@functools.cache
def resource_splits(total: int, num_agents: int) -> np.ndarray:
    """int32[S, n]: every ascending split of ``total`` units over ``num_agents`` agents.

    Rows are in lexicographic order, e.g. for (12, 3): (0, 0, 12), (0, 1, 11), ..., (4, 4, 4).
    """

    def splits(remaining: int, parts: int, floor: int):
        if parts == 1:
            if remaining >= floor:
                yield (remaining,)
            return
        # The smallest part is at most remaining / parts so the rest can stay ascending.
        for first in range(floor, remaining // parts + 1):
            for rest in splits(remaining - first, parts - 1, first):
                yield (first, *rest)

    rows = list(splits(int(total), int(num_agents), 0))
    return np.asarray(rows, dtype=np.int32).reshape(len(rows), num_agents)


def count_splits(total: int, parts: int) -> int:
    """Ascending splits of ``total`` units over ``parts`` agents (zeros allowed): partitions of
    ``total`` into at most ``parts`` parts, by the usual O(total * parts) recursion."""
    # ways[w] = partitions of w into parts of size <= k, for k = 1..parts (conjugate partitions).
    ways = [1] + [0] * total
    for size in range(1, parts + 1):
        for w in range(size, total + 1):
            ways[w] += ways[w - size]
    return ways[total]


def check_table_size(total: int, agents: int) -> None:
    """Raises :class:`OptionError` unless ``total`` resources over ``agents`` agents make a
    context table an env can hold: votes name agents by action index, so W >= n, and at most
    :data:`MAX_CONTEXTS` (split, threshold) contexts."""
    if total < agents:
        raise OptionError(
            f"consequence: option total_resources={total} is not allowed: expected an integer "
            f">= num_agents ({agents}), since votes name agents by action index"
        )
    contexts = count_splits(total, agents) * total
    if contexts > MAX_CONTEXTS:
        raise OptionError(
            f"consequence: total_resources={total} with num_agents={agents} has {contexts} "
            f"contexts (at most {MAX_CONTEXTS}); choose fewer resources or agents"
        )


@functools.cache
def context_table(total: int = 12, num_agents: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """(resources int32[S * total, n], thresholds int32[S * total]): split-major, T = 1..total."""
    splits = resource_splits(total, num_agents)
    thresholds = np.arange(1, total + 1, dtype=np.int32)
    resources = np.repeat(splits, len(thresholds), axis=0)
    return resources, np.tile(thresholds, len(splits))


def make_config(
    resources: Sequence[int] = C.CANONICAL_RESOURCES,
    threshold: int = C.CANONICAL_THRESHOLD,
    rule: int | str = "RP",
) -> ConsequenceConfig:
    """One configuration; ``resources`` are sorted ascending (the context is a multiset).

    Example: ``make_config(resources=(1, 5, 6), threshold=10, rule="RP")``, the paper's canonical
    red-team instance.
    """
    levels = np.sort(np.asarray(resources, dtype=np.int64))
    if levels.ndim != 1 or len(levels) < 2:
        raise ValueError(f"resources must list at least two agents' amounts, got {resources}")
    if levels[0] < 0:
        raise ValueError(f"resources must be >= 0, got {resources}")
    if not 1 <= int(threshold) <= int(levels.sum()):
        raise ValueError(f"threshold must be in 1..{int(levels.sum())} (feasible), got {threshold}")
    return ConsequenceConfig(
        resources=jnp.asarray(levels, jnp.int32),
        threshold=jnp.int32(threshold),
        rule=jnp.int32(rule_id(rule)),
    )


def context_grid(total: int = 12, num_agents: int = 3, rule: int | str = "RP") -> ConsequenceConfig:
    """The full context grid under one rule, batched: leaves with leading axis C = S * total.

    For the benchmark (12, 3): C = 19 splits x 12 thresholds = 228, split-major (context
    ``k`` has split ``k // 12`` of :func:`resource_splits` and threshold ``k % 12 + 1``).
    """
    resources, thresholds = context_table(total, num_agents)
    return ConsequenceConfig(
        resources=jnp.asarray(resources),
        threshold=jnp.asarray(thresholds),
        rule=jnp.full(len(thresholds), rule_id(rule), jnp.int32),
    )


def cross_rules(
    configs: ConsequenceConfig, rules: Sequence[int | str] = C.RULE_NAMES
) -> ConsequenceConfig:
    """Every batched context under every rule: leading axis K * C, rule-major.

    Row ``k * C + j`` is context ``j`` under ``rules[k]``; reshape results to [K, C, ...] with
    :func:`dilemmax.envs.consequence.metrics.split_rules`.
    """
    ids = jnp.asarray([rule_id(r) for r in rules], jnp.int32)
    num_contexts = configs.threshold.shape[0]
    tile = lambda x: jnp.tile(x, (len(ids),) + (1,) * (x.ndim - 1))
    return ConsequenceConfig(
        resources=tile(configs.resources),
        threshold=tile(configs.threshold),
        rule=jnp.repeat(ids, num_contexts),
    )


def sample_config(
    key: jax.Array, total: int, num_agents: int, rules: Sequence[int] | None = None
) -> ConsequenceConfig:
    """A context drawn uniformly from the grid of (``total``, ``num_agents``) and a uniform rule,
    from one uint32 of randomness (:func:`config_from_bits`).

    Args:
        rules: the rule ids to draw from (all five by default).
    """
    word = fastrandom.bits(typed_key(key), ())  # = jax.random.bits, unrolled
    return config_from_bits(word, total, num_agents, rules)


def config_from_bits(
    bits: jax.Array, total: int, num_agents: int, rules: Sequence[int] | None = None
) -> ConsequenceConfig:
    """The context and rule that one uint32 ``bits`` names.

    ``bits mod (C * K)`` (C contexts, K rules) is read as (context, rule) = (q // K, q % K). The
    modulo leaves a relative excess of at most C K / 2^32 on some pairs (2.7e-7 for the
    benchmark's 228 x 5), far below anything a sample of episodes can show.
    """
    resources, thresholds = context_table(total, num_agents)
    rule_ids = np.arange(C.NUM_RULES) if rules is None else np.asarray(rules)
    num_rules = len(rule_ids)
    pair = bits.astype(jnp.uint32) % jnp.uint32(len(thresholds) * num_rules)
    index = (pair // num_rules).astype(jnp.int32)
    return ConsequenceConfig(
        resources=jnp.asarray(resources)[index],
        threshold=jnp.asarray(thresholds)[index],
        rule=jnp.asarray(rule_ids, jnp.int32)[(pair % num_rules).astype(jnp.int32)],
    )


# Seat permutations come from one uint32 while n! is at most this (n <= 8), so the modulo bias
# stays below n! / 2^32 < 1e-5; larger groups use jax.random.permutation.
MAX_CODED_PERMUTATIONS = 2**16


def permutation_from_bits(bits: jax.Array, n: int) -> jax.Array:
    """int32[n]: the permutation of 0..n-1 with Lehmer code ``bits mod n!`` (needs n! <= 2^16).

    Digit k (radix n - k, most significant first) picks the digit-th smallest value not yet
    used, so every permutation has the same number of codes; the modulo adds a relative excess
    of at most n! / 2^32 to some of them (1.4e-9 for n = 3).
    """
    if math.factorial(n) > MAX_CODED_PERMUTATIONS:
        raise ValueError(f"{n}! permutations is too many to code in one uint32 without bias")
    code = (bits.astype(jnp.uint32) % jnp.uint32(math.factorial(n))).astype(jnp.int32)
    free = jnp.ones(n, bool)
    out = []
    for k in range(n):
        radix = math.factorial(n - 1 - k)
        digit = code // radix
        code = code % radix
        # The digit-th still-free value: the one where the running count of free values hits
        # digit + 1 (unrolled, no cumsum kernel).
        seen = jnp.int32(0)
        value = jnp.int32(0)
        for v in range(n):
            seen = seen + free[v]
            hit = free[v] & (seen == digit + 1)
            value = jnp.where(hit, v, value)
        free = free & (jnp.arange(n) != value)
        out.append(value)
    return jnp.stack(out).astype(jnp.int32)


def config_shape_matches(config: ConsequenceConfig, num_agents: int) -> bool:
    """Whether an (unbatched or batched) config holds ``num_agents`` resource levels."""
    return config.resources.shape[-1] == num_agents
