"""The play API: GenerateConfig declares the model options once (the flags are made from it), and
a play session run from Python is the `dilemmax play` command's run."""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

import dilemmax.llm
import dilemmax.llm.api as llm_api
import dilemmax.llm.cli as llm_cli
import dilemmax.llm.session_options as session_options_module
from dilemmax.cli import main
from dilemmax.commandline import flag_of
from dilemmax.envs.options import OptionError
from dilemmax.errors import UsageError
from dilemmax.llm.cli import (
    add_model_arguments,
    add_session_arguments,
    generate_config,
    session_options,
)
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.plan import CallPlan
from dilemmax.llm.server import LocalChatServer
from dilemmax.llm.session_options import SessionOptions
from dilemmax.llm.test_session import calls_in, planted  # planted: local, no note, picks D

# A value other than the default for every field, as text on the command line.
GIVEN = {
    "base_url": ("http://a/v1|http://b/v1", ("http://a/v1", "http://b/v1")),
    "api_key_env": ("MY_KEY", "MY_KEY"),
    "temperature": ("0.7", 0.7),
    "top_p": ("0.9", 0.9),
    "top_k": ("20", 20),
    "presence_penalty": ("-1.5", -1.5),
    "max_tokens": ("64", 64),
    "seed": ("7", 7),
    "reasoning_effort": ("low", "low"),
    "reasoning_tokens": ("1024", 1024),
    "output": ("json_object", "json_object"),
    "timeout": ("5", 5.0),
    "max_attempts": ("2", 2),
    "concurrency": ("3", 3),
}


def model_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    return parser


def test_every_model_flag_is_made_from_its_generate_config_field():
    fields = dataclasses.fields(GenerateConfig)
    assert set(GIVEN) == {f.name for f in fields}  # the table covers every field
    parser = model_parser()
    assert generate_config(parser.parse_args([])) == GenerateConfig()  # the same defaults
    actions = {a.option_strings[0]: a for a in parser._actions if a.option_strings}
    for field in fields:
        flag = flag_of(field)
        assert flag in actions, flag
        assert actions[flag].help == field.metadata["help"]
        assert actions[flag].default == field.default
        text, value = GIVEN[field.name]
        assert getattr(generate_config(parser.parse_args([flag, text])), field.name) == value
    by_name = {f.name: f for f in fields}
    assert flag_of(by_name["seed"]) == "--model-seed"  # not the run's own --seed
    assert actions["--output-mode"].choices == ("json_schema", "json_object", "text")
    # The old spelling of --output-mode text still reads.
    assert generate_config(parser.parse_args(["--no-structured-output"])).output == "text"


def test_the_session_flags_default_to_session_options_own():
    parser = argparse.ArgumentParser()
    add_session_arguments(parser)
    assert session_options(parser.parse_args([])) == SessionOptions()
    given = session_options(
        parser.parse_args(["--seat", "agent_1=scripted:teacher", "--seats", "openai:m",
                           "--protocol", "memory_rounds=2", "--envs", "3", "--seed", "5",
                           "--max-steps", "9", "--on-call-error", "invalid", "--out", "o",
                           "--resume", "--no-progress", "--shard", "1/2", "--top-k", "4"])
    )  # fmt: skip
    assert given == SessionOptions(
        seats={"agent_1": "scripted:teacher"}, default_seat="openai:m",
        generate=GenerateConfig(top_k=4), protocol={"memory_rounds": 2}, envs=3, seed=5,
        max_steps=9, on_call_error="invalid", out="o", resume=True, progress=False, shard="1/2",
    )  # fmt: skip


def test_the_command_builds_the_session_options_once_and_hands_them_on(monkeypatch, capsys):
    """`dilemmax play` makes its SessionOptions once from the flags (checked once, as it is made)
    and play_session plays that very object: no second build, no second check."""
    built, checked, planned = [], [], []
    make, check = llm_cli.session_options, session_options_module.check_run_options

    def build(args):
        built.append(make(args))
        return built[-1]

    def plan(parts, options):  # what play_session plays under, its plan stubbed
        planned.append(options)
        return CallPlan((), 1, 0)

    monkeypatch.setattr(llm_cli, "session_options", build)
    monkeypatch.setattr(session_options_module, "check_run_options",
                        lambda options: checked.append(options) or check(options))  # fmt: skip
    monkeypatch.setattr(llm_api, "plan_parts", plan)
    argv = ["play", "moral_hazard", "--seats", "scripted:teacher", "--envs", "3", "--plan"]
    assert main(argv) == 0
    assert len(built) == 1 and built[0].envs == 3
    assert len(planned) == 1 and planned[0] is built[0]  # handed on, not rebuilt
    assert len(checked) == 1 and checked[0] is built[0]  # checked once


