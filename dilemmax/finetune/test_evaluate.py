"""The Table 3 report from evaluation summaries (no model: hand-made summaries)."""

from __future__ import annotations

import json

import pytest

from dilemmax.finetune.evaluate import OUTCOMES, condition_table, table3, write_report


def summary(team: float, query: float) -> dict:
    row = {o: (0.1, 0.05, 0.15) for o in OUTCOMES}
    row["team_success"] = (team, max(team - 0.1, 0.0), min(team + 0.1, 1.0))
    row["query_rate"] = (query, query, query)
    return {"all": row, "k=0.10": row, "n=3": row}


RESULTS = {"base": summary(0.05, 0.2), "sft": summary(0.65, 1.0), "rloo": summary(0.0, 0.1)}


def test_table3_reports_change_in_team_success_and_every_outcome():
    lines = table3(RESULTS).splitlines()
    assert lines[0].startswith("| method | change in team success (pp) | team_success |")
    assert all(o in lines[0] for o in OUTCOMES if o != "score")
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in lines[2:]}
    assert rows["base"][1] == "+0.0"
    assert rows["sft"][1] == "+60.0"
    assert rows["rloo"][1] == "-5.0"
    assert rows["sft"][2] == "65.0 [55.0, 75.0]"  # team success, percent with its CI
    assert rows["sft"][3] == "100.0 [100.0, 100.0]"  # query rate
    assert rows["sft"][-1] == "0.100 [0.050, 0.150] |"  # score, not a percentage


def test_condition_table_and_report_files(tmp_path):
    table = condition_table(RESULTS["sft"])
    assert [line.split(" | ")[0] for line in table.splitlines()[2:]] == ["| k=0.10", "| n=3"]
    paths = write_report(RESULTS, tmp_path)
    assert json.loads(paths["json"].read_text())["sft"]["all"]["team_success"][0] == 0.65
    assert "## sft: per condition" in paths["table"].read_text()
    assert paths["plot"].stat().st_size > 1000


def test_reward_summary_counts_prompts_not_samples(small_records):
    import math

    import pytest

    from dilemmax.finetune.evaluate import reward_summary

    first = small_records[:3]  # n = 2, episode 0: work (agent 1), work (agent 2), note (agent 1)
    assert [r["stage"] for r in first] == ["work", "work", "note"]
    teacher = [r["completion"][0]["content"] for r in first]
    records = [r for r in first for _ in range(2)]
    replies = [teacher[0], teacher[0], teacher[1], "no move", "", "NOTE CASE 9 UNSAFE A"]
    got = reward_summary(records, replies, samples=2)
    # per prompt: 1.0, 0.5, 0.0 -> mean 0.5, standard deviation 0.5 over 3 prompts
    assert got["reward"] == pytest.approx(0.5)
    assert got["reward_se"] == pytest.approx(0.5 / math.sqrt(3))
    assert (got["prompts"], got["samples"]) == (3, 2)
    assert got["format_reward"] == pytest.approx(0.05 * 3 / 6)
    assert got["per_stage"] == pytest.approx({"work": 0.75, "note": 0.0})
    assert got["per_prompt"] == pytest.approx([1.0, 0.5, 0.0])


def test_paired_difference_removes_prompt_difficulty():
    import pytest

    from dilemmax.finetune.evaluate import paired_difference

    before = {"per_prompt": [0.0, 0.5, 1.0, 0.25]}
    after = {"per_prompt": [0.25, 0.75, 1.0, 0.5]}  # +0.25 everywhere but the easy prompt
    got = paired_difference(after, before)
    assert got["difference"] == pytest.approx(0.1875) and got["prompts"] == 4
    assert got["difference_se"] == pytest.approx(0.125 / 2)  # sd of (.25,.25,0,.25) / sqrt(4)
    with pytest.raises(ValueError, match="3 and 4 prompts"):
        paired_difference({"per_prompt": [1.0, 1.0, 1.0]}, before)
    with pytest.raises(ValueError, match="per_prompt"):
        paired_difference({"reward": 1.0}, before)


def planted_reply(body) -> str:
    """The model named "querier" always queries; any other never does; both write no note and
    pick option A (every move well formed)."""
    text = body["messages"][-1]["content"]
    if "Your move (work)" in text:
        return "ACTION QUERY" if body["model"] == "querier" else "ACTION LOCAL A"
    if "Your move (note)" in text:
        return "NO NOTE"
    return "FINAL A"


