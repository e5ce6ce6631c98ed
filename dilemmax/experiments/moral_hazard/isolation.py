"""``moral_hazard/isolation`` (Section 2.2, Appendix D.2, Figure 3, Table 8): incentive isolation.

The focal model plays agent_0 under the private-share reward; every other seat is the scripted
isolation partner, so F_0 = 1 under either first move, a query (with its correct note) gives
T = 1 and LOCAL gives T = 0, and the focal comparison is m = n alpha w_T - w_L - k (Eq. 4).

Cells. The paper's 67 (k, alpha) cells: for each of the nine costs k = 0, 0.05, ..., 0.40, the
shares {0, 0.25, 0.5, 0.75, 1} and the three boundary cells alpha*(k) - 0.05, alpha*(k),
alpha*(k) + 0.05 (9 x 8 = 72 cells, five of them coinciding: 67). That reading reproduces the
paper's counts: 405 decisions per pooled bar (nine boundary cells x 45), 225 matched pairs in
the k = 0.40 vs 0 contrast (five shared shares x 45) and 405 in the alpha = 1 vs 0 contrast.
``--shares grid`` plays 0, 0.05, ..., 1 at every cost instead; a list plays those shares.

Estimates.
- Empirical 50% boundary per cost: the focal query rate per share (over its 45 decisions) is
  made non-decreasing in the share by weighted isotonic regression, and the boundary is the
  share where that fit first reaches 50%, interpolated linearly between the two shares around
  it (:func:`dilemmax.statistics.level_crossing`); none when the fit stays on one side.
  ``boundary_mae`` is the mean |boundary - alpha*(k)| over the costs with a boundary.
- Pooled bars: the query rate over every cost's cell at alpha* - d, at alpha*, at alpha* + d
  (d = ``--boundary-offset``, 0.05), with Wilson 95% intervals.
- Paired contrasts: highest minus lowest cost at the shares both play, and alpha = 1 minus
  alpha = 0 at every cost, paired by (replicate, episode); percentile bootstrap CIs over pairs.
- Probes (:mod:`.probes`): payoff comprehension and private-action prediction, asked of the
  focal model once per item (``--no-probes`` skips them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax import statistics
from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard import theory
from dilemmax.envs.moral_hazard.generator import incentive_grid
from dilemmax.envs.option_declaration import setting
from dilemmax.errors import UsageError
from dilemmax.experiments import catalogue
from dilemmax.experiments.design import Design, Part, Plan, Report, SessionOptions
from dilemmax.experiments.moral_hazard import common, isolation_combine, probes
from dilemmax.experiments.moral_hazard.figures import draw_figure3
from dilemmax.llm.model_seats import CallsFailed
from dilemmax.llm.play import PlayResult
from dilemmax.llm.seats import build_seat

FOCAL = "agent_0"
PARTNER_SEAT = "scripted:isolation_partner"
PAPER_SHARES = (0.0, 0.25, 0.5, 0.75, 1.0)
TABLE8_COLUMNS = ("$k$", "Predicted $\\alpha^{*}(k)$", "Empirical 50% boundary", "Difference")
BARS_COLUMNS = ("Position", "Query (%)", "Wilson 95% CI", "Decisions")
CELL_COLUMNS = ("$k$", "$\\alpha_i$", "$\\alpha^{*}(k)$", "$m_i$", "Query (%)", "Valid (%)", "n")
POSITIONS = ("below", "at", "above")
BOUNDARY_METHOD = (
    "per cost: the focal query rate per share, made non-decreasing by decision-weighted isotonic "
    "regression; the boundary is where that fit first reaches 50%, linearly interpolated between "
    "the shares around it; none when it stays on one side"
)


@dataclass(frozen=True)
class IsolationParams(common.SizeParams):
    """``moral_hazard/isolation``'s parameters (the paper's 67 cells by default)."""

    costs: str | None = setting(
        None, "query costs (default the nine: 0, 0.05, ..., 0.40)", list=True
    )
    shares: str = setting(
        "paper",
        "'paper' (the 67 cells), 'grid' (0, 0.05, ..., 1 at every cost) or a list",
        list=True,
    )
    boundary_offset: float = setting(0.05, "distance of the below / above cells from alpha*(k)")
    num_agents: int = setting(2, "n (the partners fill the rest)")
    no_probes: bool = setting(False, "skip the probes")


def _round(x: float) -> float:
    return round(float(x), 6)


def shares_for(cost: float, spec: str, offset: float, n: int) -> list[float]:
    """The shares played at ``cost`` (see the module docstring)."""
    if spec == "paper":
        star = theory.alpha_star(n, cost)
        chosen = [*PAPER_SHARES, star - offset, star, star + offset]
    elif spec == "grid":
        chosen = list(c.ISOLATION_SHARES)
    else:
        chosen = common.number_list(spec, "--shares", 0.0, 1.0)
    return sorted({_round(s) for s in chosen if -1e-9 <= s <= 1 + 1e-9})


def cells(params: IsolationParams) -> list[dict]:
    """Every (k, alpha) cell: cost, share, alpha_star, margin and its name."""
    n = params.num_agents
    if not c.MIN_AGENTS <= n <= c.MAX_AGENTS:
        raise UsageError(f"--num-agents must be in {c.MIN_AGENTS}..{c.MAX_AGENTS}, got {n}")
    offset = params.boundary_offset
    if not 0.0 < offset < 1.0:
        raise UsageError(f"--boundary-offset must lie in (0, 1), got {offset}")
    costs = common.number_list(params.costs, "--costs", 0.0, 1.0)
    out = []
    for k in costs or c.ISOLATION_COSTS:
        for share in shares_for(k, params.shares or "paper", offset, n):
            star = _round(theory.alpha_star(n, k))
            margin = _round(theory.private_margin(n, share, k))
            out.append(
                {
                    "cost": _round(k),
                    "share": share,
                    "alpha_star": star,
                    "margin": margin,
                    "name": f"k={k:.2f} alpha={share:.3f}",
                }
            )
    return out


def plan(params: IsolationParams, run: SessionOptions) -> Plan:
    replicates, episodes = common.sizes(params)
    grid = cells(params)
    n = params.num_agents
    sets = [incentive_grid([cell["cost"]], [cell["share"]], num_agents=n) for cell in grid]
    configs = jax.tree.map(lambda *xs: jnp.concatenate(xs), *[s.configs for s in sets])
    tiled, names = common.replicate_configs(configs, [cell["name"] for cell in grid], replicates)
    env = common.env_for(n, "private")
    seats = {agent: PARTNER_SEAT for agent in env.agents if agent != FOCAL}
    part = Part(
        f"isolation/n={n}",
        env,
        tiled,
        names,
        seats,
        episodes,
        calls_per_episode=common.CALLS_PER_SEAT,
    )
    context = {
        "cells": grid,
        "replicates": replicates,
        "episodes": episodes,
        "num_agents": n,
        "offset": params.boundary_offset,
        "probe_items": 0 if params.no_probes else 16 * len(grid),
    }
    return Plan([part], context)


# --------------------------------------------------------------------------- probes
def extra(plan_: Plan, params: IsolationParams, run: SessionOptions) -> dict:
    """The probes, through the focal seat's client; recorded to ``out/probes.jsonl``. A call
    that failed after its retries stops the run (``--on-call-error stop``, the default) or
    counts as a wrong answer (``invalid``)."""
    if params.no_probes:
        return {"probes": None, "reason": "--no-probes"}
    spec = run.seats.get(FOCAL) or run.default_seat
    env = plan_.parts[0].env
    seat = build_seat(spec, env, run.generate) if spec else None
    if seat is None or not seat.is_model:
        return {"probes": None, "reason": f"the focal seat {spec!r} is not a model"}
    system = env.text_protocol().system_prompt(FOCAL)
    asks = []
    for cell in plan_.context["cells"]:
        contract = probes.Contract(plan_.context["num_agents"], cell["cost"], cell["share"])
        asks += [
            (i, probes.prompt(i, contract, system))
            for i in probes.items_for(cell["name"], contract)
        ]
    path = None if run.out is None else Path(run.out) / probes.PROBE_FILE
    rows = probes.ask_items(seat.policy, asks, path, run.resume)
    failed = [r for r in rows if r["error"]]
    if failed and run.on_call_error == "stop":
        raise CallsFailed(
            f"{len(failed)} probe call(s) failed (first: {failed[0]['key']}: {failed[0]['error']})"
            "; the answered ones are in probes.jsonl, so the same command with --resume asks "
            "only the rest"
        )
    return {"probes": probes.summary(rows)}  # the rows themselves are in probes.jsonl


# --------------------------------------------------------------------------- analysis
def _decisions(plan_: Plan, result: PlayResult) -> list[dict]:
    """One row per focal decision: cell name, replicate, episode ordinal, query, valid."""
    part = plan_.parts[0]
    partner_decisions = 3 * (part.env.num_agents - 1)  # work, note, final: always valid
    rows = []
    for row in common.episode_rows(result, part.config_names):
        decided = row["decisions"] - partner_decisions
        valid = row["valid_decisions"] - partner_decisions
        rows.append(
            {
                "cell": row["condition"],
                "replicate": row["replicate"],
                "episode": row["episode"] % part.episodes,
                "query": float(row["query_by_agent"][0]),
                "valid": valid / decided if decided > 0 else 0.0,
            }
        )
    return rows


def _cell_stats(grid: Sequence[dict], decisions: Sequence[dict]) -> list[dict]:
    out = []
    for cell in grid:
        mine = [d for d in decisions if d["cell"] == cell["name"]]
        queries = float(sum(d["query"] for d in mine))
        out.append(
            {
                **cell,
                "decisions": len(mine),
                "queries": queries,
                "query_rate": queries / len(mine) if mine else float("nan"),
                "format_validity": float(np.mean([d["valid"] for d in mine])) if mine else 0.0,
            }
        )
    return out


def boundaries(cell_stats: Sequence[dict]) -> list[dict]:
    """Per cost: alpha_star, the empirical 50% boundary (or None) and their difference."""
    out = []
    for cost in dict.fromkeys(cell["cost"] for cell in cell_stats):
        mine = [s for s in cell_stats if s["cost"] == cost and s["decisions"] > 0]
        star = mine[0]["alpha_star"] if mine else None
        found = statistics.level_crossing(
            [s["share"] for s in mine],
            [s["query_rate"] for s in mine],
            [s["decisions"] for s in mine],
        )
        out.append(
            {
                "cost": cost,
                "alpha_star": star,
                "boundary": found,
                "difference": None if found is None else found - star,
            }
        )
    return out


def bars(cell_stats: Sequence[dict], offset: float) -> dict[str, dict]:
    """Below / at / above the boundary: pooled query rate, Wilson 95% CI, decisions."""
    out = {}
    for position, sign in zip(POSITIONS, (-1, 0, 1), strict=True):
        chosen = [s for s in cell_stats if abs(s["share"] - s["alpha_star"] - sign * offset) < 1e-6]
        trials = sum(s["decisions"] for s in chosen)
        successes = sum(s["queries"] for s in chosen)
        low, high = statistics.wilson_interval(successes, trials)
        rate = successes / trials if trials else float("nan")
        out[position] = {
            "rate": rate,
            "low": low,
            "high": high,
            "decisions": trials,
            "costs": len(chosen),
        }
    return out


def _paired(decisions, grid, left, right, match) -> dict | None:
    """Pairs left - right decisions matched on ``match`` keys; bootstrap CI in pp."""
    by_key = {(d["cell"], d["replicate"], d["episode"]): d["query"] for d in decisions}
    diffs = []
    for a in (g for g in grid if left(g)):
        for b in (g for g in grid if right(g) and match(a, g)):
            for (cell, rep, ep), q in by_key.items():
                if cell == a["name"] and (b["name"], rep, ep) in by_key:
                    diffs.append(100.0 * (q - by_key[(b["name"], rep, ep)]))
    if not diffs:
        return None
    mean, low, high = statistics.bootstrap_ci(diffs)
    return {"delta_pp": mean, "ci": [low, high], "pairs": len(diffs)}


def contrasts(grid: Sequence[dict], decisions: Sequence[dict]) -> dict:
    """Highest vs lowest cost at shared shares; share 1 vs 0 at the same cost."""
    costs = sorted({g["cost"] for g in grid})
    low_k, high_k = costs[0], costs[-1]
    cost = (
        _paired(
            decisions,
            grid,
            lambda g: g["cost"] == high_k,
            lambda g: g["cost"] == low_k,
            lambda a, b: a["share"] == b["share"],
        )
        if len(costs) > 1
        else None
    )
    share = _paired(
        decisions,
        grid,
        lambda g: g["share"] == 1.0,
        lambda g: g["share"] == 0.0,
        lambda a, b: a["cost"] == b["cost"],
    )
    return {"cost": cost and {**cost, "high": high_k, "low": low_k}, "share": share}


def analyse(
    plan_: Plan,
    results: Sequence[PlayResult],
    params: IsolationParams,
    run: SessionOptions,
    extra_: dict,
) -> Report:
    grid = plan_.context["cells"]
    decisions = _decisions(plan_, results[0])
    cell_stats = _cell_stats(grid, decisions)
    found = boundaries(cell_stats)
    errors = [abs(b["difference"]) for b in found if b["difference"] is not None]
    payload = {
        "design": "moral_hazard/isolation",
        "model": common.model_label(results[0], FOCAL),
        "num_agents": plan_.context["num_agents"],
        "replicates": plan_.context["replicates"],
        "episodes_per_cell": plan_.context["episodes"],
        "boundary_method": BOUNDARY_METHOD,
        "boundaries": found,
        "boundary_mae": float(np.mean(errors)) if errors else None,
        "boundary_max_error": float(np.max(errors)) if errors else None,
        "bars": bars(cell_stats, plan_.context["offset"]),
        "contrasts": contrasts(grid, decisions),
        "format_validity": float(np.mean([d["valid"] for d in decisions])) if decisions else None,
        "probes": (extra_ or {}).get("probes"),
        "cells": cell_stats,
    }
    return Report(payload, _tables(payload), {"figure3": lambda path: draw_figure3(payload, path)})


def _num(x, digits=3, sign=False) -> str:
    return "–" if x is None else (f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}")


def _tables(payload: Mapping) -> dict[str, str]:
    table8 = [
        [
            f"{b['cost']:.2f}",
            _num(b["alpha_star"]),
            _num(b["boundary"]),
            _num(b["difference"], sign=True),
        ]
        for b in payload["boundaries"]
    ]
    bar_rows = [
        [
            p,
            f"{100 * b['rate']:.1f}",
            f"[{100 * b['low']:.1f}, {100 * b['high']:.1f}]",
            b["decisions"],
        ]
        for p, b in payload["bars"].items()
        if b["decisions"]
    ]
    cell_rows = [
        [
            f"{s['cost']:.2f}",
            f"{s['share']:.3f}",
            f"{s['alpha_star']:.3f}",
            f"{s['margin']:+.3f}",
            f"{100 * s['query_rate']:.1f}",
            f"{100 * s['format_validity']:.1f}",
            s["decisions"],
        ]
        for s in payload["cells"]
    ]
    return {
        "table8": common.markdown(TABLE8_COLUMNS, table8),
        "boundary_bars": common.markdown(BARS_COLUMNS, bar_rows),
        "cells": common.markdown(CELL_COLUMNS, cell_rows),
    }


DESIGN = Design(
    name="moral_hazard/isolation",
    **catalogue.described("moral_hazard/isolation"),
    params=IsolationParams,
    plan=plan,
    analyse=analyse,
    combine=isolation_combine.combine,
    extra=extra,
)
