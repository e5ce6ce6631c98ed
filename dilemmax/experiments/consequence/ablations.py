"""``consequence/ablations``: the prompt-only ablation suite (Section 5.3, Appendix 12; Table 4).

Three interventions against a matched named-rule control, each changing one prompt feature
while mechanics, payoffs and observability stay: anonymization (the rule text no longer names
the poorest / richest bearer, RP and PP prompts byte-identical), one-shot (R = 1, the failed
round acted on by the rule) and repeated (R = 3); neutral wording; and the goal frame swapped
for a cooperative or survival-only line. Every arm plays 16 contexts sampled from the grid plus
the canonical instance w = (1, 5, 6), T = 10, under RP and PP, 4 replicates per cell, the model
in every seat. The arms (:data:`dilemmax.redteam.ablations.ABLATIONS`) shared by two ablations
are played once. The analysis is ``dilemmax redteam ablate``'s: per ablation, rule and metric
the paired ablated - control difference over contexts with its bootstrap CI and sign-flip p,
and the RP - PP fatality contrast in both arms, written as the paper's Table 4 plus the
per-metric detail; with rationales, the rule-inference share of post-first-elimination traces
per arm (the paper's 65% of RP traces under repeated anonymization).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

import dilemmax
from dilemmax.envs.option_declaration import setting
from dilemmax.errors import UsageError
from dilemmax.experiments import catalogue
from dilemmax.experiments.consequence import common
from dilemmax.experiments.design import Design, Plan, Report, SessionOptions
from dilemmax.llm.play import PlayResult
from dilemmax.redteam import ablations as A
from dilemmax.redteam import figures, paper_tables
from dilemmax.redteam.populations import arm_protocol_flags

PAPER_CONTEXTS = 16  # sampled from the grid; the canonical instance is added


@dataclass(frozen=True)
class AblationsParams(common.CommonParams):
    """``consequence/ablations``' parameters (the paper's suite by default)."""

    contexts: int | None = setting(
        None,
        f"contexts sampled from the grid (default {PAPER_CONTEXTS}) besides the canonical "
        "w=(1,5,6) T=10",
    )
    context_seed: int = setting(0, "seed of the context sample")
    rules: tuple[str, ...] | None = setting(None, "rules (default RP PP)")
    ablations: tuple[str, ...] | None = setting(
        None, f"ablations to run (default all: {', '.join(A.ABLATIONS)})"
    )


def arm_name(arm: A.Arm) -> str:
    """The arm's part prefix, as ``dilemmax redteam ablate`` names it."""
    return f"R={arm.num_rounds},{arm.clause},{arm.goal},{arm.endgame}"


def chosen_ablations(params: AblationsParams) -> list[str]:
    names = params.ablations or list(A.ABLATIONS)
    names = [n for item in names for n in str(item).split(",") if n]
    bad = [n for n in names if n not in A.ABLATIONS]
    if bad or not names:
        raise UsageError(f"--ablations: {bad or names} not among {list(A.ABLATIONS)}")
    return list(dict.fromkeys(names))


def arms_of(names: Sequence[str]) -> list[A.Arm]:
    """Every arm the ablations need, once each, in the order they are first named."""
    return list(dict.fromkeys(arm for name in names for arm in A.ABLATIONS[name]))


def plan(params: AblationsParams, run: SessionOptions) -> Plan:
    names = chosen_ablations(params)
    rules = common.rules_option(params.rules, ("RP", "PP"))
    count = PAPER_CONTEXTS if params.contexts is None else params.contexts
    if not 0 <= count <= 227:
        raise UsageError(f"--contexts must be in 0..227, got {count}")
    contexts = A.ablation_contexts(count, params.context_seed)
    episodes = common.replicates(params)
    asks = common.asks_rationales(params)
    parts = []
    for arm in arms_of(names):
        env = dilemmax.make("consequence", **arm.env_kwargs())
        options = {**arm_protocol_flags(arm), **({"ask_rationale": True} if asks else {})}
        per_call = common.ONE_SHOT_CALLS if arm.num_rounds == 1 else common.MAX_CALLS
        for rule in rules:
            name = f"{arm_name(arm)}/rule={rule}"
            parts.append(
                common.rule_part(name, env, contexts, rule, episodes, options, per_call[rule])
            )
    context = {
        "ablations": names,
        "rules": rules,
        "contexts": contexts.tolist(),
        "replicates": episodes,
        "rationales": asks,
    }
    return Plan(parts, context)


def analyse(
    plan: Plan,
    results: Sequence[PlayResult],
    params: AblationsParams,
    run: SessionOptions,
    extra: dict,
) -> Report:
    names, rules = plan.context["ablations"], list(plan.context["rules"])
    contexts = np.asarray(plan.context["contexts"])
    arms = arms_of(names)
    played = {}
    for a, arm in enumerate(arms):
        mine = results[a * len(rules) : (a + 1) * len(rules)]
        played[arm] = common.population_from(arm_name(arm), mine, rules, len(contexts))
    seed, draws = params.analysis_seed, common.resamples(params)
    report = A.ablation_report(
        played, names, rules, contexts, plan.context["replicates"], seed, draws
    )
    report["population"] = common.population_name(results)
    labelled = common.label_rationales(plan, params, run)
    tables = {
        "table4": paper_tables.table4(report),
        "ablations": figures.markdown_table(*A.ablation_table(report)),
    }
    tables.update(common.rationale_tables(labelled))
    results_json = {"design": "consequence/ablations", **common.plain(report)}
    results_json.update(common.plain(labelled))
    draw = lambda png: figures.ablation_bars(report, png, paper_tables.TABLE4_ROWS)
    return Report(results_json, tables, {"table4": draw})


DESIGN = Design(
    name="consequence/ablations",
    **catalogue.described("consequence/ablations"),
    params=AblationsParams,
    plan=plan,
    analyse=analyse,
)
