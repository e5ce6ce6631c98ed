"""The scenario report writers (summary rows, markdown table, bar plot) on edge scores: one
episode (an unbounded interval), every return equal (a zero-width interval), no references,
references that tie, a single scenario. The table and the plot are always written."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dilemmax.scenarios import evaluate as E
from dilemmax.statistics import t_interval

FUZZ = settings(
    max_examples=8,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
RETURNS = st.sampled_from([0.0, 1.0, -3.5, 12.25])


@st.composite
def scores(draw):
    count = draw(st.integers(1, 3))
    rows, refs = [], {}
    for s in range(count):
        episodes = draw(st.sampled_from([1, 2, 8]))
        values = [draw(RETURNS) for _ in range(episodes)]
        mean, low, high = t_interval(values)
        assert low <= mean <= high
        name = f"set/s{s}"
        rows.append(E.ScenarioScore(name, f"d{s}", mean, low, high, episodes, draw(RETURNS)))
        if draw(st.booleans()):
            random = draw(RETURNS)
            best = draw(st.sampled_from([random, random + 1.0]))  # tied references, or not
            refs[name] = {"random": random, "best": best, "best_population": "p", "digest": f"d{s}"}
    return rows, refs


@FUZZ
@given(scores())
def test_summary_table_and_plot_are_written_for_any_scores(tmp_path_factory, drawn):
    rows, refs = drawn
    summary = E.summary_rows(rows, refs)
    for row in summary:
        ref = refs.get(row["scenario"])
        tied = ref is not None and ref["best"] == ref["random"]
        assert (row["normalised"] is None) == (ref is None or tied)
        if row["episodes"] == 1:
            assert math.isinf(row["ci_low"]) and math.isinf(row["ci_high"])
    table = E.summary_table(summary)
    assert table.count("\n") == 2 + len(rows)
    path = E.summary_plot(summary, tmp_path_factory.mktemp("plot") / "summary.png", "title")
    assert path.read_bytes()[:4] == b"\x89PNG"
