"""Figures of the red-team analysis, each written as a PNG beside the table behind it (CSV + MD).

* :func:`heatmaps`: a per-(rule, context) quantity (fatality, IAG) as one panel per rule over
  (resource split, threshold T), like the paper's maps;
* :func:`stakes_profiles`: a metric by group stakes T / W per rule, with CI bands;
* :func:`ranking_bars`: how many contexts each rule is decisively safest / worst in, per
  population;
* :func:`ablation_bars`: control vs ablated headline rates of the ablation suite (Table 4).

matplotlib runs headless (Agg). Every function returns the paths it wrote.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from dilemmax.commandline import headless_pyplot
from dilemmax.envs.consequence import constants as C


def _pyplot():
    plt = headless_pyplot()

    return plt


def write_table(path: Path, header: Sequence[str], rows: Sequence[Sequence]) -> list[Path]:
    """The same table as ``path.csv`` and ``path.md``; floats with 4 decimals in the MD."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = path.with_suffix(".csv"), path.with_suffix(".md")
    with open(csv_path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    md_path.write_text(markdown_table(header, rows))
    return [csv_path, md_path]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
    """A markdown table; floats with 4 decimals (cells already formatted stay as given)."""
    fmt = lambda v: f"{v:.4f}" if isinstance(v, float | np.floating) else str(v)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def split_labels(resources: np.ndarray) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(labels of the distinct splits, split index per context, unique thresholds)."""
    splits, split_index = np.unique(resources, axis=0, return_inverse=True)
    labels = ["(" + ",".join(str(int(v)) for v in s) + ")" for s in splits]
    return labels, split_index.reshape(-1), splits


def heatmaps(
    cell: np.ndarray,
    resources: np.ndarray,
    thresholds: np.ndarray,
    path: Path,
    title: str,
    rules: Sequence[str] = C.RULE_NAMES,
    diverging: bool = False,
) -> list[Path]:
    """One panel per rule: rows = resource splits, columns = thresholds T; values of ``cell``.

    Args:
        cell: float[K, C]. resources: int[C, n]. thresholds: int[C].
        diverging: centre the colour map on 0 (for gaps).
    """
    plt = _pyplot()
    labels, split_index, _ = split_labels(resources)
    levels = np.unique(thresholds)
    grid = np.full((len(rules), len(labels), len(levels)), np.nan)
    column = np.searchsorted(levels, thresholds)
    grid[:, split_index, column] = cell
    if diverging:
        bound = max(float(np.nanmax(np.abs(grid))), 1e-6)
        kwargs = {"cmap": "RdBu_r", "vmin": -bound, "vmax": bound}
    else:
        kwargs = {"cmap": "viridis", "vmin": 0.0, "vmax": max(float(np.nanmax(grid)), 1e-6)}
    fig, axes = plt.subplots(1, len(rules), figsize=(3.0 * len(rules) + 1, 6), sharey=True)
    axes = np.atleast_1d(axes)
    for k, (ax, rule) in enumerate(zip(axes, rules, strict=True)):
        image = ax.imshow(grid[k], aspect="auto", origin="upper", **kwargs)
        ax.set_title(rule)
        ax.set_xticks(range(len(levels)), [str(int(t)) for t in levels], fontsize=6)
        ax.set_xlabel("threshold T")
    axes[0].set_yticks(range(len(labels)), labels, fontsize=6)
    axes[0].set_ylabel("resources w")
    fig.colorbar(image, ax=list(axes), shrink=0.8)
    fig.suptitle(title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    png = path.with_suffix(".png")
    fig.savefig(png, dpi=110)
    plt.close(fig)
    header = ["resources", "T"] + list(rules)
    rows = [
        [labels[split_index[c]], int(thresholds[c])]
        + [float(cell[k, c]) for k in range(len(rules))]
        for c in range(len(thresholds))
    ]
    return [png] + write_table(path, header, rows)


def stakes_profiles(
    profiles: Mapping[str, Mapping[str, np.ndarray]],
    path: Path,
    ylabel: str,
    rules: Sequence[str] = C.RULE_NAMES,
) -> list[Path]:
    """One panel per population: the metric by tau = T / W for every rule, with CI bands.

    Args:
        profiles: population -> :func:`statistics.stakes_profile` output.
    """
    plt = _pyplot()
    names = list(profiles)
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.6), sharey=True)
    axes = np.atleast_1d(axes)
    rows = []
    for ax, name in zip(axes, names, strict=True):
        prof = profiles[name]
        for k, rule in enumerate(rules):
            ax.plot(prof["tau"], prof["mean"][k], marker="o", ms=3, label=rule)
            ax.fill_between(prof["tau"], prof["low"][k], prof["high"][k], alpha=0.15)
            rows += [
                [name, rule, float(t), float(m), float(lo), float(hi)]
                for t, m, lo, hi in zip(
                    prof["tau"], prof["mean"][k], prof["low"][k], prof["high"][k], strict=True
                )
            ]
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("stakes T / W")
    axes[0].set_ylabel(ylabel)
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    png = Path(path).with_suffix(".png")
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    header = ["population", "rule", "tau", "mean", "ci_low", "ci_high"]
    return [png] + write_table(Path(path), header, rows)


def ranking_bars(
    counts: Mapping[str, Mapping[str, Mapping[str, int]]],
    path: Path,
    rules: Sequence[str] = C.RULE_NAMES,
) -> list[Path]:
    """Per population, contexts where each rule is decisively safest (up) / worst (down).

    Args:
        counts: population -> :func:`statistics.decisive_counts` output.
    """
    plt = _pyplot()
    names = list(counts)
    width = 0.8 / max(len(names), 1)
    x = np.arange(len(rules))
    fig, ax = plt.subplots(figsize=(1.6 * len(rules) + 2, 4))
    rows = []
    for j, name in enumerate(names):
        safest = [counts[name]["safest"][r] for r in rules]
        worst = [counts[name]["worst"][r] for r in rules]
        offset = x + (j - (len(names) - 1) / 2) * width
        bars = ax.bar(offset, safest, width, label=name)
        ax.bar(offset, [-w for w in worst], width, color=bars[0].get_facecolor(), alpha=0.5)
        rows += [[name, r, s, w] for r, s, w in zip(rules, safest, worst, strict=True)]
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(x, rules)
    ax.set_ylabel("contexts: decisively safest (up) / worst (down)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    png = Path(path).with_suffix(".png")
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return [png] + write_table(Path(path), ["population", "rule", "safest", "worst"], rows)


def ablation_bars(report: Mapping, path: Path, rows: Mapping[str, tuple]) -> list[Path]:
    """Control vs ablated headline rate per ablation (Table 4's rows), the paired difference's
    95% CI written above each pair.

    Args:
        report: :func:`dilemmax.redteam.ablations.run_ablations` output.
        rows: ablation -> (intervention, regime, rule, metric), as Table 4 reads them.
    """
    plt = _pyplot()
    shown = []
    for name, (intervention, regime, rule, metric) in rows.items():
        per_rule = report.get("ablations", {}).get(name, {}).get("differences", {}).get(metric)
        if per_rule and rule in per_rule:
            shown.append((f"{intervention}\n{regime}\n{rule} {metric}", per_rule[rule]))
    fig, ax = plt.subplots(figsize=(max(4.0, 2.2 * len(shown)), 3.8))
    x = np.arange(len(shown))
    ax.bar(x - 0.2, [d["control"] for _, d in shown], 0.4, label="named control")
    ax.bar(x + 0.2, [d["ablated"] for _, d in shown], 0.4, label="ablated")
    for k, (_, d) in enumerate(shown):
        top = max(d["control"], d["ablated"])
        ax.text(k, top + 0.02, f"{d['mean']:+.2f}\n[{d['low']:+.2f}, {d['high']:+.2f}]",
                ha="center", va="bottom", fontsize=7)  # fmt: skip
    ax.set_xticks(x, [label for label, _ in shown], fontsize=7)
    ax.set_ylim(0, 1.25)
    ax.set_ylabel("rate")
    ax.legend(fontsize=8)
    fig.tight_layout()
    png = Path(path).with_suffix(".png")
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return [png]
