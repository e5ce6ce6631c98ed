"""The typed Python entry points from a notebook (issue #44): an argument of the wrong kind is
one line naming the parameter and what it takes (an ArgumentError: a UsageError and a
TypeError), before anything plays, instead of a TypeError, AttributeError or ValueError from
deep inside. Every parameter of play_session is tried; the other entry points by a few."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import dilemmax.finetune.api as finetune
import dilemmax.redteam.api as redteam
from dilemmax.envs.typecheck import ArgumentError, admits, describe
from dilemmax.errors import UsageError
from dilemmax.experiments import combine, merge, run
from dilemmax.llm.api import merge_play_shards, play_session
from dilemmax.scenarios.api import evaluate_scenarios

# parameter -> (a value of the wrong kind, words the message gives for what it takes)
PLAY_SESSION = {
    "env": (3, "a string"),
    "options": ({"envs": 4}, "a SessionOptions, or None"),
    "seats": (["teacher"], "a mapping of strings to strings, or None"),
    "default_seat": (3, "a string, or None"),
    "episodes": ("3", "an integer"),
    "seed": (1.5, "an integer"),
    "envs": (True, "an integer"),
    "max_steps": ("10", "an integer, or None"),
    "env_options": (["num_rounds=2"], "a mapping of names to values, or None"),
    "protocol": ("memory_rounds=2", "a mapping of names to values, or None"),
    "generate": ({"temperature": 0.7}, "a GenerateConfig, or None"),
    "grid": ("yes", "a bool (True or False)"),
    "rotate": (1, "a bool (True or False)"),
    "on_call_error": (0, "a string"),
    "out": (3, "a string or a path, or None"),
    "resume": ("no", "a bool (True or False)"),
    "shard": (0, "a Shard or a string, or None"),
    "progress": (None, "a bool (True or False)"),
    "limits": ({"calls": 10}, "a Limits, or None"),
    "cache": (3, "a string, a path or a bool (True or False), or None"),
    "prices": (["openai:m=1/2"], "a mapping of strings to Price objects, or None"),
    "plan": ("yes", "a bool (True or False)"),
}


def _one_line_naming(error: pytest.ExceptionInfo, owner: str, name: str, takes: str) -> None:
    text = str(error.value)
    assert isinstance(error.value, UsageError) and isinstance(error.value, TypeError)
    assert "\n" not in text
    assert text.startswith(f"{owner}: {name}=") and text.endswith(f"expected {takes}"), text


def test_every_parameter_of_play_session_is_tried():
    assert set(PLAY_SESSION) == set(inspect.signature(play_session).parameters)


@pytest.mark.parametrize("name", list(PLAY_SESSION))
def test_play_session_names_a_wrong_kind_of_argument(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an out that slipped through would land here
    value, takes = PLAY_SESSION[name]
    arguments = {"env": "moral_hazard", "default_seat": "scripted:teacher", name: value}
    with pytest.raises(ArgumentError) as error:
        play_session(**arguments)
    _one_line_naming(error, "play_session()", name, takes)
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_a_seat_spec_that_is_not_text_is_named():
    with pytest.raises(ArgumentError, match=r"seats=\{'agent_0': 3\}"):
        play_session("moral_hazard", seats={"agent_0": 3}, default_seat="scripted:teacher")


@pytest.mark.parametrize(
    "call, owner, name, takes",
    [
        (lambda: run(3), "run()", "design", "a string or a Design"),
        (lambda: run("moral_hazard/isolation", seat=["x"]), "run()", "seat",
         "a mapping of strings to strings, or None"),
        (lambda: run("moral_hazard/isolation", envs="16"), "run()", "envs", "an integer"),
        (lambda: combine("x", "runs/a", "out"), "combine()", "dirs",
         "a list of strings or paths"),
        (lambda: merge(None, "out"), "merge()", "dirs", "a list of strings or paths"),
        (lambda: merge_play_shards([1, 2], "out"), "merge_play_shards()", "dirs",
         "a list of strings or paths"),
        (lambda: evaluate_scenarios("moral_hazard", episodes=2.5), "evaluate_scenarios()",
         "episodes", "an integer"),
        (lambda: evaluate_scenarios(["moral_hazard"]), "evaluate_scenarios()", "game",
         "a string"),
        (lambda: redteam.play({"policy": "greedy"}), "play()", "options", "a PlayOptions"),
        (lambda: redteam.PlayOptions("greedy", episodes="4"), "PlayOptions", "episodes",
         "an integer"),
        (lambda: redteam.CertifyOptions(contexts=[(1, 2, 3)]), "CertifyOptions", "contexts",
         "a list of lists of 2 items (a list of integers, an integer) or strings"),
        (lambda: redteam.gap("ref.npz", "pop.npz", "out"), "gap()", "populations",
         "a list of strings or paths"),
        (lambda: finetune.reward("model", "data", samples="4"), "reward()", "samples",
         "an integer"),
        (lambda: finetune.evaluate("out", methods=[("a", "openai:m")]), "evaluate()", "methods",
         "a mapping of strings to strings, or None"),
    ],
)  # fmt: skip
def test_the_other_entry_points_name_a_wrong_kind_of_argument(call, owner, name, takes):
    with pytest.raises(ArgumentError) as error:
        call()
    _one_line_naming(error, owner, name, takes)


@pytest.mark.parametrize(
    "hint, good, bad",
    [
        (int, [3, __import__("numpy").int64(3)], [True, 3.0, "3"]),
        (float, [1, 1.5], [False, "1.5", None]),
        (str | Path | None, ["a", Path("a"), None], [3, b"a"]),
        (tuple[str, ...], [("a",), ["a", "b"], []], ["ab", ("a", 1)]),
        (tuple[int, int], [(1, 2), [1, 2]], [(1,), (1, 2, 3)]),
    ],
)
def test_what_an_annotation_admits(hint, good, bad):
    assert all(admits(hint, v) for v in good), describe(hint)
    assert not any(admits(hint, v) for v in bad), describe(hint)
