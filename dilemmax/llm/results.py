"""Summaries of a play run: the env's metrics per group with bootstrap confidence intervals.

Episodes are grouped by a label (a moral-hazard condition, a consequence rule, a seat
rotation). Every entry of every metric gets a mean and a percentile-bootstrap interval
(:func:`dilemmax.statistics.bootstrap_rows`, the same estimator ``evaluate`` uses), under a name
made from the axes the game declares for it (``env.metric_axes``): per-trial entries by trial
(``gini[trial_1]``), per-agent ones by seat name (``return[<seat>]``), pooling every position
the seat played, so a rotated arena reports each policy, not each chair.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import jax
import numpy as np

from dilemmax.envs.metrics import AGENT, Axes, MetricAxesError, axes_of, entry_names
from dilemmax.llm.policy import CallStats
from dilemmax.llm.pricing import Price, format_cost, seat_price
from dilemmax.statistics import bootstrap_rows


def metric_columns(
    metrics: Mapping[str, np.ndarray], episodes: Sequence[dict], metric_axes: Mapping[str, Axes]
) -> dict[str, list]:
    """Per-episode samples, each under a name that says what it is, from the axes the game
    declares (``metric_axes``, never the values' shape): ``name`` for a scalar metric,
    ``name[trial_1]`` for a per-trial one, ``name[<seat>]`` for a per-agent one and
    ``name[trial_1][<seat>]`` for one per trial and agent (``name[rank_0]``, ...: the other
    axes, as :func:`~dilemmax.envs.metrics.entry_names` names them).

    Returns name -> one list per episode (a per-agent metric's list for an episode holds the
    values of every agent the seat played in it; empty if the seat did not play), in the order
    of ``metrics`` and of each metric's entries.

    Raises:
        MetricAxesError: a metric is not declared, or its values do not have its axes.
    """
    columns: dict[str, list] = {}
    seats = sorted({s for e in episodes for s in e["seats"].values()})
    for name, values in metrics.items():
        values = np.asarray(values, np.float64)
        axes = axes_of(metric_axes, name, values.shape[1:])
        if AGENT not in axes:
            for index, label in entry_names(name, axes, values.shape[1:]).items():
                columns[label] = [[float(row[index])] for row in values]
            continue
        by_agent = np.moveaxis(values, 1 + axes.index(AGENT), -1)  # [E, ..., A]
        others = tuple(a for a in axes if a != AGENT)
        for index, label in entry_names(name, others, by_agent.shape[1:-1]).items():
            for seat in seats:
                columns[f"{label}[{seat}]"] = [
                    _seat_values(name, row[index], info, seat)
                    for row, info in zip(by_agent, episodes, strict=True)
                ]
    return columns


def _seat_values(name: str, per_agent: np.ndarray, info: dict, seat: str) -> list[float]:
    """The values of every agent ``seat`` played in the episode ``info``."""
    agents = list(info["seats"])
    if per_agent.shape[-1] != len(agents):
        raise MetricAxesError(
            f"metric {name!r} has {per_agent.shape[-1]} agents, episode {info.get('id')} "
            f"{len(agents)} seats"
        )
    return [float(per_agent[i]) for i, agent in enumerate(agents) if info["seats"][agent] == seat]


def summarize(
    parts: Sequence[tuple[dict[str, np.ndarray], Sequence[dict]]],
    metric_axes: Mapping[str, Axes],
    group_of: Callable[[dict], str] | None = None,
    key: jax.Array | None = None,
    num_resamples: int = 2_000,
    confidence: float = 0.95,
) -> dict[str, dict[str, tuple[float, float, float]]]:
    """group -> metric -> (mean, low, high) over that group's episodes.

    Args:
        parts: (metrics, episodes) of one or more runs of one game (their per-agent metrics
            may have different numbers of agents: samples are per seat name).
        metric_axes: the game's declaration of its metrics' axes (``env.metric_axes``), which
            names each sample (:func:`metric_columns`).
        group_of: episode info -> group label (default: one group, "all").

    Per-agent samples of one episode are averaged first, so every episode weighs the same.
    """
    group_of = group_of or (lambda info: "all")
    key = jax.random.key(0) if key is None else key
    columns: dict[str, list] = {}
    episodes: list[dict] = []
    for metrics, infos in parts:
        part_columns = metric_columns(metrics, infos, metric_axes)
        for name in [*part_columns, *(n for n in columns if n not in part_columns)]:
            columns.setdefault(name, [[] for _ in episodes])
            columns[name] += part_columns.get(name, [[] for _ in infos])
        episodes += list(infos)
    labels = [group_of(info) for info in episodes]
    groups = list(dict.fromkeys(labels))
    names = list(columns)  # the game's metric order; entries in index order (trial_1, trial_2)
    out: dict[str, dict[str, tuple[float, float, float]]] = {}
    for g, group_key in zip(groups, jax.random.split(key, max(len(groups), 1)), strict=False):
        rows = [i for i, label in enumerate(labels) if label == g]
        samples = np.full((len(names), len(rows)), np.nan)
        for m, name in enumerate(names):
            for j, i in enumerate(rows):
                values = columns[name][i]
                if values:
                    samples[m, j] = float(np.mean(values))
        mean, low, high = bootstrap_rows(samples, group_key, num_resamples, confidence)
        out[g] = {
            name: (float(mean[m]), float(low[m]), float(high[m]))
            for m, name in enumerate(names)
            if not np.all(np.isnan(samples[m]))
        }
    return out


# Metrics whose name alone reads as something else beside the model calls' table: an env's
# invalid_actions counts illegal actions that reached the env, while a model's unreadable reply
# is played as the protocol's fallback move (a legal one) before the env sees it.
METRIC_LABELS = {"invalid_actions": "invalid_actions (illegal actions reaching the env)"}


def format_summary(summary: dict[str, dict[str, tuple[float, float, float]]]) -> str:
    """One block per group: metric, mean and its interval."""
    lines = []
    for group, rows in summary.items():
        lines.append(f"[{group}]")
        labels = {name: METRIC_LABELS.get(name, name) for name in rows}
        width = max([40, *map(len, labels.values())])  # per trial and seat names run long
        for name, (mean, low, high) in rows.items():
            if np.isnan(mean):
                continue
            lines.append(f"  {labels[name]:{width}s} {mean:10.4g}  [{low:.4g}, {high:.4g}]")
    return "\n".join(lines)


def seat_stats(results) -> dict[str, CallStats]:
    """seat -> its call counts over several results (parts, scenarios or shards), each anything
    with a ``stats`` mapping like :class:`~dilemmax.llm.play.PlayResult`'s."""
    stats: dict[str, CallStats] = {}
    for result in results:
        for seat, s in result.stats.items():
            stats[seat] = stats.get(seat, CallStats()).merged(s)
    return stats


def seat_totals(results, prices: Mapping[str, Price] | None = None) -> dict[str, dict]:
    """seat -> what its calls spent over ``results`` (as :func:`seat_stats` takes them): calls,
    prompt tokens (and of them cached and cache-written), completion tokens and cost at
    ``prices`` (None: unknown); the transcript's ``totals`` line."""
    fields = ("calls", "prompt_tokens", "cached_tokens", "cache_write_tokens", "completion_tokens")
    return {
        seat: {
            **{f: getattr(s, f) for f in fields},
            "cost_usd": s.cost(seat_price(seat, prices or {})),
        }
        for seat, s in seat_stats(results).items()
    }


def format_calls(stats: dict[str, CallStats], prices: Mapping[str, Price] | None = None) -> str:
    """A table of each model seat's calls: validity, recovery, errors, retries, tokens (in /
    of them read from the server's prompt cache / out) and cost at ``prices`` (a seat's own
    ``price=`` first)."""
    if not stats:
        return ""
    header = (
        f"  {'seat':32s} {'calls':>7s} {'replayed':>8s} {'valid':>7s} {'recovered':>9s} "
        f"{'unreadable':>10s} {'errors':>6s} {'retries':>7s} {'tokens in/cached/out':>22s} "
        f"{'cost':>10s} "
        f"{'latency':>8s} {'output':>16s} {'json':>11s}"
    )
    lines = ["model calls:", header]
    for name, s in stats.items():
        row = s.summary()
        tokens = f"{s.prompt_tokens}/{s.cached_tokens}/{s.completion_tokens}"
        dollars = format_cost(s.cost(seat_price(name, prices or {})))
        if s.calls > s.cache_hits and not (s.prompt_tokens or s.completion_tokens):
            tokens = "unknown"  # the provider reported no usage (0 is this project's unknown)
        lines.append(
            f"  {name[:32]:32s} {s.calls:7d} {s.replayed:8d} {row['format_validity']:7.1%} "
            f"{row['recovered_rate']:9.1%} {unreadable_replies(s):10d} {s.errors:6d} "
            f"{s.retries:7d} {tokens:>22s} {dollars:>10s} "
            f"{row['mean_latency_s']:7.3f}s "
            f"{s.output_shown:>16s} {json_replies(s):>11s}"
        )
    cached = [f"{n[:32]} {s.cache_hits} hit(s), {s.cache_misses} miss(es)" for n, s in
              stats.items() if s.cache_hits or s.cache_misses]  # fmt: skip
    if cached:  # calls answered from the cache (--cache) spent nothing and count nowhere
        lines.append(f"  response cache: {'; '.join(cached)} (a hit is no call: no tokens)")
    lines.append(
        "  unreadable: act replies no move was read from, each played as the game's fallback "
        "move (a legal one, so the env's invalid_actions does not count it)"
    )
    lines.append(
        "  output: the output mode asked for (>text: the server refused it, the seat went on in "
        "plain text); json: replies that are a JSON object / replies asked for in a JSON mode"
    )
    return "\n".join(lines)


def json_replies(stats: CallStats) -> str:
    """``valid/asked``: of the replies asked for in a JSON output mode, those that are a JSON
    object (a server that takes ``response_format`` and ignores it shows here); "-" if none."""
    return f"{stats.json_valid}/{stats.json_mode_calls}" if stats.json_mode_calls else "-"


def unreadable_replies(stats: CallStats) -> int:
    """Act replies neither valid nor recovered: each was played as the fallback move."""
    return stats.act_calls - stats.valid - stats.recovered
