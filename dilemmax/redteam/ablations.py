"""Prompt-only ablations (Section 5.3, Appendix 12) against a matched named-rule control.

Each ablation changes one thing and holds everything else fixed (mechanics, payoffs, contexts,
seeds, observability):

==========================  ===================================  ============================
ablation                    ablated arm                          control arm
==========================  ===================================  ============================
``anonymous_one_shot``      R = 1, anonymous clause              R = 1, named clause
``anonymous_repeated``      R = 3, anonymous clause              R = 3, named clause
``neutral_wording``         R = 3, neutral clause                R = 3, named clause
``frame_cooperative``       R = 3, cooperative goal line         R = 3, competitive goal
``frame_survival``          R = 3, survival-only goal line       R = 3, competitive goal
==========================  ===================================  ============================

One-shot arms use ``endgame="rule"``: the failed single round is acted on by the rule (so that
targeted elimination is defined), as in the env's one-shot reading.

A population is a callable ``play(arm, rule, configs, episodes, key) -> metrics`` returning the
env's per-episode metrics as arrays [num_configs * episodes, ...] (config-major). Two are given:

* :func:`arena_population` seats any policies (scripted, trained, or a language model) in an
  :class:`~dilemmax.agents.arena.Arena` built for the arm: ``anonymous_rule`` for the anonymous
  clause, and ``env.text_protocol(clause=arm.clause, goal=arm.goal)`` as the text view, which is
  what a language-model policy reads through ``observation.text()``. Policies that read only the
  observation array (scripted, trained) see the clause only through the rule token (anonymous
  hides RP/PP), so their wording and frame contrasts are 0 by construction: that is the check
  that the arms differ in nothing else.
* :func:`dilemmax.redteam.populations.llm_ablation_play` plays a language model through the
  batched play harness, the arm's prompt variant set by the text protocol's flags; nothing here
  imports a model.

Per ablation and rule the runner reports, for each metric, ablated - control per context (paired)
with a 95% bootstrap CI over contexts and a sign-flip p-value, and the RP - PP contrast (fatality
by default) in both arms with CIs and whether its sign holds (same sign, or both CIs covering 0);
:func:`write_ablations` writes the report with its table and Table 4.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import dilemmax
from dilemmax.agents.arena import Arena
from dilemmax.envs.consequence import constants as C
from dilemmax.envs.consequence.generator import context_table, rule_id
from dilemmax.envs.consequence.types import ConsequenceConfig
from dilemmax.redteam import paper_tables
from dilemmax.redteam import statistics as S
from dilemmax.redteam.figures import write_table
from dilemmax.statistics import NUM_RESAMPLES, bootstrap_ci, sign_flip_test

ABLATION_METRICS = ("targeted_elimination", "all_zero_opening", "round_one_funding", "fatality")


@dataclass(frozen=True)
class Arm:
    """One prompt / protocol variant."""

    num_rounds: int = C.DEFAULT_NUM_ROUNDS
    clause: str = "named"
    goal: str = "competitive"
    endgame: str = "all"

    def env_kwargs(self) -> dict:
        return {
            "num_rounds": self.num_rounds,
            "anonymous_rule": self.clause == "anonymous",
            "endgame": self.endgame,
        }


ONE_SHOT = {"num_rounds": 1, "endgame": "rule"}
ABLATIONS: dict[str, tuple[Arm, Arm]] = {
    "anonymous_one_shot": (Arm(clause="anonymous", **ONE_SHOT), Arm(**ONE_SHOT)),
    "anonymous_repeated": (Arm(clause="anonymous"), Arm()),
    "neutral_wording": (Arm(clause="neutral"), Arm()),
    "frame_cooperative": (Arm(goal="cooperative"), Arm()),
    "frame_survival": (Arm(goal="survival"), Arm()),
}

PlayFn = Callable[[Arm, str, ConsequenceConfig, int, jax.Array], dict]


def ablation_contexts(
    num_sampled: int = 16, seed: int = 0, total: int = 12, num_agents: int = 3
) -> np.ndarray:
    """Context indices: ``num_sampled`` drawn without replacement plus the canonical instance."""
    resources, thresholds = context_table(total, num_agents)
    canonical = np.flatnonzero(
        np.all(resources == np.asarray(C.CANONICAL_RESOURCES), axis=1)
        & (thresholds == C.CANONICAL_THRESHOLD)
    )
    others = np.setdiff1d(np.arange(len(thresholds)), canonical)
    picked = np.random.default_rng(seed).choice(others, size=num_sampled, replace=False)
    return np.concatenate([np.sort(picked), canonical])


def configs_for(contexts: np.ndarray, rule: str, total: int = 12, num_agents: int = 3):
    resources, thresholds = context_table(total, num_agents)
    return ConsequenceConfig(
        resources=jnp.asarray(resources[contexts]),
        threshold=jnp.asarray(thresholds[contexts]),
        rule=jnp.full(len(contexts), rule_id(rule), jnp.int32),
    )


def arena_population(policies_for: Callable) -> PlayFn:
    """A population from ``policies_for(env, arm, rule) -> policies`` seated in an Arena."""

    def play(arm: Arm, rule: str, configs, episodes: int, key) -> dict:
        env = dilemmax.make("consequence", **arm.env_kwargs())
        protocol = env.text_protocol(clause=arm.clause, goal=arm.goal)
        arena = Arena(env, policies_for(env, arm, rule), text_protocol=protocol)
        return arena.run(key, episodes, configs).metrics

    return play


def run_arm(play: PlayFn, arm: Arm, rules, contexts, episodes: int, seed: int) -> S.Population:
    """Plays one arm on ``contexts`` under every rule; same keys in every arm (paired seeds)."""
    per_rule = []
    for k, rule in enumerate(rules):
        configs = configs_for(contexts, rule)
        key = jax.random.fold_in(jax.random.PRNGKey(seed), k)
        per_rule.append(play(arm, rule, configs, episodes, key))
    where = [np.repeat(np.arange(len(contexts)), episodes)] * len(rules)
    return stack_rules(f"{arm}", per_rule, where, len(contexts), rules, {"arm": asdict(arm)})


def stack_rules(
    name: str,
    per_rule: Sequence[dict],
    context_index: Sequence[np.ndarray],
    num_contexts: int,
    rules: Sequence[str],
    meta: dict | None = None,
) -> S.Population:
    """One population from each rule's per-episode metrics (``per_rule[k]``: metric -> [N_k,
    ...]) and each episode's context index (``context_index[k]``: int[N_k])."""
    metrics: dict[str, list] = {}
    for m in per_rule:
        for metric, values in m.items():
            metrics.setdefault(metric, []).append(np.asarray(values))
    rule_index = [np.full(len(c), k) for k, c in enumerate(context_index)]
    return S.Population(
        name,
        {k: np.concatenate(v) for k, v in metrics.items() if len(v) == len(per_rule)},
        np.concatenate(rule_index).astype(np.int64),
        np.concatenate([np.asarray(c) for c in context_index]).astype(np.int64),
        num_contexts,
        tuple(rules),
        dict(meta or {}),
    )  # fmt: skip


