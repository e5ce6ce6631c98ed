"""Scoring a focal population on a scenario set: per-scenario focal return, CIs, normalised score.

A focal population is a jittable policy (scripted, a trained run, a zoo population) seated in
every focal seat of a :class:`~dilemmax.scenarios.env.ScenarioEnv`; all scenarios of the set and
all episodes run as one program (:func:`dilemmax.envs.rollout.run_episodes` over
``scenario_configs``). Each scenario's score is the focal agents' per-capita return, its mean over
episodes with a 95% Student t interval over episodes (:func:`dilemmax.statistics.t_interval`),
and its normalised score

    (score - random) / (best - random)

against the scenario's references: ``random`` (focal seats playing uniformly over legal
actions) and ``best`` (the highest mean of the reference populations, say the zoo's). 0 is
random, 1 the best known population; the score is None where the two references tie. Every row
carries the scenario's content hash, so rows of a changed scenario are never compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import jax
import numpy as np

from dilemmax.commandline import headless_pyplot
from dilemmax.envs.policies import random_policy
from dilemmax.envs.rollout import run_episodes
from dilemmax.scenarios.env import ScenarioEnv
from dilemmax.scenarios.spec import ScenarioSet, ZooResolver
from dilemmax.statistics import t_interval


@dataclass(frozen=True)
class ScenarioScore:
    """One focal population on one scenario.

    Attributes:
        scenario: the scenario's name.
        digest: its content hash (:meth:`~dilemmax.scenarios.spec.Scenario.digest`).
        mean: the focal per-capita return, averaged over episodes.
        ci_low, ci_high: its 95% interval over episodes.
        episodes: how many episodes it averages.
        background: the background's per-capita return, averaged over episodes.
    """

    scenario: str
    digest: str
    mean: float
    ci_low: float
    ci_high: float
    episodes: int
    background: float


def score_policy(
    scenarios: ScenarioSet,
    policy,
    key: jax.Array,
    episodes: int,
    env: ScenarioEnv | None = None,
    resolve_zoo: ZooResolver | None = None,
    num_steps: int | None = None,
) -> list[ScenarioScore]:
    """``policy`` in every focal seat of every scenario of the set, ``episodes`` each."""
    env = scenarios.build(resolve_zoo) if env is None else env
    _, metrics = run_episodes(env, policy, key, episodes, env.scenario_configs(), num_steps)
    focal = np.asarray(metrics["per_capita"])  # [S, E]
    background = np.asarray(metrics["background_return"]).mean(axis=-1)  # [S, E]
    digests = scenarios.digests(resolve_zoo)
    rows = []
    for s, name in enumerate(env.names):
        mean, low, high = t_interval(focal[s])
        rows.append(
            ScenarioScore(
                name, digests[name], mean, low, high, episodes, float(background[s].mean())
            )
        )
    return rows


def references(
    scenarios: ScenarioSet,
    populations: Mapping[str, object],
    key: jax.Array,
    episodes: int,
    env: ScenarioEnv | None = None,
    resolve_zoo: ZooResolver | None = None,
    num_steps: int | None = None,
) -> dict[str, dict]:
    """scenario -> {"random": mean, "best": mean, "best_population": name, "digest": hash}:
    the uniform-random focal population and the best of ``populations`` (name -> policy)."""
    env = scenarios.build(resolve_zoo) if env is None else env
    scored = {
        "random": score_policy(scenarios, random_policy, key, episodes, env, resolve_zoo, num_steps)
    }
    for name, policy in populations.items():
        scored[name] = score_policy(scenarios, policy, key, episodes, env, resolve_zoo, num_steps)
    return references_from(scored)


def references_from(scored: Mapping[str, list[ScenarioScore]]) -> dict[str, dict]:
    """:func:`references` from scores already computed (name -> score_policy's rows, one name
    ``"random"``), for a caller that reports every population's own rows too."""
    out = {}
    for s, scenario in enumerate(row.scenario for row in scored["random"]):
        means = {name: rows[s].mean for name, rows in scored.items()}
        best = max(means, key=means.get)
        out[scenario] = {
            "random": means["random"],
            "best": means[best],
            "best_population": best,
            "digest": scored["random"][s].digest,
        }
    return out


def normalised(score: float, random: float, best: float) -> float | None:
    """(score - random) / (best - random); None where the references tie."""
    span = best - random
    return None if abs(span) < 1e-9 else (score - random) / span


def summary_rows(rows: list[ScenarioScore], refs: Mapping[str, dict]) -> list[dict]:
    """Each score with its references and normalised score (refs of another digest refused)."""
    out = []
    for row in rows:
        ref = refs.get(row.scenario)
        if ref is not None and ref["digest"] != row.digest:
            raise ValueError(
                f"references of {row.scenario} were computed for another version of it "
                f"(digest {ref['digest']}, now {row.digest}); recompute them"
            )
        norm = None if ref is None else normalised(row.mean, ref["random"], ref["best"])
        out.append({**asdict(row), **({} if ref is None else {"random": ref["random"],
                    "best": ref["best"], "best_population": ref["best_population"]}),
                    "normalised": norm})  # fmt: skip
    return out


SUMMARY_COLUMNS = (
    "scenario", "focal return", "95% CI", "background return", "random", "best (population)",
    "normalised", "episodes", "digest",
)  # fmt: skip


def summary_table(rows: list[dict]) -> str:
    """The markdown table of :func:`summary_rows`, one row per scenario."""
    lines = ["| " + " | ".join(SUMMARY_COLUMNS) + " |", "|" + "---|" * len(SUMMARY_COLUMNS)]
    for r in rows:
        best = f"{r['best']:.3f} ({r['best_population']})" if "best" in r else "-"
        cells = [
            r["scenario"], f"{r['mean']:.3f}", f"[{r['ci_low']:.3f}, {r['ci_high']:.3f}]",
            f"{r['background']:.3f}", f"{r['random']:.3f}" if "random" in r else "-", best,
            "-" if r["normalised"] is None else f"{r['normalised']:.2f}", str(r["episodes"]),
            r["digest"],
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def summary_plot(rows: list[dict], path: str | Path, title: str = "") -> Path:
    """Bars of each scenario's focal return with its CI, the references as ticks."""
    plt = headless_pyplot()

    names = [r["scenario"].split("/", 1)[-1] for r in rows]
    means = np.array([r["mean"] for r in rows])
    low = np.array([r["ci_low"] for r in rows])
    high = np.array([r["ci_high"] for r in rows])
    finite = np.isfinite(low) & np.isfinite(high)
    err = np.where(finite, [means - low, high - means], 0.0)
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(rows), 3.2))
    x = np.arange(len(rows))
    ax.bar(x, means, yerr=err, capsize=4, color="#4a7ab5", label="focal")
    for i, r in enumerate(rows):
        if "random" in r:
            ax.hlines(
                r["random"],
                i - 0.4,
                i + 0.4,
                colors="grey",
                linestyles=":",
                label="random" if i == 0 else None,
            )
            ax.hlines(
                r["best"],
                i - 0.4,
                i + 0.4,
                colors="black",
                linestyles="--",
                label="best known" if i == 0 else None,
            )
    ax.set_xticks(x, names, rotation=20, ha="right")
    ax.set_ylabel("focal per-capita return")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
