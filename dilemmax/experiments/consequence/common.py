"""What the consequence (IABench-CA) designs share: options, parts per rule, populations from
played parts, the reference on the played contexts, and the rationale labels of a run.

Parts. Each rule (and, for the ablations, each prompt arm) is one part named like the parts of
``dilemmax redteam play`` / ``ablate`` (``rule=RP``, ``R=1,anonymous,competitive,rule/rule=RP``),
so transcripts of all three read the same way (:mod:`dilemmax.redteam.rationale_labels`). A part
plays every chosen context ``replicates`` times; the session plays every part with the run's key,
so the arms of an ablation see the same episode keys (paired).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dilemmax.envs.consequence import constants as C
from dilemmax.envs.consequence.generator import context_table
from dilemmax.envs.option_declaration import setting
from dilemmax.errors import UsageError
from dilemmax.experiments.design import DesignParams, Part, SessionOptions
from dilemmax.llm.play import PlayResult
from dilemmax.redteam import rationale_labels as RL
from dilemmax.redteam import reference as ref
from dilemmax.redteam.ablations import configs_for, stack_rules
from dilemmax.redteam.figures import markdown_table
from dilemmax.redteam.gap import jsonable
from dilemmax.redteam.populations import KEEP
from dilemmax.redteam.statistics import Population

PAPER_REPLICATES = 4  # the paper plays 4-6 replications per (context, rule); 4 in the ablations
# Model calls of one episode at most (every survivor asked every round until the last): AON
# 3 x 3; RE, RP, PP 3 + 2 + 1 (one eliminated per short round); DV adds the votes (3 + 2).
MAX_CALLS = {"AON": 9.0, "RE": 6.0, "RP": 6.0, "PP": 6.0, "DV": 11.0}
ONE_SHOT_CALLS = {"AON": 3.0, "RE": 3.0, "RP": 3.0, "PP": 3.0, "DV": 6.0}


# ---------------------------------------------------------------------------- options
@dataclass(frozen=True)
class CommonParams(DesignParams):
    """The parameters both consequence designs take (the paper's sizes by default)."""

    replicates: int | None = setting(
        None, f"episodes per (context, rule) cell (default {PAPER_REPLICATES})"
    )
    no_rationales: bool = setting(
        False, "do not ask for reasoning before each move (no rationale labels)"
    )
    resamples: int | None = setting(
        None, "bootstrap and permutation draws (default 10,000, the paper's)"
    )
    analysis_seed: int = setting(0, "seed of the resampling")


def replicates(params: CommonParams) -> int:
    value = PAPER_REPLICATES if params.replicates is None else params.replicates
    if value < 1:
        raise UsageError(f"--replicates must be a whole number >= 1, got {value}")
    return value


def resamples(params: CommonParams) -> int:
    value = 10_000 if params.resamples is None else params.resamples
    if not 1 <= value <= 100_000:
        raise UsageError(f"--resamples must be in 1..100000, got {value}")
    return value


def rules_option(given: Sequence[str] | None, default: Sequence[str]) -> list[str]:
    """``--rules`` (names, any case, or one comma-separated word) checked against the five."""
    given = list(given or default)
    names = [r.strip().upper() for item in given for r in str(item).split(",") if r.strip()]
    bad = [r for r in names if r not in C.RULE_NAMES]
    if bad or not names:
        raise UsageError(f"--rules: {bad or given} not among {list(C.RULE_NAMES)}")
    return list(dict.fromkeys(names))


def asks_rationales(params: CommonParams) -> bool:
    return not params.no_rationales


# ---------------------------------------------------------------------------- parts
def context_names(contexts: np.ndarray) -> list[str]:
    resources, thresholds = context_table(C.DEFAULT_TOTAL_RESOURCES, C.DEFAULT_NUM_AGENTS)
    return [
        "w=(" + ",".join(str(int(v)) for v in resources[c]) + f") T={int(thresholds[c])}"
        for c in contexts
    ]


def rule_part(name: str, env, contexts, rule: str, episodes: int, options: dict, calls: float):
    """One rule's part: every context of ``contexts`` (grid indices) under ``rule``."""
    return Part(
        name=name,
        env=env,
        configs=configs_for(np.asarray(contexts), rule, env.total_resources, env.num_agents),
        config_names=context_names(contexts),
        episodes=episodes,
        protocol_options=options,
        calls_per_episode=calls,
    )


def population_name(results: Sequence[PlayResult]) -> str:
    """The seat names the episodes were played by."""
    seats = [s for r in results for e in r.episodes[:1] for s in e.get("seats", {}).values()]
    return "+".join(dict.fromkeys(seats)) or "population"


def population_from(
    name: str, results: Sequence[PlayResult], rules: Sequence[str], num_contexts: int, meta=None
) -> Population:
    """The population of one result per rule (in ``rules`` order); an episode's context is its
    ``config_index`` (a position in the part's contexts)."""
    per_rule = [{k: np.asarray(r.metrics[k]) for k in KEEP if k in r.metrics} for r in results]
    where = [np.asarray([e["config_index"] for e in r.episodes], np.int64) for r in results]
    return stack_rules(name, per_rule, where, num_contexts, rules, meta)


# ---------------------------------------------------------------------------- the reference
def check_reference(path: str | None, num_rounds: int, endgame: str = "all"):
    """The ``--reference`` file loaded and checked (None without one)."""
    if not path:
        return None
    table = ref.load_reference(path, "--reference")
    if table.num_rounds != num_rounds:
        raise UsageError(
            f"--reference {path}: solved for R = {table.num_rounds}, this design plays "
            f"R = {num_rounds}"
        )
    return table


def reference_on(path: str | None, contexts: np.ndarray, num_rounds: int, endgame: str = "all"):
    """UR_ref on the played contexts (grid indices): the ``--reference`` file's columns for
    them, or solved here when no file is given."""
    resources, thresholds = context_table(C.DEFAULT_TOTAL_RESOURCES, C.DEFAULT_NUM_AGENTS)
    table = check_reference(path, num_rounds, endgame)
    if table is None:
        return ref.reference_grid(
            resources[contexts], thresholds[contexts], num_rounds=num_rounds, endgame=endgame
        )
    where = {
        (tuple(int(v) for v in w), int(t)): c
        for c, (w, t) in enumerate(zip(table.resources, table.thresholds, strict=True))
    }
    columns = []
    for c in contexts:
        key = (tuple(int(v) for v in resources[c]), int(thresholds[c]))
        if key not in where:
            raise UsageError(f"--reference {path}: has no context {key}")
        columns.append(where[key])
    return dataclasses.replace(
        table,
        resources=np.asarray(table.resources)[columns],
        thresholds=np.asarray(table.thresholds)[columns],
        values={k: np.asarray(v)[..., columns] for k, v in table.values.items()},
    )


# ---------------------------------------------------------------------------- rationales
def label_rationales(plan, params: CommonParams, run: SessionOptions) -> dict:
    """The run's rationales labelled (written to ``DIR/rationales/``), when the plan asked for
    them and the run has a folder (``run.out``: after a shard merge, the merged run's)."""
    out = run.out
    if not out or not plan.context.get("rationales"):
        return {}
    traces = RL.read_traces(out)
    report = RL.write_rationale_report(
        traces, Path(out) / "rationales", params.analysis_seed, resamples(params)
    )
    return {"rationales": report}


def rationale_tables(labelled: dict) -> dict[str, str]:
    report = labelled.get("rationales")
    if not report:
        return {}
    return {
        "rationale_labels": markdown_table(*RL.shares_table(report)),
        "rule_inference": markdown_table(*RL.inference_table(report)),
    }


def plain(value):
    """``value`` with numpy scalars and arrays as JSON types."""
    return json.loads(json.dumps(value, default=jsonable))
