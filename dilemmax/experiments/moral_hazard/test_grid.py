"""The grid and sweeps designs against a planted model (queries exactly when k < 0.30, warns
correctly, avoids warned options), and the cross-model tables over planted differences."""

from __future__ import annotations

import pytest

from dilemmax.cli import main
from dilemmax.experiments.moral_hazard import grid, sweeps, tables
from dilemmax.experiments.moral_hazard.common import table_columns
from dilemmax.experiments.moral_hazard.conftest import parse, run_experiment

# The paper's column names, in its order (Tables 2, 5, 6, 7, 17 and 18).
PAPER_TABLE2 = ["Model", "Team", "Local", "Query", "Info", "Valid"]
PAPER_TABLE5 = ["Comparison", "Metric", "Δ pp", "Bootstrap 95% CI", "Positive", "Exact p"]
PAPER_TABLE6 = ["$k$", "Query", "Team", "Local", "Unsafe"]
PAPER_TABLE7 = ["Sweep", "Value", "Query", "Team", "Local", "Unsafe"]
PAPER_TABLE17 = ["Omitted model", "Team Δ pp", "Team 95% CI", "Risky Δ pp", "Risky 95% CI"]
PAPER_TABLE18 = ["Comparison", "Metric", "d_z", "P(Δ̄>0)", "Exact p", "Holm p", "BH q"]
PERFECT = "100.0 ± 0.0"


@pytest.fixture(scope="module")
def grid_run(planted_server, tmp_path_factory):
    argv = ["--conditions", "k=0.10", "--replicates", "2", "--episodes", "2",
            "--seats", "openai:planted", "--base-url", planted_server.base_url]  # fmt: skip
    return run_experiment(["moral_hazard/grid", *argv], tmp_path_factory.mktemp("grid"))


@pytest.mark.slow
def test_grid_sizes_and_call_counts():
    plan = grid.DESIGN.plan(*parse(grid.DESIGN, []))
    assert [len(p.config_names) for p in plan.parts] == [39, 39, 3, 3, 3, 3]  # 15 x 3 replicates
    assert all(p.episodes == 15 for p in plan.parts)
    # 13 two-agent, one three- and one four-agent condition, x 45 episodes, <= 3 calls per seat.
    assert plan.calls == 45 * (13 * 6 + 9 + 12)
    assert plan.parts[1].seats == {"agent_0": grid.RANDOM_SEAT, "agent_1": grid.RANDOM_SEAT}


@pytest.mark.slow
def test_grid_row_of_the_planted_model_and_the_random_control(grid_run):
    report = grid_run
    table2 = report.tables["table2"]
    assert table_columns(table2) == PAPER_TABLE2
    model_row = f"| openai:planted | {PERFECT} | 0.0 ± 0.0 | {PERFECT} | {PERFECT} | {PERFECT} |"
    assert model_row in table2
    random = report.results["random"]
    assert random["format_validity"]["replicates"] == [1.0, 1.0]  # every random move is legal
    assert len(random["team_success"]["replicates"]) == 2
    assert set(report.results["conditions"]) == {"k=0.10"}
    assert report.results["episodes"] == 2 * 2


@pytest.mark.slow
def test_sweeps_recover_the_planted_cost_cut(planted_server, tmp_path):
    argv = ["--sweeps", "k,w_T", "--k-values", "0.10,0.40", "--w-team-values", "0.5",
            "--replicates", "2", "--episodes", "2", "--seats", "openai:planted",
            "--base-url", planted_server.base_url]  # fmt: skip
    report = run_experiment(["moral_hazard/sweeps", *argv], tmp_path / "sweeps")
    table6, table7 = report.tables["table6"], report.tables["table7"]
    assert table_columns(table6) == PAPER_TABLE6 and table_columns(table7) == PAPER_TABLE7
    assert f"| 0.10 | {PERFECT} | {PERFECT} | 0.0 ± 0.0 | 0.0 ± 0.0 |" in table6
    k40 = report.results["sweeps"]["k"]["k=0.40"]
    assert k40["query_rate"]["mean"] == 0.0 and k40["team_success"]["mean"] == 0.0
    assert k40["unsafe_choice"]["mean"] == 1.0  # unwarned, it takes the top (unsafe) option
    assert f"| $w_T$ | 0.50 | {PERFECT} | {PERFECT} | 0.0 ± 0.0 | 0.0 ± 0.0 |" in table7
    assert (report.out / "figure2.png").stat().st_size > 1000
    full = sweeps.DESIGN.plan(*parse(sweeps.DESIGN, []))
    assert full.calls == 45 * 3 * (2 * 9 + 2 * 7 + sum(range(2, 10)))


