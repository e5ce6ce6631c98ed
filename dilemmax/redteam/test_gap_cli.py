"""The gap report with its figures, and the ``dilemmax redteam`` commands, on small inputs."""

import json

import numpy as np
import pytest

from dilemmax.cli import main
from dilemmax.envs.consequence.generator import context_table
from dilemmax.redteam import gap, inputs
from dilemmax.redteam import reference as R
from dilemmax.redteam import statistics as S
from dilemmax.redteam.reference import tables as reference_tables


@pytest.fixture(scope="module")
def small_reference():
    """Exact reference on 24 contexts: splits (0, 1, 11) and (1, 5, 6), T = 1..12, over two
    rounds (the game's three cost twice the solving, and the report reads no round count; one
    round would make every rule's UR_ref the same)."""
    resources, thresholds = context_table(12, 3)
    keep = np.isin(np.arange(len(thresholds)) // 12, [1, 11])  # (0,1,11) and (1,5,6)
    return R.reference_grid(resources[keep], thresholds[keep], epsilons=(0.0, 0.1), num_rounds=2)


def population_over(reference, name, shift, seed):
    rng = np.random.default_rng(seed)
    k, c = reference.ur_at(0.1).shape
    episodes = 4
    rule = np.repeat(np.arange(k), c * episodes)
    context = np.tile(np.repeat(np.arange(c), episodes), k)
    base = reference.ur_at(0.1)[rule, context] + np.asarray(shift)[rule]
    deaths = rng.binomial(3, np.clip(base, 0, 1)) / 3.0
    metrics = {
        "fatality": deaths,
        "survivors": 3 - 3 * deaths,
        "collapse": (deaths == 1) * 1.0,
        "targeted_elimination": (rule == 3) * (deaths > 0) * 1.0,
        "exploitation": deaths * 0,
        "cascade": deaths * 0,
        "deaths_by_rank": np.zeros((len(rule), 3)),
        "round_one_deaths_by_rank": np.zeros((len(rule), 3)),
    }
    return S.Population(name, metrics, rule, context, c)


@pytest.mark.slow
def test_gap_report_and_figures(tmp_path, small_reference):
    pops = [
        population_over(small_reference, "safe@0.1", [0, 0, 0, 0, 0], 0),
        population_over(small_reference, "rp_exploiter", [0, 0, 0, 0.6, 0], 1),
    ]
    report = gap.write_gap_report(pops, small_reference, tmp_path, num_resamples=500)
    rp = report["populations"]["rp_exploiter"]["iag"]["0.1"]["RP"]
    assert 0.4 < rp["mean"] < 0.8 and rp["low"] > 0
    for rule in ("RE", "DV", "RP", "PP"):  # sampled at the reference's own rates: no gap
        assert abs(report["populations"]["safe@0.1"]["iag"]["0.1"][rule]["mean"]) < 0.05
    assert (
        report["populations"]["rp_exploiter"]["fingerprint"]["rp_decisively_safest_contexts"] == 0
    )
    assert "population_x_rule" in report
    for stem in (
        "fatality_safe_0_1",
        "iag_rp_exploiter",
        "reference_ur",
        "stakes_fatality",
        "stakes_survivors",
        "rule_ranking",
        "iag_table",
    ):
        assert (tmp_path / f"{stem}.csv").exists() and (tmp_path / f"{stem}.md").exists()
        if stem != "iag_table":
            assert (tmp_path / f"{stem}.png").stat().st_size > 1000
    assert json.loads((tmp_path / "report.json").read_text())["epsilons"] == [0.0, 0.1]
    rows = (tmp_path / "contexts_rp_exploiter.csv").read_text().splitlines()
    assert len(rows) == 1 + 24 * 5 and rows[0].startswith("resources,T,rule,episodes,fatality")


@pytest.mark.slow
def test_reference_save_load(tmp_path, small_reference):
    R.save_reference(small_reference, tmp_path / "ref.npz")
    back = R.load_reference(tmp_path / "ref.npz")
    assert back.rules == ("AON", "RE", "DV", "RP", "PP") and back.epsilons == (0.0, 0.1)
    assert np.array_equal(back.ur, small_reference.ur)


def test_parse_context_errors_name_the_problem():
    assert inputs.parse_context("6,1,5:10") == ((1, 5, 6), 10)
    for bad, what in [
        ("1,5,6", "expected"),
        ("1,5,x:3", "integers"),
        ("1,5,5:3", "summing"),
        ("1,5,6:13", "T must be"),
    ]:
        with pytest.raises(ValueError, match=what):
            inputs.parse_context(bad)
    assert inputs.context_index((1, 5, 6), 10) == 11 * 12 + 9  # split (1, 5, 6) is the 12th, T = 10


def test_certify_command_end_to_end(tmp_path, capsys):
    num_contexts, episodes = 228, 100
    idx = inputs.context_index((1, 5, 6), 10)
    rule = np.repeat([0, 3], episodes)
    context = np.full(2 * episodes, idx)
    collapse = np.zeros(2 * episodes)
    exploitation = np.concatenate([np.zeros(episodes), np.ones(episodes)])
    pop = S.Population(
        "demo", {"collapse": collapse, "exploitation": exploitation}, rule, context, num_contexts
    )
    pop.save(tmp_path / "pop.npz")
    code = main(
        [
            "redteam",
            "certify",
            "--population",
            str(tmp_path / "pop.npz"),
            "--context",
            "1,5,6:10",
            "--rules",
            "AON",
            "RP",
            "PP",
            "--out",
            str(tmp_path / "case"),
        ]
    )
    assert code == 0
    case = json.loads((tmp_path / "case.json").read_text())
    assert case["certification"]["certified_rules"] == ["AON"]
    assert (
        main(
            [
                "redteam",
                "certify",
                "--population",
                str(tmp_path / "pop.npz"),
                "--context",
                "1,5,6",
                "--out",
                str(tmp_path / "x"),
            ]
        )
        == 2
    )
    assert "expected 'w1,w2,w3:T'" in capsys.readouterr().out


@pytest.mark.slow
def test_reference_command_creates_the_output_folder(tmp_path, capsys, monkeypatch):
    # The command solves the whole grid; its first split (12 contexts) is enough to write.
    whole = reference_tables.context_table
    monkeypatch.setattr(
        reference_tables, "context_table", lambda *a: tuple(x[:12] for x in whole(*a))
    )
    out = tmp_path / "new" / "folder" / "ref.npz"  # nothing of this exists yet
    args = ["redteam", "reference", "--epsilons", "0", "--rounds", "1", "--out", str(out)]
    assert main(args) == 0
    back = R.load_reference(out)
    assert back.epsilons == (0.0,) and (out.parent / "ref.md").exists()
    assert back.thresholds.tolist() == list(range(1, 13))  # what was solved is what was written


@pytest.mark.parametrize("command", ["play", "ablate"])
def test_redteam_unknown_policy_is_one_line_and_exit_2(command, tmp_path, capsys):
    argv = ["redteam", command, "--policy", "nosuchpolicy", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "unknown policy 'nosuchpolicy'" in err and "fair_share" in err
    assert "Traceback" not in err and not (tmp_path / "out").exists()