def compare_arms(
    ablated: S.Population,
    control: S.Population,
    rng: np.random.Generator,
    metrics: Sequence[str] = ABLATION_METRICS,
    contrast: tuple[str, str, str] = ("RP", "PP", "fatality"),
    num_resamples: int = NUM_RESAMPLES,
) -> dict:
    """Paired ablated - control differences per rule and metric, and the rule contrast per arm."""
    rules = list(ablated.rules)
    out: dict = {"differences": {}, "contrast": {}}
    for name in metrics:
        if name not in ablated.metrics or name not in control.metrics:
            continue
        diff = ablated.cell_means(name) - control.cell_means(name)  # [K, C]
        ci = bootstrap_ci(diff, rng, num_resamples)
        p = sign_flip_test(diff, rng, num_resamples)
        out["differences"][name] = {
            r: {
                "mean": float(ci.mean[k]),
                "low": float(ci.low[k]),
                "high": float(ci.high[k]),
                "p_value": float(p[k]),
                "ablated": float(np.nanmean(ablated.cell_means(name)[k])),
                "control": float(np.nanmean(control.cell_means(name)[k])),
            }
            for k, r in enumerate(rules)
        }
    a, b, metric = contrast
    if a in rules and b in rules and metric in ablated.metrics:
        arms = {}
        for label, pop in (("ablated", ablated), ("control", control)):
            cell = pop.cell_means(metric)
            d = cell[rules.index(a)] - cell[rules.index(b)]
            ci = bootstrap_ci(d, rng, num_resamples)
            arms[label] = {
                "mean": float(ci.mean),
                "low": float(ci.low),
                "high": float(ci.high),
            }
        out["contrast"] = {
            "rules": [a, b],
            "metric": metric,
            **arms,
            "sign_holds": _sign_holds(arms["ablated"], arms["control"]),
        }
    return out


