"""Configurations of the Dialogue Moral Hazard Game: cases, single conditions, condition grids.

Cases (utilities, local questions, unsafe options) are drawn in JAX, so ``reset_to`` can draw a
fresh instance per episode inside a vmapped program; conditions (payoff contract, provenance,
mapping, payoff) are built on the host by :func:`make_config` and stacked into grids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.envs import fastrandom
from dilemmax.envs.base import typed_key
from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard.types import MoralHazardConfig
from dilemmax.envs.unrolled import first_argmax, first_argmax_of

# ----------------------------------------------------------------------------------- cases


# A case is drawn from one uint32: bit 0 is the question, bits 1-2 the unsafe label used under
# the uninformative mapping, bits 3-31 the index of the ordered utility tuple (below).
NUM_VALUES = c.MAX_UTILITY - c.MIN_UTILITY + 1  # 12
NUM_TUPLES = 12 * 11 * 10 * 9  # ordered 4-tuples of distinct values: 11,880
TUPLE_BITS = 29


def unsafe_by_mapping(key: jax.Array, utilities: jax.Array, mapping: jax.Array) -> jax.Array:
    """int32[n]: the unsafe option of each case under ``mapping`` (0 highest, 1 random, 2 lowest).

    Under mapping 1 the unsafe option is uniform over the four labels independently of the
    utilities, so its utility rank is uniform and utility carries no information about safety.
    """
    draw = jax.random.randint(key, utilities.shape[:-1], 0, c.NUM_OPTIONS)
    return _unsafe_option(utilities, mapping, draw)


def _unsafe_option(utilities: jax.Array, mapping: jax.Array, draw: jax.Array) -> jax.Array:
    """int32[n]: highest / ``draw`` / lowest option of each case by ``mapping``."""
    return jnp.select(
        [mapping == c.MAP_HIGHEST, mapping == c.MAP_LOWEST],
        [first_argmax(utilities), first_argmax(-utilities)],
        draw,
    ).astype(jnp.int32)


def utility_tuple(index: jax.Array) -> jax.Array:
    """int32[..., 4]: ordered tuple ``index`` (0 .. 11,879) of four distinct values in 2..13.

    The index is read as digits (d0, d1, d2, d3) of radix (12, 11, 10, 9), most significant
    first, and digit k names the d_k-th smallest value not yet used: a bijection onto the 11,880
    ordered tuples in lexicographic order (a Lehmer code). Elementwise, no table to gather from.
    """
    d0, rest = index // (11 * 10 * 9), index % (11 * 10 * 9)
    d1, rest = rest // (10 * 9), rest % (10 * 9)
    d2, d3 = rest // 9, rest % 9
    v0 = d0
    v1 = d1 + (d1 >= v0)
    low, high = jnp.minimum(v0, v1), jnp.maximum(v0, v1)
    v2 = d2 + (d2 >= low)
    v2 = v2 + (v2 >= high)
    # The three used values in increasing order, for the last digit.
    s0 = jnp.minimum(low, v2)
    s2 = jnp.maximum(high, v2)
    s1 = v0 + v1 + v2 - s0 - s2
    v3 = d3 + (d3 >= s0)
    v3 = v3 + (v3 >= s1)
    v3 = v3 + (v3 >= s2)
    return (jnp.stack([v0, v1, v2, v3], axis=-1) + c.MIN_UTILITY).astype(jnp.int32)


def cases_from_bits(bits: jax.Array, mapping: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(utilities int32[n, 4], question int32[n], unsafe int32[n]) from uint32[n] random words.

    Bit 0 of each word is the question and bits 1-2 the uniform unsafe label (used by the
    uninformative mapping): both exactly uniform and independent of each other and of the
    utilities. Bits 3-31 (2^29 values) modulo 11,880 index the utility tuple: 1,832 tuples get
    45,192 of the 2^29 values and the others 45,191, a relative excess of 1 / 45,191 (2.2e-5)
    for those tuples.
    """
    bits = bits.astype(jnp.uint32)
    question = (bits & 1).astype(jnp.int32)
    draw = ((bits >> 1) & 3).astype(jnp.int32)
    index = ((bits >> (32 - TUPLE_BITS)) % NUM_TUPLES).astype(jnp.int32)
    utilities = utility_tuple(index)
    unsafe = _unsafe_option(utilities, jnp.asarray(mapping, jnp.int32), draw)
    return utilities, question, unsafe


