"""Issue #35 probes of a zoo of one's own (``DILEMMAX_ZOO``): a manifest is checked whole, each
field's type and value, and a bad one is one line naming the entry and the field; a variable that
names no folder says so, naming the variable, instead of "not in the zoo"."""

from __future__ import annotations

import json

import pytest
from test_cli_errors import _fails_cleanly

from dilemmax.agents import zoo
from dilemmax.errors import UsageError

NAME = "consequence/ippo_s1"


def _zoo(tmp_path, entry) -> None:
    run = tmp_path / "consequence" / "ippo"
    run.mkdir(parents=True, exist_ok=True)
    (run / "config.json").write_text("{}")
    (tmp_path / zoo.MANIFEST).write_text(json.dumps({NAME: entry}))


def _good(tmp_path) -> dict:
    _zoo(tmp_path, {})
    digest = zoo.run_digest(tmp_path / "consequence" / "ippo")
    return {"run": "consequence/ippo", "seed": 1, "digest": digest, "game": "consequence",
            "algo": "ippo", "command": "dilemmax train", "train_seconds": 2.5}  # fmt: skip


def test_a_valid_manifest_still_resolves(tmp_path):
    _zoo(tmp_path, _good(tmp_path))
    assert zoo.verify(NAME, tmp_path) == tmp_path / "consequence" / "ippo"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda e: ["not", "an", "object"], "is list, not an object"),
        (lambda e: "text", "is str, not an object"),
        (lambda e: {**e, "seed": "abc"}, "field 'seed' is \"abc\""),
        (lambda e: {**e, "seed": -1}, "field 'seed' is -1"),
        (lambda e: {**e, "seed": 1.5}, "field 'seed' is 1.5"),
        (lambda e: {**e, "seed": True}, "field 'seed' is true"),
        (lambda e: {k: v for k, v in e.items() if k != "seed"}, "lacks field(s) ['seed']"),
        (lambda e: {**e, "run": 7}, "field 'run' is 7"),
        (lambda e: {**e, "run": "../../etc"}, "field 'run' is \"../../etc\""),
        (lambda e: {**e, "run": "/etc"}, "field 'run' is \"/etc\""),
        (lambda e: {**e, "run": ""}, "field 'run' is \"\""),
        (lambda e: {**e, "digest": None}, "field 'digest' is null"),
        (lambda e: {**e, "digest": "abc"}, "field 'digest' is \"abc\""),
        (lambda e: {**e, "game": ["consequence"]}, "field 'game' is [\"consequence\"]"),
        (lambda e: {**e, "game": "moral_hazard"}, "not the game its name starts with"),
        (lambda e: {**e, "train_seconds": "fast"}, "field 'train_seconds'"),
        (lambda e: {**e, "sed": 1}, "unknown field 'sed'"),
    ],
)
def test_every_bad_field_is_one_line_naming_the_entry_and_field(
    tmp_path, monkeypatch, capsys, change, words
):
    _zoo(tmp_path, change(_good(tmp_path)))
    with pytest.raises(UsageError, match="entry 'consequence/ippo_s1'") as err:
        zoo.manifest(tmp_path)
    assert words in str(err.value)
    monkeypatch.setenv("DILEMMAX_ZOO", str(tmp_path))
    err = _fails_cleanly(capsys, ["rollout", "consequence", "--seat", f"agent_0=zoo:{NAME}"])
    assert words in err and "consequence/ippo_s1" in err


def test_a_bad_population_name_is_refused(tmp_path):
    (tmp_path / zoo.MANIFEST).write_text(json.dumps({"no slash": _good(tmp_path)}))
    with pytest.raises(UsageError, match="entry 'no slash': a population is named"):
        zoo.names(tmp_path)


def test_a_missing_zoo_folder_names_the_folder_and_the_variable(tmp_path, monkeypatch, capsys):
    for path, words in [
        (tmp_path / "nowhere", "does not exist"),
        (tmp_path / "a-file", "is not a folder"),
        (tmp_path, "has no manifest.json"),
    ]:
        if path.name == "a-file":
            path.write_text("x")
        monkeypatch.setenv("DILEMMAX_ZOO", str(path))
        err = _fails_cleanly(capsys, ["rollout", "consequence", "--seat", f"agent_0=zoo:{NAME}"])
        assert f"DILEMMAX_ZOO='{path}'" in err and words in err, err
        assert "not in the zoo" not in err