def test_play_session_takes_the_options_object_or_the_keywords_not_both():
    both = r"^play_session\(\): give options= or envs, seed, not both$"
    with pytest.raises(UsageError, match=both):
        dilemmax.llm.play_session(
            "moral_hazard", options=SessionOptions(), seed=3, envs=2, episodes=2
        )
    with pytest.raises(UsageError, match="--envs must be >= 1"):  # checked as it is made
        SessionOptions(envs=0)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--temperature", "2.5"], "--temperature=2.5: expected a number in 0..2"),
        (["--top-k", "0"], "--top-k=0: expected an integer >= 1"),
        (["--model-seed", "-1"], "--model-seed=-1: expected an integer in 0..2147483647"),
        (["--timeout", "0"], "--timeout=0.0: expected a number > 0 and <= 86400"),
        (["--api-key-env", "1X"], "--api-key-env='1X': expected an environment variable's name"),
        (["--base-url", "a/v1,b/v1"], "--base-url 'a/v1,b/v1': a comma or space inside an address"),
    ],
)
def test_a_model_flag_out_of_range_is_one_line_naming_the_flag(argv, message):
    with pytest.raises(OptionError) as error:
        generate_config(model_parser().parse_args(argv))
    assert str(error.value).startswith(message)


def test_a_seats_own_options_go_over_the_runs_each_checked():
    run = GenerateConfig(base_url="http://a/v1", temperature=0.2)
    assert run.base_url == ("http://a/v1",)
    seat = run.merged({"temperature": "0.9", "base_url": "http://b/v1|http://c/v1", "seed": "3"})
    assert (seat.temperature, seat.base_url, seat.seed) == (0.9, ("http://b/v1", "http://c/v1"), 3)
    assert seat.max_tokens == run.max_tokens == 512  # the rest is the run's
    with pytest.raises(OptionError, match="temperature='9': expected a number in 0..2"):
        run.merged({"temperature": "9"})
    with pytest.raises(OptionError, match="unknown model options \\['role'\\]"):
        run.merged({"role": "cooperator"})
    with pytest.raises(OptionError, match="output='yaml': expected one of"):
        GenerateConfig(output="yaml").check()


@pytest.mark.slow
def test_a_play_session_from_python_is_the_play_command(tmp_path, capsys):
    """A notebook's session and the command line, same seeds and seats, against one planted
    server: the same episodes, metrics, summary, call counts and transcript calls."""
    seats = {"agent_0": "openai:tiny"}
    with LocalChatServer(planted) as server:
        run = dilemmax.llm.play_session(
            "moral_hazard",
            seats=seats,
            default_seat="scripted:teacher",
            generate=dilemmax.llm.GenerateConfig(base_url=server.base_url, max_tokens=64),
            episodes=3,
            envs=2,
            seed=4,
            rotate=True,
            out=tmp_path / "py",
        )
        argv = ["play", "moral_hazard", "--seat", "agent_0=openai:tiny", "--seats",
                "scripted:teacher", "--base-url", server.base_url, "--max-tokens", "64",
                "--episodes", "3", "--envs", "2", "--seed", "4", "--rotate", "--no-progress",
                "--out", str(tmp_path / "cli"), "--json", str(tmp_path / "cli.json")]  # fmt: skip
        assert main(argv) == 0
    cli = json.loads((tmp_path / "cli.json").read_text())
    mine = json.loads(json.dumps(run.to_json(), default=str))
    assert mine["episodes"] == cli["episodes"] and len(mine["episodes"]) == 6
    assert mine["summary"] == cli["summary"]
    counts = ("calls", "format_validity", "prompt_tokens", "completion_tokens", "errors")
    seat = "openai:tiny"
    assert {c: mine["calls"][seat][c] for c in counts} == {c: cli["calls"][seat][c] for c in counts}
    assert json.loads((tmp_path / "py" / "results.json").read_text())["episodes"] == cli["episodes"]
    # The planted model never queries; the teacher always does.
    assert run.summary["all"]["query_by_agent[openai:tiny]"][0] == 0.0
    assert run.summary["all"]["query_by_agent[scripted:teacher]"][0] == 1.0
    # Same run identity, so the same call keys and prompts.
    py, cli_calls = (calls_in(tmp_path / d) for d in ("py", "cli"))
    assert {c["key"]: c["prompt_hash"] for c in py} == {
        c["key"]: c["prompt_hash"] for c in cli_calls
    }
    assert len(py) > 0
    capsys.readouterr()


def test_a_mistake_in_a_python_session_is_one_line_before_any_call(tmp_path):
    with pytest.raises(UsageError, match="--temperature|temperature=5"):
        dilemmax.llm.play_session(
            "moral_hazard",
            default_seat="openai:tiny",
            generate=GenerateConfig(base_url="http://127.0.0.1:9/v1", temperature=5),
            out=tmp_path / "o",
        )
    with pytest.raises(UsageError, match="unknown agent"):
        dilemmax.llm.play_session("moral_hazard", seats={"agent_9": "scripted:teacher"})
    assert not (tmp_path / "o").exists()
