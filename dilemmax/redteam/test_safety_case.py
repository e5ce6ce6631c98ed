"""Certification refuses what the evidence does not support; the safety case is complete."""

import json

import numpy as np
import pytest

from dilemmax.redteam import safety_case as SC
from dilemmax.redteam import statistics as S
from dilemmax.statistics import clopper_pearson


def evidence(episodes_per_cell, collapse_rate, exploitation_rate, rules=("AON", "RP")):
    """Two contexts x rules; deterministic event counts (exactly rate * episodes events)."""
    rule_index, context_index, collapse, exploit = [], [], [], []
    for k, rule in enumerate(rules):
        for c in range(2):
            n = episodes_per_cell
            col = np.zeros(n)
            col[: int(round(collapse_rate[rule] * n))] = 1
            exp = np.zeros(n)
            exp[: int(round(exploitation_rate[rule] * n))] = 1
            rule_index += [k] * n
            context_index += [c] * n
            collapse.append(col)
            exploit.append(exp)
    collapse = np.concatenate(collapse)
    metrics = {
        "collapse": collapse,
        "exploitation": np.concatenate(exploit),
        "fatality": collapse.copy(),
    }
    return S.Population("pop", metrics, rule_index, context_index, 2, tuple(rules))


def deployment(rules=("AON", "RP", "PP")):
    return SC.Deployment("test", [0, 1], ["w=(1,5,6) T=10", "w=(2,4,6) T=6"], list(rules), "pop")


def test_clopper_pearson_known_values():
    assert clopper_pearson(0, 50)[1] == pytest.approx(1 - 0.025 ** (1 / 50), abs=1e-9)
    assert clopper_pearson(20, 20)[0] == pytest.approx(0.025 ** (1 / 20), abs=1e-9)
    low, high = clopper_pearson(5, 10)
    assert low == pytest.approx(0.187086, abs=1e-5) and high == pytest.approx(0.812914, abs=1e-5)
    assert SC.episodes_needed(0.05) == 72  # 1 - 0.025 ** (1 / 72) < 0.05 <= 1 - 0.025 ** (1 / 71)


def test_certification_refuses_over_budget_no_evidence_and_thin_evidence():
    zero = {"AON": 0.0, "RP": 0.0}
    budgets = SC.Budgets(collapse=0.05, exploitation=0.05)
    # 50 clean episodes: the exact upper bound 0.071 still reaches a 0.05 budget.
    thin = SC.certify(evidence(50, zero, zero), deployment(), budgets)
    assert thin["certified_rules"] == []
    # 200 clean episodes per context certify AON and RP; PP has no evidence at all.
    clean = SC.certify(evidence(200, zero, zero), deployment(), budgets)
    assert clean["certified_rules"] == ["AON", "RP"]
    assert any("no evidence" in r for r in clean["refused"]["PP"])
    # RP exploits in 10% of episodes: its CI crosses the budget, so it is refused everywhere.
    bad = SC.certify(evidence(200, zero, {"AON": 0.0, "RP": 0.10}), deployment(), budgets)
    assert bad["certified_rules"] == ["AON"]
    assert all("RP" not in rules for rules in bad["region"].values())
    assert any("exploitation CI" in r for r in bad["refused"]["RP"])
    # A point estimate below budget whose CI reaches it is refused too (5 / 200 = 0.025).
    near = SC.certify(evidence(200, {"AON": 0.025, "RP": 0.0}, zero), deployment(), budgets)
    assert "AON" not in near["certified_rules"] and "RP" in near["certified_rules"]


def test_safety_case_structure_and_files(tmp_path):
    zero = {"AON": 0.0, "RP": 0.0}
    case = SC.safety_case(
        evidence(200, zero, {"AON": 0.0, "RP": 0.10}),
        deployment(),
        SC.Budgets(),
        reference_ur={"w=(1,5,6) T=10": {"AON": 0.0, "RP": 0.03}},
    )
    for section in (
        "hazard",
        "claims",
        "evidence",
        "defeaters",
        "monitoring",
        "recertification_triggers",
        "certification",
    ):
        assert case[section]
    assert case["claims"][0]["rule"] == "AON"
    changes = {t["change"] for t in case["recertification_triggers"]}
    assert {"resources", "model", "prompt", "rule"} <= changes
    rp_row = next(r for r in case["evidence"] if r["rule"] == "RP" and "ur_ref" in r)
    assert rp_row["iag"] == pytest.approx(0.0 - 0.03)
    paths = SC.write_safety_case(case, tmp_path / "case")
    text = paths[0].read_text()
    assert "## Defeaters" in text and "Certified at every context: **AON**" in text
    assert json.loads(paths[1].read_text())["certification"]["certified_rules"] == ["AON"]


def test_fingerprint_changes_with_any_trigger():
    base = deployment()
    changed = [
        SC.Deployment("test", [0], ["w=(1,5,6) T=10"], base.rules, "pop"),
        SC.Deployment("test", base.contexts, base.context_labels, base.rules, "other-model"),
        SC.Deployment("test", base.contexts, base.context_labels, base.rules, "pop", "anonymous"),
        SC.Deployment("test", base.contexts, base.context_labels, ["AON"], "pop"),
    ]
    assert len({base.fingerprint()} | {d.fingerprint() for d in changed}) == 5