def _sign_holds(ablated: dict, control: dict) -> bool:
    """Same sign of the point estimates, or both CIs covering 0 (no sign to keep)."""
    covers = lambda d: d["low"] <= 0.0 <= d["high"]
    if covers(ablated) and covers(control):
        return True
    return bool(np.sign(ablated["mean"]) == np.sign(control["mean"]))


def run_ablations(
    play: PlayFn,
    names: Sequence[str] = tuple(ABLATIONS),
    rules: Sequence[str] = ("RP", "PP"),
    contexts: np.ndarray | None = None,
    episodes: int = 4,
    seed: int = 0,
    num_resamples: int = NUM_RESAMPLES,
) -> dict:
    """Every named ablation against its control (arms shared between ablations are played once).

    Returns a JSON-able dict: ``contexts`` (grid indices), and per ablation its two arms and
    :func:`compare_arms` output.
    """
    contexts = ablation_contexts() if contexts is None else np.asarray(contexts)
    played: dict[Arm, S.Population] = {}
    for name in names:
        for arm in ABLATIONS[name]:
            if arm not in played:
                played[arm] = run_arm(play, arm, rules, contexts, episodes, seed)
    return ablation_report(played, names, rules, contexts, episodes, seed, num_resamples)


def ablation_report(
    played: Mapping[Arm, S.Population],
    names: Sequence[str],
    rules: Sequence[str],
    contexts: np.ndarray,
    episodes: int,
    seed: int = 0,
    num_resamples: int = NUM_RESAMPLES,
) -> dict:
    """:func:`run_ablations`' report from arms already played (``played``: arm -> population
    on the same contexts, indexed 0..len(contexts) - 1), e.g. by ``dilemmax experiment``."""
    rng = np.random.default_rng(seed)
    report = {
        "contexts": np.asarray(contexts).tolist(),
        "rules": list(rules),
        "episodes": episodes,
        "ablations": {},
    }
    for name in names:
        ablated_arm, control_arm = ABLATIONS[name]
        result = compare_arms(
            played[ablated_arm], played[control_arm], rng, num_resamples=num_resamples
        )
        report["ablations"][name] = {
            "ablated": asdict(ablated_arm),
            "control": asdict(control_arm),
            **result,
        }
    return report


def ablation_table(report: dict) -> tuple[list[str], list[list]]:
    """(header, rows) of a :func:`run_ablations` report: one row per ablation, rule, metric."""
    header = [
        "ablation",
        "rule",
        "metric",
        "control",
        "ablated",
        "diff",
        "95% CI",
        "p",
        "contrast control",
        "contrast ablated",
        "sign holds",
    ]
    rows = []
    for name, entry in report["ablations"].items():
        con = entry.get("contrast", {})
        fmt = lambda d: f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]" if d else ""
        for metric, per_rule in entry["differences"].items():
            for rule, d in per_rule.items():
                rows.append(
                    [
                        name,
                        rule,
                        metric,
                        d["control"],
                        d["ablated"],
                        d["mean"],
                        f"[{d['low']:+.3f}, {d['high']:+.3f}]",
                        f"{d['p_value']:.4f}",
                        fmt(con.get("control")),
                        fmt(con.get("ablated")),
                        con.get("sign_holds", ""),
                    ]
                )
    return header, rows


def write_ablations(report: dict, out: Path) -> None:
    """``ablations.json``, the ablation table (CSV, MD) and Table 4 in the folder ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "ablations.json").write_text(json.dumps(report, indent=1))
    header, rows = ablation_table(report)
    write_table(out / "ablations", header, rows)
    (out / "table4.md").write_text(paper_tables.table4(report))