def sample_cases(
    key: jax.Array, num_agents: int, mapping: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Draws ``num_agents`` cases, one uint32 of randomness each (:func:`cases_from_bits`).

    Returns:
        utilities int32[n, 4]: four distinct integers from 2..13 per case, in random label order
            (uniform over the 11,880 ordered tuples up to the 2.2e-5 bias stated there);
        question int32[n]: highest (0) or lowest (1) with probability 1/2 each;
        unsafe int32[n]: the highest- or lowest-utility option, or under the uninformative
            mapping a label uniform over A-D independent of the utilities.
    """
    bits = fastrandom.bits(typed_key(key), (num_agents,))  # = jax.random.bits, unrolled
    return cases_from_bits(bits, mapping)


def with_sampled_cases(key: jax.Array, config: MoralHazardConfig) -> MoralHazardConfig:
    """``config`` with fresh cases when ``config.sample_cases``, unchanged otherwise (jittable)."""
    utilities, question, unsafe = sample_cases(key, config.num_agents, config.mapping)
    pick = lambda new, old: jnp.where(config.sample_cases, new, old)
    return config.replace(
        utilities=pick(utilities, config.utilities),
        question=pick(question, config.question),
        unsafe=pick(unsafe, config.unsafe),
    )


def target_options(utilities: jax.Array, unsafe: jax.Array) -> jax.Array:
    """int32[...]: a_i*, the highest-utility option that is not unsafe (utilities are distinct).

    Option by option, with no [..., NUM_OPTIONS] table in between: under vmap XLA wrote that
    table out on every step (0.8 of 10.6 ms summed over threads at 65,536 envs).
    """
    return first_argmax_of(
        [jnp.where(unsafe == option, -1, utilities[..., option]) for option in range(c.NUM_OPTIONS)]
    )


def local_answers(utilities: jax.Array, question: jax.Array) -> jax.Array:
    """int32[...]: the correct answer to each case's local question."""
    return jnp.where(
        question == c.ASK_HIGHEST, first_argmax(utilities), first_argmax(-utilities)
    ).astype(jnp.int32)


# ------------------------------------------------------------------------------ conditions


def _index(name: str, names: tuple[str, ...], what: str) -> int:
    if name not in names:
        raise ValueError(f"{what} must be one of {names}, got {name!r}")
    return names.index(name)


def _check_unit(name: str, value: float) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1] (it is observed as such), got {value}")
    return value


# A fixed, valid placeholder case for configs whose cases are drawn at reset.
_PLACEHOLDER_UTILITIES = (13, 9, 6, 2)


