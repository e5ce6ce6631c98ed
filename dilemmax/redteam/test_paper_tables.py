"""Tables 2, 3 and 4 in the paper's layout, with numbers from hand-built populations."""

import numpy as np
import pytest

from dilemmax.envs.consequence.generator import context_table
from dilemmax.redteam import ablations as A
from dilemmax.redteam import gap, paper_tables
from dilemmax.redteam import statistics as S
from dilemmax.redteam.reference import ReferenceTable

RULES = ("AON", "RE", "DV", "RP", "PP")
FATALITY = {"AON": 0.0, "RE": 0.2, "DV": 0.4, "RP": 0.6, "PP": 1 / 3}
UR_REF = {"AON": 0.05, "RE": 0.3, "DV": 0.1, "RP": 0.2, "PP": 0.25}
NUM_CONTEXTS = 6


def header_and_rows(markdown: str) -> tuple[list[str], list[list[str]]]:
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return cells[0], cells[2:]


def hand_built_population(name: str, shift: float = 0.0) -> S.Population:
    """Every episode of a rule has the same outcome: fatality FATALITY[rule] + shift."""
    episodes = 3
    rule = np.repeat(np.arange(5), NUM_CONTEXTS * episodes)
    context = np.tile(np.repeat(np.arange(NUM_CONTEXTS), episodes), 5)
    fatality = np.asarray([FATALITY[r] for r in RULES])[rule] + shift
    targeted = np.isin(rule, [3, 4]) * 0.5
    metrics = {
        "fatality": fatality,
        "survivors": 3 * (1 - fatality),
        "targeted_elimination": targeted,
        "exploitation": np.zeros_like(fatality),
    }
    return S.Population(name, metrics, rule, context, NUM_CONTEXTS, RULES)


def hand_built_reference() -> ReferenceTable:
    resources, thresholds = context_table(12, 3)
    ur = np.asarray([UR_REF[r] for r in RULES])[None, :, None] * np.ones((1, 5, NUM_CONTEXTS))
    return ReferenceTable(
        (0.1,), RULES, resources[:NUM_CONTEXTS], thresholds[:NUM_CONTEXTS], 3, {"fatality": ur}, {}
    )


@pytest.mark.slow
def test_tables_2_and_3_layout_and_numbers(tmp_path):
    pops = [hand_built_population("model-a"), hand_built_population("model-b", 0.1)]
    report = gap.write_gap_report(pops, hand_built_reference(), tmp_path, num_resamples=200)
    header, rows = header_and_rows((tmp_path / "table2.md").read_text())
    assert header == ["Population", "AON", "RE", "DV", "RP", "PP"]
    assert rows[0] == ["reference UR_ref (ε = 0.1), %", "5", "30", "10", "20", "25"]
    # IAG in pp: constant per rule, so the CI collapses onto the mean.
    assert rows[1] == ["model-a", "-5 [-5, -5]", "-10 [-10, -10]", "+30 [+30, +30]",
                       "+40 [+40, +40]", "+8 [+8, +8]"]  # fmt: skip
    assert rows[2][0] == "model-b" and rows[2][4] == "+50 [+50, +50]"
    assert (tmp_path / "table2.md").read_text() == paper_tables.table2(report)

    header, rows = header_and_rows((tmp_path / "table3.md").read_text())
    assert header == ["Population", "Outcome", "AON", "RE", "DV", "RP", "PP"]
    assert [r[:2] for r in rows] == [
        [p, o] for p in ("model-a", "model-b")
        for o in ("fatality", "survivors", "targeted elimination")
    ]  # fmt: skip
    assert rows[0][2:] == ["0.00 [0.00, 0.00]", "0.20 [0.20, 0.20]", "0.40 [0.40, 0.40]",
                           "0.60 [0.60, 0.60]", "0.33 [0.33, 0.33]"]  # fmt: skip
    assert rows[1][5] == "1.20 [1.20, 1.20]"  # survivors under RP: 3 x (1 - 0.6)
    assert rows[2][2:] == ["–", "–", "–", "0.50 [0.50, 0.50]", "0.50 [0.50, 0.50]"]


def planted_ablation_play(arm, rule, configs, episodes, key) -> dict:
    """Targeted elimination 0.8 named / 0.2 anonymous one-shot, 0.6 anonymous repeated; RP
    fatality 0.5 named, 0.3 under every other arm; PP fatality 0.2."""
    n = int(configs.threshold.shape[0]) * episodes
    named = arm.clause == "named" and arm.goal == "competitive"
    if rule == "RP":
        targeted = 0.8 if named else (0.2 if arm.num_rounds == 1 else 0.6)
        fatality = 0.5 if named else 0.3
    else:
        targeted, fatality = 0.4, 0.2
    return {
        "targeted_elimination": np.full(n, targeted),
        "fatality": np.full(n, fatality),
        "all_zero_opening": np.zeros(n),
        "round_one_funding": np.ones(n),
    }


def test_table4_layout_and_numbers():
    report = A.run_ablations(
        planted_ablation_play, contexts=np.arange(4), episodes=2, num_resamples=200
    )
    header, rows = header_and_rows(paper_tables.table4(report))
    assert header == list(paper_tables.TABLE4_HEADER)
    assert [r[:4] for r in rows] == [
        ["Anonymization", "one-shot (R = 1)", "RP", "targeted elimination"],
        ["Anonymization", "repeated (R = 3)", "RP", "targeted elimination"],
        ["Neutral wording", "R = 3", "RP", "fatality"],
        ["Frame: cooperative", "R = 3", "RP", "fatality"],
        ["Frame: survival-only", "R = 3", "PP", "fatality"],
    ]
    assert rows[0][4:7] == ["0.80", "0.20", "-0.60 [-0.60, -0.60]"]
    assert rows[1][4:7] == ["0.80", "0.60", "-0.20 [-0.20, -0.20]"]
    assert rows[2][4:7] == ["0.50", "0.30", "-0.20 [-0.20, -0.20]"]
    assert rows[4][4:7] == ["0.20", "0.20", "+0.00 [+0.00, +0.00]"]
    # RP - PP fatality: +0.30 under the named control, +0.10 ablated; the sign holds.
    assert rows[0][8:] == ["+0.30 [+0.30, +0.30]", "+0.10 [+0.10, +0.10]", "yes"]
