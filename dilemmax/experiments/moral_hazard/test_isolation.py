"""Incentive isolation against a planted model that queries exactly when alpha > alpha*(k) + 0.02:
the boundaries, bars, contrasts and probes the pipeline recovers are the planted ones."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from dilemmax.errors import UsageError
from dilemmax.experiments.moral_hazard import isolation, probes
from dilemmax.experiments.moral_hazard.common import table_columns
from dilemmax.experiments.moral_hazard.conftest import run_experiment

EPISODES = 2
ARGV = ["--costs", "0.10,0.30", "--replicates", "1", "--episodes", str(EPISODES)]


@pytest.fixture(scope="module")
def run(planted_server, tmp_path_factory):
    """The design through ``dilemmax experiment``, then the same command with --resume."""
    out = tmp_path_factory.mktemp("isolation")
    argv = [*ARGV, "--seats", "openai:planted", "--base-url", planted_server.base_url]
    command = ["moral_hazard/isolation", *argv]
    first = run_experiment(command, out)
    before = planted_server.answered
    again = run_experiment([*command, "--resume"], out)
    return plan_of(ARGV), first, again, argv, planted_server.answered - before


def test_the_paper_cells_and_call_counts():
    from dilemmax.experiments.moral_hazard.conftest import parse

    plan = isolation.DESIGN.plan(*parse(isolation.DESIGN, []))
    assert len(plan.context["cells"]) == 67  # the paper's 67 cells, 45 decisions each
    assert len(plan.parts[0].config_names) == 67 * 3 and plan.parts[0].episodes == 15
    assert plan.calls == 67 * 45 * 3  # at most work, note and final per decision
    assert plan.context["probe_items"] == 67 * 16
    tiny = plan_of(ARGV)
    # k = 0.10: 0, .25, .40, .45, .50, .75, 1 (alpha* + 0.05 = 0.5 coincides); k = 0.30: eight.
    assert [c["share"] for c in tiny.context["cells"]] == [
        0.0, 0.25, 0.4, 0.45, 0.5, 0.75, 1.0, 0.0, 0.25, 0.5, 0.6, 0.65, 0.7, 0.75, 1.0,
    ]  # fmt: skip


def plan_of(argv):
    from dilemmax.experiments.moral_hazard.conftest import parse

    return isolation.DESIGN.plan(*parse(isolation.DESIGN, argv))


@pytest.mark.slow
def test_boundary_mae_and_bars_recover_the_planted_threshold(run):
    results = run[1].results
    # The planted switch sits at alpha* + 0.02; the grid sees 0% at alpha* and 100% at
    # alpha* + 0.05, so the interpolated crossing is alpha* + 0.025 at every cost.
    for found, star in zip(results["boundaries"], (0.45, 0.65), strict=True):
        assert found["alpha_star"] == pytest.approx(star)
        assert found["boundary"] == pytest.approx(star + 0.025)
    assert results["boundary_mae"] == pytest.approx(0.025)
    assert abs(results["boundary_mae"] - 0.02) <= 0.05  # 0.02 +- one grid step
    bars = results["bars"]
    assert (bars["below"]["rate"], bars["at"]["rate"], bars["above"]["rate"]) == (0.0, 0.0, 1.0)
    assert bars["below"]["decisions"] == bars["above"]["decisions"] == 2 * EPISODES
    assert bars["below"]["low"] == 0.0 and 0.0 < bars["below"]["high"] < 0.61
    assert results["format_validity"] == 1.0


def test_paired_contrasts(run):
    contrasts = run[1].results["contrasts"]
    # Shares both costs play: 0, .25, .5, .75, 1. Only at 0.5 do they differ (query at k = 0.10,
    # local at k = 0.30): a mean of -1/5 over the matched pairs.
    assert contrasts["cost"]["pairs"] == 5 * EPISODES
    assert contrasts["cost"]["delta_pp"] == pytest.approx(-20.0)
    assert contrasts["share"] == {"delta_pp": 100.0, "ci": [100.0, 100.0], "pairs": 2 * EPISODES}


def test_probes_scored_exactly_and_not_asked_again_on_resume(run, planted_server):
    plan, first, again, argv, calls_on_resume = run
    summary = first.results["probes"]
    cells = len(plan.context["cells"])
    assert summary["comprehension_items"] == 15 * cells
    assert summary["comprehension_accuracy"] == pytest.approx(9 / 15)  # the planted pattern
    assert summary["prediction_items"] == cells and summary["prediction_accuracy"] == 1.0
    lines = (first.out / probes.PROBE_FILE).read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert len(rows) == 16 * cells == len({r["key"] for r in rows})
    assert calls_on_resume == 0  # neither a game call nor a probe is asked again
    assert again.results["probes"] == summary
    assert again.results["boundaries"] == first.results["boundaries"]


def test_probe_items_and_parsers():
    contract = probes.Contract(2, 0.10, 0.45)
    items = {i.key.split("/")[1]: i for i in probes.items_for("c", contract)}
    assert items["margin"].truth == pytest.approx(0.0) and items["prediction"].truth == "EQUAL"
    assert items["query_target_team"].truth == pytest.approx(0.15 + 0.45 - 0.10)
    assert items["indifference_share"].truth == pytest.approx(0.45)
    assert probes.score(items["margin"], "so...\nANSWER: -0.000") == (0.0, True)
    assert probes.score(items["bonus"], "ANSWER 0.45\nANSWER 0.451") == (0.451, False)
    assert probes.score(items["prediction"], "**PREDICT: equal**") == ("EQUAL", True)
    assert probes.parse_number(None) is None and probes.parse_prediction(7) is None
    assert probes.parse_number("ANSWER " + " " * 100_000 + "x") is None  # linear, total


def test_tables_and_figure(run, tmp_path):
    tables = run[1].tables
    assert table_columns(tables["table8"]) == [
        "$k$", "Predicted $\\alpha^{*}(k)$", "Empirical 50% boundary", "Difference",
    ]  # fmt: skip
    assert "| 0.10 | 0.450 | 0.475 | +0.025 |" in tables["table8"]
    assert (run[1].out / "figure3.png").stat().st_size > 1000
    assert not math.isnan(run[1].results["bars"]["at"]["high"])
    assert run[1].whole["calls_planned"] == 15 * EPISODES * 3  # cells x episodes x <= 3 calls
    # Made: work and final in every decision, a note after each query (the cells above
    # alpha* + 0.02: 0.5, 0.75, 1 at k = 0.10 and 0.7, 0.75, 1 at k = 0.30).
    assert run[1].whole["calls"] == 15 * EPISODES * 2 + 6 * EPISODES
    assert run[1].whole["seat_calls"]["openai:planted"]["calls"] == run[1].whole["calls"]


def test_bad_options_are_one_line_errors(capsys, tmp_path):
    from dilemmax.cli import main

    for option, value, says in [
        ("--shares", "0.2,abc", "--shares: 'abc' is not a number"),
        ("--costs", "0.1,2", "--costs: 2.0 is outside [0.0, 1.0]"),
        ("--replicates", "0", "--replicates and --episodes must be >= 1"),
        ("--boundary-offset", "0", "--boundary-offset must lie in (0, 1)"),
    ]:
        out = str(tmp_path / option[2:])
        seats = ["--seats", "scripted:holmstrom", "--out", out]
        argv = ["experiment", "moral_hazard/isolation", *seats, option, value]
        assert main(argv) == 2
        assert says in capsys.readouterr().err
        assert not (tmp_path / option[2:] / "results.json").exists()


def test_combine_puts_models_side_by_side(run, tmp_path):
    from dilemmax.cli import main

    out = tmp_path / "combined"
    folder = str(run[1].out)
    assert main(["experiment", "combine", "moral_hazard/isolation", folder, folder,
                 "--out", str(out)]) == 2  # fmt: skip
    # A second model's run: the same results under another run key.
    other = tmp_path / "other"
    other.mkdir()
    whole = json.loads((run[1].out / "results.json").read_text())
    (other / "results.json").write_text(json.dumps({**whole, "run": "another model's"}))
    assert main(["experiment", "combine", "moral_hazard/isolation", folder, str(other),
                 "--out", str(out)]) == 0  # fmt: skip
    models = (out / "isolation_models.md").read_text()
    assert table_columns(models)[:3] == ["Model", "Boundary MAE", "Max error"]
    assert (
        models.count(
            "| openai:planted | 0.025 | 0.025 | 0.0 | 0.0 | 100.0 | 60.0 | 100.0 | 100.0 |"
        )
        == 2
    )
    assert "| 0.30 | 0.650 | 0.675 | 0.675 |" in (out / "table8.md").read_text()


def test_failed_probe_calls_stop_and_resume_asks_only_them(tmp_path):
    from dilemmax.experiments.moral_hazard.conftest import parse
    from dilemmax.experiments.moral_hazard.planted import boundary_model
    from dilemmax.llm.model_seats import CallsFailed
    from dilemmax.llm.server import LocalChatServer

    argv = ["--costs", "0.10", "--shares", "0.5", "--max-attempts", "1", "--seats", "openai:p"]
    reply = boundary_model()
    with LocalChatServer(reply, faults={i: "500" for i in range(4)}) as server:
        params, run = parse(isolation.DESIGN, [*argv, "--base-url", server.base_url])
        run = dataclasses.replace(run, out=tmp_path)
        plan = isolation.DESIGN.plan(params, run)
        with pytest.raises(CallsFailed, match="4 probe call"):
            isolation.extra(plan, params, run)
        kept = (tmp_path / probes.PROBE_FILE).read_text().splitlines()
        assert len(kept) == 12  # the answered ones, none of the failed
        before = server.answered
        done = isolation.extra(plan, params, dataclasses.replace(run, resume=True))
        assert server.answered - before == 4
    assert done["probes"]["comprehension_items"] == 15


@pytest.mark.slow
def test_a_model_at_ceiling_finishes_and_resumes_with_no_call(tmp_path):
    """A model that queries at every share (the paper's strongest model's pattern) through the
    real command: every bar at 100%, whose Wilson interval once ended at 0.9999999999999999 and
    made Figure 3's error bar negative after results.json was written. 13 decisions per bar
    (one cost, 13 episodes) is the smallest count that did it."""
    from dilemmax.experiments.moral_hazard.planted import boundary_model
    from dilemmax.llm.server import LocalChatServer

    argv = ["--costs", "0.10", "--shares", "0.40,0.45,0.50", "--replicates", "1",
            "--episodes", "13"]  # fmt: skip
    with LocalChatServer(boundary_model(shift=-2.0)) as server:  # queries whatever the share
        command = ["moral_hazard/isolation", *argv, "--seats", "openai:ceiling", "--base-url",
                   server.base_url]  # fmt: skip
        first = run_experiment(command, tmp_path)
        asked = server.answered
        again = run_experiment([*command, "--resume"], tmp_path)
        assert server.answered == asked  # neither a game call nor a probe asked again
    bars = first.results["bars"]
    for position in ("below", "at", "above"):
        assert bars[position]["rate"] == 1.0 and bars[position]["decisions"] == 13
        assert bars[position]["high"] == 1.0 and 0.7 < bars[position]["low"] < 1.0
    assert [b["boundary"] for b in first.results["boundaries"]] == [None]  # never below 50%
    assert first.whole["figures"] == ["figure3"] and "figures_failed" not in first.whole
    assert (tmp_path / "figure3.png").read_bytes()[:4] == b"\x89PNG"
    assert {"table8", "boundary_bars", "cells"} <= set(first.tables)
    assert "| above | 100.0 | [" in first.tables["boundary_bars"]
    assert first.whole["calls"] == 3 * 13 * 3  # work, note, final in every decision
    assert again.results == first.results


@pytest.mark.slow
def test_the_python_api_writes_the_results_json_of_the_command(planted_server, tmp_path):
    """A notebook's run of the smallest paper design (one cell, one episode, the probes) against
    the planted model: ``dilemmax.experiments.run`` writes the results.json the command writes
    for the same seeds, and with no folder gives the same results back without writing."""
    import dilemmax.experiments
    from dilemmax.llm.config import GenerateConfig

    sizes = {"costs": "0.10", "shares": "0.5", "replicates": 1, "episodes": 1}
    cli = run_experiment([
        "moral_hazard/isolation", "--costs", "0.10", "--shares", "0.5", "--replicates", "1",
        "--episodes", "1", "--seats", "openai:planted", "--base-url", planted_server.base_url,
        "--seed", "3",
    ], tmp_path / "cli")  # fmt: skip
    model = GenerateConfig(base_url=planted_server.base_url)
    run = dilemmax.experiments.run(
        "moral_hazard/isolation", seats="openai:planted", generate=model, seed=3,
        out=tmp_path / "py", progress=False, **sizes,
    )  # fmt: skip
    written = json.loads((tmp_path / "py" / "results.json").read_text())
    assert written == run.results and run.out == tmp_path / "py"
    report = {*(tmp_path / "py").glob("*.md"), *(tmp_path / "py").glob("*.png")}
    assert set(run.files) == {tmp_path / "py" / "results.json", *report}
    assert {name: text.rstrip("\n") for name, text in run.tables.items()} == {
        name: text.rstrip("\n") for name, text in cli.tables.items()
    }
    # Equal but for the folder each was written to and the calls' measured latency.
    assert written["options"].pop("out") == str(tmp_path / "py")
    assert cli.whole["options"].pop("out") == str(tmp_path / "cli")
    for whole in (written, cli.whole):
        assert whole["seat_calls"]["openai:planted"].pop("mean_latency_s") > 0
    assert written == cli.whole
    assert written["results"]["cells"][0]["decisions"] == 1 and written["calls"] > 0
    in_memory = dilemmax.experiments.run(
        "moral_hazard/isolation", seats="openai:planted", generate=model, seed=3, progress=False,
        no_probes=True, **sizes,
    )  # fmt: skip
    assert in_memory.out is None and in_memory.files == []
    no_probes = {k: v for k, v in cli.results.items() if k != "probes"}
    assert {k: v for k, v in in_memory.results["results"].items() if k != "probes"} == no_probes
    with pytest.raises(UsageError, match="no parameter 'cost'"):
        dilemmax.experiments.run("moral_hazard/isolation", seats="openai:p", cost=0.1)
    with pytest.raises(UsageError, match="parameter episodes: 'two' is not a whole number"):
        dilemmax.experiments.run("moral_hazard/isolation", seats="openai:p", episodes="two")
