"""Versioned games (docs/versions.md): ids ``<game>-vN``, and what was made under one version
refused by another, with a one-line error naming both.

A version bump is simulated by raising the class's ``version`` with monkeypatch: nothing about
the game changes, so everything refused here would otherwise load."""

from __future__ import annotations

import json

import gymnasium
import pytest

import dilemmax
from dilemmax.agents import zoo
from dilemmax.agents.trained import TrainedPolicy
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.registry import env_spec, gymnasium_id, registered_envs, versioned_id
from dilemmax.errors import EnvVersionError, UsageError
from dilemmax.llm.transcript import Transcript
from dilemmax.scenarios.registry import scenario_set
from dilemmax.train.config import TrainConfig


def _one_line_naming(err: pytest.ExceptionInfo, *words: str) -> str:
    text = str(err.value)
    assert "\n" not in text
    for word in words:
        assert word in text, (word, text)
    return text


@pytest.mark.parametrize("env_id", registered_envs())
def test_every_game_has_a_versioned_id_that_builds_it(env_id):
    cls = env_spec(env_id).load()
    assert isinstance(cls.version, int) and cls.version >= 0
    assert versioned_id(env_id) == f"{env_id}-v{cls.version}"
    assert env_spec(versioned_id(env_id)).load() is cls  # what make builds (grid games: slow)
    # The Gymnasium single-seat id carries the same version.
    assert gymnasium_id(env_id) == f"dilemmax/{env_id}-v{cls.version}"
    assert gymnasium_id(env_id) in gymnasium.registry


def test_another_version_of_a_game_is_refused_by_make():
    assert type(dilemmax.make("moral_hazard-v0")) is MoralHazardEnv
    with pytest.raises(EnvVersionError) as err:
        dilemmax.make("moral_hazard-v1")
    _one_line_naming(err, "moral_hazard-v1", "moral_hazard-v0")
    assert isinstance(err.value, UsageError) and isinstance(err.value, ValueError)
    with pytest.raises(ValueError, match="unknown environment"):
        dilemmax.make("nonsense-v0")


def test_a_zoo_agent_of_version_n_is_refused_by_the_game_at_n_plus_1(monkeypatch):
    """The shipped zoo entries record version 0; at version 1 loading one fails before any
    checkpoint is read, naming both versions."""
    entry = zoo.manifest()["moral_hazard/ippo_s0"]
    assert entry["env_version"] == 0
    zoo.load("moral_hazard/ippo_s0", env=dilemmax.make("moral_hazard"))  # loads at v0
    monkeypatch.setattr(MoralHazardEnv, "version", 1)
    with pytest.raises(EnvVersionError) as err:
        zoo.load("moral_hazard/ippo_s0", env=dilemmax.make("moral_hazard"))
    _one_line_naming(err, "zoo:moral_hazard/ippo_s0", "moral_hazard-v0", "moral_hazard-v1")
    # The run folder itself (its config.json, from before versions were recorded: v0) too.
    with pytest.raises(EnvVersionError) as err:
        TrainedPolicy.load(zoo.resolve("moral_hazard/ippo_s0"))
    _one_line_naming(err, "moral_hazard-v0", "moral_hazard-v1")


def test_a_run_folder_records_the_version_and_is_refused_under_another(monkeypatch, tmp_path):
    saved = json.loads(TrainConfig(env="moral_hazard").to_json())
    assert saved["env_version"] == 0
    assert TrainConfig.from_dict(saved).env == "moral_hazard"
    monkeypatch.setattr(MoralHazardEnv, "version", 1)
    with pytest.raises(EnvVersionError) as err:
        TrainConfig.from_dict(saved, "runs/mh")
    _one_line_naming(err, "runs/mh", "moral_hazard-v0", "moral_hazard-v1")
    assert json.loads(TrainConfig(env="moral_hazard").to_json())["env_version"] == 1
    # A run trained on a scenario set records the version of the set's game.
    config = TrainConfig(env="scenarios", env_kwargs={"game": "moral_hazard"})
    assert json.loads(config.to_json())["env_version"] == 1


def test_a_transcript_records_its_games_and_refuses_a_resume_under_another(monkeypatch, tmp_path):
    path = tmp_path / "transcript.jsonl"
    with Transcript(path, {"env": "moral_hazard"}, games=["moral_hazard-v0"]):
        pass
    header = json.loads(path.read_text().splitlines()[0])
    assert header["games"] == ["moral_hazard-v0"]
    with Transcript(path, {"env": "moral_hazard"}, resume=True, games=["moral_hazard-v0"]):
        pass
    with pytest.raises(EnvVersionError) as err:
        Transcript(path, {"env": "moral_hazard"}, resume=True, games=["moral_hazard-v1"])
    _one_line_naming(err, "moral_hazard-v0", "moral_hazard-v1")


def test_scenario_hashes_hold_at_version_0_and_change_with_the_version(monkeypatch):
    """The hashes recorded in benchmarks/results/scenarios_zoo.md (version 0) still hold; at
    version 1 the game's version enters the hash, so an old score no longer matches."""
    chosen = scenario_set("moral_hazard", "test")
    recorded = {"moral_hazard/never_queries": "dde459ced4d6eb18"}
    digests = chosen.digests()
    assert {k: digests[k] for k in recorded} == recorded
    monkeypatch.setattr(MoralHazardEnv, "version", 1)
    assert chosen.digests()["moral_hazard/never_queries"] != recorded["moral_hazard/never_queries"]


def test_a_transcript_records_its_text_protocols_and_refuses_a_resume_under_another(tmp_path):
    path = tmp_path / "transcript.jsonl"
    label = ["moral_hazard-text-v1"]
    with Transcript(path, {"env": "moral_hazard"}, games=["moral_hazard-v0"], protocols=label):
        pass
    assert json.loads(path.read_text().splitlines()[0])["protocols"] == label
    with Transcript(path, {"env": "moral_hazard"}, resume=True, protocols=label):
        pass
    with pytest.raises(UsageError) as err:
        Transcript(path, {"env": "moral_hazard"}, resume=True, protocols=["moral_hazard-text-v2"])
    _one_line_naming(err, "text protocol moral_hazard-text-v1", "moral_hazard-text-v2")


@pytest.mark.slow
def test_resuming_a_play_run_recorded_before_protocol_versions_is_refused(tmp_path, capsys):
    """A transcript whose header has no "protocols" was rendered under version 0 of every text
    protocol (the layout before prefix caching): --resume refuses it in one line, calling
    nothing."""
    from dilemmax.cli import main
    from dilemmax.llm.server import LocalChatServer

    out = tmp_path / "run"
    command = [
        "play", "moral_hazard", "--seats", "openai:tiny", "--episodes", "1", "--envs", "1",
        "--no-progress", "--out", str(out),
    ]  # fmt: skip
    with LocalChatServer(lambda body: "FINAL A") as server:
        assert main([*command, "--base-url", server.base_url]) == 0
        lines = (out / "transcript.jsonl").read_text().splitlines()
        head = json.loads(lines[0])
        assert head["protocols"] == ["moral_hazard-text-v1"]
        del head["protocols"]
        (out / "transcript.jsonl").write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
        answered = server.answered
        capsys.readouterr()
        assert main([*command, "--base-url", server.base_url, "--resume"]) != 0
        assert server.answered == answered
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "moral_hazard-text-v0" in error, error
    assert "this dilemmax renders moral_hazard-text-v1" in error, error