def _run(model, method, team, unsafe):
    outcomes = {o: {"replicates": [0.5, 0.5]} for o in tables.TABLE2_OUTCOMES}
    outcomes["team_success"] = {"replicates": [team - 0.01, team + 0.01]}
    outcomes["unsafe_choice"] = {"replicates": [unsafe, unsafe]}
    return {"design": "moral_hazard/grid", "model": model, "method": method, "outcomes": outcomes}


def test_combine_gives_the_planted_signs(grid_run, tmp_path):
    base = {"A": 0.10, "B": 0.20, "C": 0.05, "D": 0.30}
    sft_gain = {"A": 0.05, "B": 0.10, "C": 0.02, "D": 0.20}
    gepa_gain = {"A": 0.10, "B": -0.10, "C": 0.10, "D": -0.10}
    runs = [grid_run.whole]  # a real run folder's results.json (the design's under "results")
    for m in base:
        runs += [
            _run(m, "Base", base[m], 0.5),
            _run(m, "SFT", base[m] + sft_gain[m], 0.4),
            _run(m, "RLOO", base[m] - 0.01, 0.5),
            _run(m, "GEPA", base[m] + gepa_gain[m], 0.6),
        ]
    report = tables.combine(runs)
    rows = {(r["comparison"], r["metric"]): r for r in report.results["table5"]}
    best, sft = (
        rows[("Best observed weight − Base", "Team success")],
        rows[("SFT − Base", "Team success")],
    )
    assert best["per_model"] == pytest.approx({m: 100 * g for m, g in sft_gain.items()})
    assert sft["delta_pp"] == pytest.approx(9.25) and sft["ci"][0] > 0
    assert (sft["positive"], sft["models"], sft["exact_p"]) == (4, 4, pytest.approx(2 / 16))
    rloo = rows[("RLOO − Base", "Team success")]
    assert rloo["delta_pp"] == pytest.approx(-1.0) and rloo["positive"] == 0 and rloo["ci"][1] < 0
    gepa = rows[("GEPA − Base", "Team success")]
    assert gepa["delta_pp"] == pytest.approx(0.0) and gepa["exact_p"] == 1.0
    assert rows[("SFT − Base", "Unsafe choice")]["delta_pp"] == pytest.approx(-10.0)
    assert rows[("GEPA − Base", "Unsafe choice")]["delta_pp"] == pytest.approx(10.0)
    assert all(
        r["bh_q"] >= r["exact_p"] and r["holm_p"] >= r["bh_q"] - 1e-12 for r in rows.values()
    )
    assert table_columns(report.tables["table2"]) == PAPER_TABLE2
    assert table_columns(report.tables["table5"]) == PAPER_TABLE5
    assert table_columns(report.tables["table18"]) == PAPER_TABLE18
    assert table_columns(report.tables["table17"].split("\n\n", 1)[1]) == PAPER_TABLE17
    assert "| SFT − Base | Team success | +9." in report.tables["table5"]
    # Table 2: the four planted models and the real run (Base), then the random control.
    lines = [line for line in report.tables["table2"].splitlines()[2:] if line.startswith("|")]
    labels = [line.split("|")[1].strip() for line in lines]
    assert labels == ["openai:planted", "A", "B", "C", "D", "Random"]
    lomo = report.results["leave_one_model_out"]
    assert lomo["comparison"] == "Best observed weight − Base" and len(lomo["rows"]) == 4
    report.figures["figure4"](str(tmp_path / "f4.png"))
    assert (tmp_path / "f4.png").stat().st_size > 1000
    # The command over run folders: one model, so Table 2 and no Table 5.
    out = tmp_path / "combined"
    assert (
        main(["experiment", "combine", "moral_hazard/grid", str(grid_run.out), "--out", str(out)])
        == 0
    )
    assert (out / "table2.md").read_text() == grid_run.tables["table2"]
    assert not (out / "table5.md").exists()


def test_several_runs_of_one_model_are_its_seeds():
    runs = [_run("A", "Base", team, 0.5) for team in (0.1, 0.2, 0.6)]
    # Each run's replicates are team -+ 0.01: the seeds' values are 0.1, 0.2, 0.6.
    row = tables.combine(runs).tables["table2"].splitlines()[2]
    assert row.startswith("| A | 30.0 ± 26.5 |")  # sd(10, 20, 60) = 26.46


def test_combine_refuses_other_results():
    from dilemmax.errors import UsageError

    with pytest.raises(UsageError, match="run 1 is not a moral_hazard/grid result"):
        tables.combine([{"design": "moral_hazard/isolation"}])