def make_config(
    num_agents: int = 2,
    *,
    cost: float = c.PRIMARY_COST,
    w_local: float = c.PRIMARY_W_LOCAL,
    w_final: float = c.PRIMARY_W_FINAL,
    w_team: float = c.PRIMARY_W_TEAM,
    provenance: str = "anonymous",
    mapping: str = "highest",
    payoff: str = "team",
    shares: Sequence[float] | None = None,
    utilities: Sequence[Sequence[int]] | None = None,
    unsafe: Sequence[int] | None = None,
    questions: Sequence[int | str] | None = None,
    key: jax.Array | None = None,
) -> MoralHazardConfig:
    """One condition of the game, as an unbatched :class:`MoralHazardConfig`.

    Args:
        num_agents: n, 2..9.
        cost, w_local, w_final, w_team: k, w_L, w_F, w_T (each in [0, 1]).
        provenance: "anonymous" (primary) or "visible".
        mapping: "highest" (primary), "uninformative" or "lowest": where unsafe options sit.
        payoff: "team" (every agent is paid R_game) or "private" (agent i is paid U_i).
        shares: alpha, n non-negative numbers summing to 1; default 1/n each.
        utilities: int[n][4] to play fixed cases (distinct values in 2..13 per case); with it,
            ``questions`` (0/"highest" or 1/"lowest") is required and ``unsafe`` defaults to the
            option ``mapping`` designates ("uninformative" then needs an explicit ``unsafe``).
        key: draw the cases now from this key (fixed for the episode) instead of at reset.

    Without ``utilities`` and ``key`` the config has ``sample_cases`` set: every ``reset_to``
    draws a new instance of the condition.
    """
    n = int(num_agents)
    if not c.MIN_AGENTS <= n <= c.MAX_AGENTS:
        raise ValueError(f"num_agents must be in {c.MIN_AGENTS}..{c.MAX_AGENTS}, got {n}")
    mapping_id = _index(mapping, c.MAPPING_NAMES, "mapping")
    visible = _index(provenance, c.PROVENANCE_NAMES, "provenance") == 1
    private = _index(payoff, c.PAYOFF_NAMES, "payoff") == 1
    weights = {
        name: _check_unit(name, value)
        for name, value in (
            ("cost", cost),
            ("w_local", w_local),
            ("w_final", w_final),
            ("w_team", w_team),
        )
    }
    alpha = np.full(n, 1.0 / n) if shares is None else np.asarray(shares, dtype=np.float64)
    if alpha.shape != (n,) or np.any(alpha < 0) or np.any(alpha > 1):
        raise ValueError(f"shares must be {n} numbers in [0, 1], got {shares}")
    if abs(alpha.sum() - 1.0) > 1e-5:
        raise ValueError(f"shares must sum to 1, got {alpha.sum()}")

    if utilities is not None:
        cases = _fixed_cases(n, mapping_id, utilities, unsafe, questions)
        sample = False
    elif key is not None:
        cases = sample_cases(key, n, jnp.int32(mapping_id))
        sample = False
    else:
        util = jnp.tile(jnp.asarray(_PLACEHOLDER_UTILITIES, jnp.int32), (n, 1))
        cases = (util, jnp.zeros(n, jnp.int32), jnp.zeros(n, jnp.int32))
        sample = True
    util, question, unsafe_opt = cases
    f32 = lambda v: jnp.asarray(v, jnp.float32)
    return MoralHazardConfig(
        utilities=jnp.asarray(util, jnp.int32),
        unsafe=jnp.asarray(unsafe_opt, jnp.int32),
        question=jnp.asarray(question, jnp.int32),
        mapping=jnp.int32(mapping_id),
        sample_cases=jnp.bool_(sample),
        provenance_visible=jnp.bool_(visible),
        w_local=f32(weights["w_local"]),
        w_final=f32(weights["w_final"]),
        w_team=f32(weights["w_team"]),
        cost=f32(weights["cost"]),
        shares=f32(alpha),
        private_reward=jnp.bool_(private),
    )


def _fixed_cases(n, mapping_id, utilities, unsafe, questions):
    util = np.asarray(utilities, dtype=np.int64)
    if util.shape != (n, c.NUM_OPTIONS):
        raise ValueError(f"utilities must have shape ({n}, 4), got {util.shape}")
    if util.min() < c.MIN_UTILITY or util.max() > c.MAX_UTILITY:
        raise ValueError(f"utilities must lie in {c.MIN_UTILITY}..{c.MAX_UTILITY}")
    if any(len(set(row)) != c.NUM_OPTIONS for row in util.tolist()):
        raise ValueError("the four utilities of a case must be distinct")
    if questions is None:
        raise ValueError("fixed cases need their local questions")
    question = np.asarray(
        [q if isinstance(q, int | np.integer) else c.QUESTION_NAMES.index(q) for q in questions]
    )
    if question.shape != (n,) or not np.isin(question, (0, 1)).all():
        raise ValueError(f"questions must be {n} entries of 0/'highest' or 1/'lowest'")
    if unsafe is None:
        if mapping_id == c.MAP_UNINFORMATIVE:
            raise ValueError("the uninformative mapping needs explicit unsafe options")
        unsafe_opt = util.argmax(-1) if mapping_id == c.MAP_HIGHEST else util.argmin(-1)
    else:
        unsafe_opt = np.asarray(unsafe)
        if unsafe_opt.shape != (n,) or not np.isin(unsafe_opt, range(c.NUM_OPTIONS)).all():
            raise ValueError(f"unsafe must be {n} options in 0..3")
    return util, question, unsafe_opt


def stack_configs(configs: Sequence[MoralHazardConfig]) -> MoralHazardConfig:
    """A batched config (leading axis C) from configs of the same number of agents."""
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *configs)


def index_config(configs: MoralHazardConfig, i: int) -> MoralHazardConfig:
    """Condition ``i`` of a batched config."""
    return jax.tree.map(lambda leaf: leaf[i], configs)


@dataclass(frozen=True)
class ConditionSet:
    """Named conditions of one group size, stacked into one batched config.

    Attributes:
        names: one name per condition, e.g. "k=0.10" or "k=0.10 alpha=0.45".
        configs: batched :class:`MoralHazardConfig` with leading axis C = len(names).
        num_agents: n (a static shape, shared by every condition of the set).
        values: the swept numbers per condition (name -> float[C]), for plots and tables.
    """

    names: tuple[str, ...]
    configs: MoralHazardConfig
    num_agents: int
    values: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.names)