@pytest.mark.slow
def test_evaluate_plays_any_model_seat_and_recovers_the_planted_policies(tmp_path):
    """An ``openai:`` seat and (with the inspect extra) an ``inspect:`` seat on one local server,
    told apart by the model name each sends."""
    import importlib.util
    from dataclasses import asdict

    from dilemmax.cli import main
    from dilemmax.finetune.datasets import DatasetSpec
    from dilemmax.llm.server import LocalChatServer

    one = DatasetSpec(costs=(0.0,), team_weights=(0.5,), num_agents=(2,))
    one = DatasetSpec(**{**asdict(one), "provenances": ("anonymous",)})
    (tmp_path / "spec.json").write_text(json.dumps(asdict(one)))  # one n = 2 condition
    with LocalChatServer(planted_reply) as server:
        url = server.base_url
        argv = ["finetune", "evaluate", "--method", f"asks=openai:querier,base_url={url}"]
        never = "inspect:openai-api/local/local" if importlib.util.find_spec("inspect_ai") else ""
        never = f"{never or 'openai:local'},base_url={url}"
        argv += ["--method", f"never={never}", "--conditions", str(tmp_path)]
        argv += ["--episodes", "4", "--envs", "4", "--no-progress", "--out", str(tmp_path / "o")]
        assert main(argv) == 0
        asked = {body["model"] for body in server.bodies}
    assert asked == {"querier", "local"}
    results = json.loads((tmp_path / "o" / "results.json").read_text())
    assert list(results) == ["asks", "never"]
    assert results["asks"]["all"]["query_rate"][0] == 1.0
    assert results["never"]["all"]["query_rate"][0] == 0.0
    assert [results[m]["all"]["format_validity"][0] for m in results] == [1.0, 1.0]
    table = (tmp_path / "o" / "table3.md").read_text()
    assert "| asks | +0.0 |" in table  # changes against the first method without a base model


def test_evaluate_refuses_what_it_cannot_play(tmp_path, capsys):
    from dilemmax.cli import main

    out = ["--out", str(tmp_path / "o")]
    cases = {
        "evaluate plays model seats (hf:, inspect:, openai:)": ["--method", "t=scripted:teacher"],
        "--adapter needs --model": ["--adapter", f"a={tmp_path}"],
        "give --model (with any --adapter) or --method": [],
        "expects NAME=<kind>:<target>": ["--method", "openai:m"],
        "given twice": ["--method", "a=openai:m,base_url=http://h/v1"] * 2,
    }
    for message, argv in cases.items():
        assert main(["finetune", "evaluate", *argv, *out]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_evaluate_from_python_recovers_the_planted_policies(tmp_path):
    """:func:`dilemmax.finetune.api.evaluate` as a notebook calls it: typed arguments, a
    GenerateConfig, an Evaluation back (the command's report written to ``out``)."""
    from dataclasses import asdict

    from dilemmax.finetune import api
    from dilemmax.finetune.datasets import DatasetSpec
    from dilemmax.llm.config import GenerateConfig
    from dilemmax.llm.server import LocalChatServer

    one = DatasetSpec(costs=(0.0,), team_weights=(0.5,), num_agents=(2,),
                      provenances=("anonymous",))  # fmt: skip
    (tmp_path / "spec.json").write_text(json.dumps(asdict(one)))  # one n = 2 condition
    with LocalChatServer(planted_reply) as server:
        evaluation = api.evaluate(
            tmp_path / "o", methods={"asks": "openai:querier"}, conditions=tmp_path,
            episodes=1, envs=1,
            generate=GenerateConfig(base_url=server.base_url, max_tokens=128),
        )  # fmt: skip
        asked = {body["model"] for body in server.bodies}
    assert asked == {"querier"} and evaluation.base == "asks"
    assert evaluation.results["asks"]["all"]["query_rate"][0] == 1.0
    assert evaluation.results["asks"]["all"]["format_validity"][0] == 1.0
    assert "| asks | +0.0 |" in evaluation.table()
    saved = json.loads(evaluation.files["json"].read_text())
    assert saved["asks"]["all"]["query_rate"][0] == 1.0
