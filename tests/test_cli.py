"""The dilemmax command."""

import json

import pytest

from dilemmax.cli import main, parse_assignments


def test_list_names_every_registered_env(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for env_id in ("consequence", "moral_hazard", "open_cleanup", "open_harvest"):
        assert env_id in out


def test_rollout_writes_transcript_and_summary(tmp_path, capsys):
    out, summary = tmp_path / "run.jsonl", tmp_path / "summary.json"
    args = ["rollout", "toy", "--episodes", "3", "--seed", "1", "--out", str(out)]
    assert main([*args, "--seat", "agent_1=first_legal", "--json", str(summary)]) == 0
    assert "return" in capsys.readouterr().out
    lines = out.read_text().splitlines()
    assert sum("metrics" in json.loads(line) for line in lines) == 3
    assert json.loads(summary.read_text())["return"][1] == 0.0  # first_legal spends nothing


def test_rollout_rejects_unknown_policy_and_seat():
    with pytest.raises(SystemExit, match="choose from"):
        main(["rollout", "toy", "--policy", "nope"])
    with pytest.raises(SystemExit, match="unknown agent"):
        main(["rollout", "toy", "--seat", "agent_9=random"])


def test_parse_assignments():
    assert parse_assignments(["n=3", "rule=RP", "w=(1, 5)"]) == {"n": 3, "rule": "RP", "w": (1, 5)}
    with pytest.raises(SystemExit):
        parse_assignments(["oops"])