def condition_grid(mapping: str = "highest", payoff: str = "team") -> dict[int, ConditionSet]:
    """The paper's 15 one-at-a-time conditions around the primary setting, grouped by n.

    Primary: n = 2, k = 0.10, (w_L, w_F, w_T) = (0.35, 0.15, 0.50), anonymous provenance. One
    parameter moves at a time: k over {0, 0.05, 0.10, 0.20, 0.35}; w_T over {0, 0.2, 0.5, 0.8,
    1.0}; n over {2, 3, 4}; provenance visible / anonymous. The primary setting appears once in
    each sweep, as in the paper's tables, so there are 15 conditions and 13 of them have n = 2.

    Because n is a static shape, the grid comes as ``{2: 13 conditions, 3: 1, 4: 1}``; each
    group is one batched config that runs as one vmapped call. Every condition draws fresh
    cases per episode (``sample_cases``).
    """
    groups: dict[int, list[tuple[str, MoralHazardConfig, dict]]] = {}

    def add(name, n=2, **options):
        cfg = make_config(n, mapping=mapping, payoff=payoff, **options)
        value = {
            "cost": options.get("cost", c.PRIMARY_COST),
            "w_team": options.get("w_team", c.PRIMARY_W_TEAM),
            "num_agents": n,
            "provenance_visible": float(options.get("provenance", "anonymous") == "visible"),
        }
        groups.setdefault(n, []).append((name, cfg, value))

    for k in c.GRID_COSTS:
        add(f"k={k:.2f}", cost=k)
    for w in c.GRID_TEAM_WEIGHTS:
        add(f"w_T={w:.2f}", w_team=w)
    for n in c.GRID_NUM_AGENTS:
        add(f"n={n}", n=n)
    for provenance in c.GRID_PROVENANCE:
        add(f"provenance={provenance}", provenance=provenance)
    return {n: condition_set(n, rows) for n, rows in sorted(groups.items())}


def condition_set(n: int, rows) -> ConditionSet:
    """The :class:`ConditionSet` of ``n`` agents from ``rows`` of (name, config, parameters)."""
    names = tuple(name for name, _, _ in rows)
    keys = rows[0][2].keys()
    values = {k: np.asarray([v[k] for _, _, v in rows], dtype=np.float64) for k in keys}
    return ConditionSet(names, stack_configs([cfg for _, cfg, _ in rows]), n, values)


def incentive_grid(
    costs: Sequence[float] = c.ISOLATION_COSTS,
    shares: Sequence[float] = c.ISOLATION_SHARES,
    num_agents: int = 2,
    focal: int = 0,
    **contract,
) -> ConditionSet:
    """The incentive-isolation design: every (k, alpha_focal) pair, private-share reward.

    The focal agent's share is alpha; the others split 1 - alpha equally, so shares sum to one
    and the social score is unchanged. Seat the focal policy at ``focal`` and the scripted
    partners (:func:`dilemmax.envs.moral_hazard.policies.isolation_seats`) elsewhere.

    Args:
        costs: query costs k (default the paper's nine: 0, 0.05, ..., 0.40).
        shares: focal shares alpha in [0, 1] (default 0, 0.05, ..., 1).
        contract: other :func:`make_config` options (w_local, w_final, w_team, mapping, ...).

    Returns:
        A :class:`ConditionSet` of len(costs) * len(shares) conditions (cost-major), with
        ``values["cost"]``, ``values["share"]`` and ``values["alpha_star"]`` = (w_L + k) / (n w_T).
    """
    n = int(num_agents)
    if not 0 <= focal < n:
        raise ValueError(f"focal must be an agent index below {n}, got {focal}")
    rows = []
    w_local = contract.get("w_local", c.PRIMARY_W_LOCAL)
    w_team = contract.get("w_team", c.PRIMARY_W_TEAM)
    for k in costs:
        for alpha in shares:
            rest = (1.0 - alpha) / (n - 1)
            alphas = [alpha if i == focal else rest for i in range(n)]
            cfg = make_config(n, cost=k, payoff="private", shares=alphas, **contract)
            alpha_star = (w_local + k) / (n * w_team) if w_team > 0 else np.inf
            value = {"cost": k, "share": alpha, "alpha_star": alpha_star}
            rows.append((f"k={k:.2f} alpha={alpha:.3f}", cfg, value))
    return condition_set(n, rows)
