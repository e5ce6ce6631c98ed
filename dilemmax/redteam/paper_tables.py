"""The red-teaming paper's Tables 2, 3 and 4 as markdown, from the gap and ablation reports.

* Table 2 (:func:`table2`): the Institutional Alignment Gap per rule and population. Top row:
  the reference's own unsafe rate UR_ref per rule (in %, at the primary epsilon); then one row
  per population with IAG = UR_pop - UR_ref in percentage points and its 95% bootstrap CI over
  contexts. Columns: Population, AON, RE, DV, RP, PP (the rules the report holds, in that order).
* Table 3 (:func:`table3`): raw outcomes, no reference: per population three rows, fatality
  (fraction of agents eliminated, 0-1), survivors (mean of n = 3) and targeted elimination
  (fraction of games in which the named extreme bore the loss; defined under RP and PP only,
  "–" under AON, RE and DV), each with its 95% context-bootstrap CI. Columns: Population,
  Outcome, then the rules.
* Table 4 (:func:`table4`): the ablation suite against the matched named-rule control, one row
  per intervention in the paper's order (one-shot and repeated anonymization, neutral wording,
  cooperative and survival-only frames): its headline rule and metric (Appendix 12), control
  and ablated rates, ablated - control with its paired context-bootstrap CI and sign-flip p, and
  the RP - PP contrast in each arm with whether its sign holds.

The inputs are the JSON-able reports of :func:`dilemmax.redteam.gap.gap_report` and
:func:`dilemmax.redteam.ablations.run_ablations`; nothing is recomputed here.
"""

from __future__ import annotations

from collections.abc import Mapping

from dilemmax.envs.consequence import constants as C
from dilemmax.redteam.figures import markdown_table
from dilemmax.redteam.reference import PRIMARY_EPSILON

DASH = "–"
TARGETED_RULES = ("RP", "PP")  # the rules that name an extreme
OUTCOMES = (
    ("fatality", "fatality"),
    ("survivors", "survivors"),
    ("targeted_elimination", "targeted elimination"),
)
# Ablation -> (its row's name, regime, headline rule, headline metric) as Section 5.3 and
# Appendix 12 report them.
TABLE4_ROWS = {
    "anonymous_one_shot": ("Anonymization", "one-shot (R = 1)", "RP", "targeted_elimination"),
    "anonymous_repeated": ("Anonymization", "repeated (R = 3)", "RP", "targeted_elimination"),
    "neutral_wording": ("Neutral wording", "R = 3", "RP", "fatality"),
    "frame_cooperative": ("Frame: cooperative", "R = 3", "RP", "fatality"),
    "frame_survival": ("Frame: survival-only", "R = 3", "PP", "fatality"),
}
TABLE2_HEADER = ("Population",)
TABLE3_HEADER = ("Population", "Outcome")
TABLE4_HEADER = (
    "Intervention",
    "Regime",
    "Rule",
    "Metric",
    "Control",
    "Ablated",
    "Δ (ablated − control) [95% CI]",
    "p",
    "RP − PP control",
    "RP − PP ablated",
    "Sign holds",
)


def _rules(entries) -> list[str]:
    """The report's rules in the paper's order (AON, RE, DV, RP, PP), then any others."""
    seen = [r for entry in entries for r in entry]
    known = [r for r in C.RULE_NAMES if r in seen]
    return known + sorted(set(seen) - set(known))


def _signed(value: float, scale: float = 1.0, digits: int = 0) -> str:
    return f"{scale * value:+.{digits}f}"


def _interval_text(entry: Mapping, scale: float = 1.0, digits: int = 2, sign: bool = True) -> str:
    fmt = (lambda v: f"{scale * v:+.{digits}f}") if sign else (lambda v: f"{scale * v:.{digits}f}")
    return f"{fmt(entry['mean'])} [{fmt(entry['low'])}, {fmt(entry['high'])}]"


def table2(report: Mapping, epsilon: float = PRIMARY_EPSILON) -> str:
    """Table 2 of a gap report (see the module docstring)."""
    populations = report["populations"]
    gaps = {name: entry["iag"][str(epsilon)] for name, entry in populations.items()}
    rules = _rules(gaps.values())
    header = [*TABLE2_HEADER, *rules]
    first = next(iter(gaps.values()), {})
    reference = [f"reference UR_ref (ε = {epsilon:g}), %"]
    reference += [f"{100 * first[r]['ur_ref']:.0f}" if r in first else DASH for r in rules]
    rows = [reference]
    for name, per_rule in gaps.items():
        rows.append(
            [name] + [_interval_text(per_rule[r], 100, 0) if r in per_rule else DASH for r in rules]
        )
    caption = (
        "Table 2. Institutional Alignment Gap IAG = UR_pop − UR_ref per rule and population, "
        "in percentage points with 95% bootstrap CIs over contexts; top row: the reference's own "
        f"unsafe rate (expected fatality under ε = {epsilon:g} trembles), in %.\n\n"
    )
    return caption + markdown_table(header, rows)


def table3(report: Mapping) -> str:
    """Table 3 of a gap report (see the module docstring)."""
    populations = report["populations"]
    rules = _rules(entry["outcomes"].get("fatality", {}) for entry in populations.values())
    header = [*TABLE3_HEADER, *rules]
    rows = []
    for name, entry in populations.items():
        for metric, label in OUTCOMES:
            per_rule = entry["outcomes"].get(metric)
            if per_rule is None:
                continue
            cells = []
            for r in rules:
                defined = metric != "targeted_elimination" or r in TARGETED_RULES
                cells.append(_interval_text(per_rule[r], sign=False) if defined and r in per_rule
                             else DASH)  # fmt: skip
            rows.append([name, label, *cells])
    caption = (
        "Table 3. Raw outcomes per population and rule (no reference): fatality (fraction of "
        "agents eliminated), survivors (mean of 3) and targeted elimination (fraction of games; "
        "RP and PP name an extreme), with 95% context-bootstrap CIs.\n\n"
    )
    return caption + markdown_table(header, rows)


def table4(report: Mapping) -> str:
    """Table 4 of an ablation report (see the module docstring); ablations not run are left
    out, and a headline rule the run did not play falls back to the first rule it did."""
    rows = []
    for name, (intervention, regime, rule, metric) in TABLE4_ROWS.items():
        entry = report.get("ablations", {}).get(name)
        if entry is None:
            continue
        per_rule = entry["differences"].get(metric) or {}
        if rule not in per_rule and per_rule:
            rule = next(iter(per_rule))
        d = per_rule.get(rule)
        contrast = entry.get("contrast") or {}
        rows.append(
            [
                intervention,
                regime,
                rule,
                metric.replace("_", " "),
                f"{d['control']:.2f}" if d else DASH,
                f"{d['ablated']:.2f}" if d else DASH,
                _interval_text(d) if d else DASH,
                f"{d['p_value']:.4f}" if d else DASH,
                _interval_text(contrast["control"]) if contrast else DASH,
                _interval_text(contrast["ablated"]) if contrast else DASH,
                ("yes" if contrast["sign_holds"] else "no") if contrast else DASH,
            ]
        )
    caption = (
        "Table 4. Prompt-only ablations against the matched named-rule control: headline rate "
        "per arm, paired difference with 95% context-bootstrap CI and sign-flip p, and the "
        "RP − PP fatality contrast in each arm.\n\n"
    )
    return caption + markdown_table(list(TABLE4_HEADER), rows)
