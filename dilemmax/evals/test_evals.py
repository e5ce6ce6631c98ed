"""The games as Inspect tasks: the registry, runs with Inspect's mock model and its
OpenAI-compatible provider against the local test server, scores equal to ``dilemmax play``'s
metrics for the same planted replies and seed, model roles per seat, and the written log."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import inspect
import json
import math
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path

import jax
import numpy as np
import pytest

from dilemmax.cli import main
from dilemmax.commandline import add_config_arguments
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.option_declaration import setting
from dilemmax.errors import UsageError
from dilemmax.evals import plans
from dilemmax.experiments.design import Design, DesignParams, Part, Plan, Report
from dilemmax.llm.client import ChatRequest, ScriptedClient
from dilemmax.llm.play import BatchedPlay, Seat
from dilemmax.llm.policy import LLMPolicy
from dilemmax.llm.server import LocalChatServer
from dilemmax.llm.test_play import RecordingProtocol, reply_for

ROOT = Path(__file__).resolve().parents[2]
# Inspect (the optional inspect extra, installed with dev) and this package's modules built on it
# are imported where a test uses them, not when the suite is collected
# (tests/test_collection_imports.py): only dilemmax.evals.plans imports no Inspect.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("inspect_ai") is None, reason="needs the inspect extra (inspect_ai)"
)


def moral_hazard_reply(model: str, text: str) -> str:
    """Model ``a`` answers locally, model ``b`` queries; both write a note naming case 2 and a
    final D."""
    if "(work)" in text:
        return "ACTION QUERY" if model.endswith("b") else "ACTION LOCAL B"
    if "(note)" in text:
        return "NOTE CASE 2 UNSAFE C"
    return "FINAL D"


def consequence_reply(text: str) -> str:
    """A contribution that depends on what the prompt shows (so episodes differ)."""
    return f"I give what I can.\nCONTRIBUTE {len(text) % 5}"


def mock(name: str, reply) -> object:
    """Inspect's mock model answering ``reply(name, last message)``; usage is set, so the mock
    counts no tokens (its tokenizer would be downloaded)."""
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    def outputs(messages, tools, tool_choice, config):
        output = ModelOutput.from_content(f"mockllm/{name}", reply(name, messages[-1].text))
        output.usage = ModelUsage(input_tokens=7, output_tokens=3, total_tokens=10)
        return output

    return get_model(f"mockllm/{name}", custom_outputs=outputs, memoize=False)


def play_json(tmp_path, name: str, argv: list[str]) -> dict:
    path = tmp_path / f"{name}.json"
    assert main(["play", *argv, "--no-progress", "--json", str(path)]) == 0
    return json.loads(path.read_text())


def play_values(episode: dict, metric_axes) -> dict[str, float]:
    """The score keys of one ``dilemmax play`` episode (the game's metrics only)."""
    from dilemmax.evals.scoring import score_values

    record = {"metrics": episode["metrics"], "steps": episode["steps"],
              "metric_axes": metric_axes, "agents": list(episode["seats"])}  # fmt: skip
    values = score_values(record)
    return {k: v for k, v in values.items() if not k.startswith("model_")}


def assert_same_scores(samples, episodes, metric_axes=MoralHazardEnv.metric_axes) -> None:
    by_id = {e["id"]: e for e in episodes}
    assert sorted(s.id for s in samples) == sorted(by_id)
    for sample in samples:
        score = sample.scores["episode_metrics"].value
        for key, value in play_values(by_id[sample.id], metric_axes).items():
            assert (math.isnan(value) and math.isnan(score[key])) or score[key] == pytest.approx(
                value, abs=1e-6
            ), (sample.id, key)


# --------------------------------------------------------------------------- registry
def test_the_registry_lists_every_task():
    from inspect_ai._util.registry import registry_lookup

    from dilemmax.evals._registry import REQUIRED, TASKS

    (point,) = [p for p in entry_points(group="inspect_ai") if p.name == "dilemmax"]
    assert point.value == "dilemmax.evals._registry"
    expected = {*plans.games()} | {n.replace("/", "_") for n in plans.designs()}
    assert set(TASKS) == expected and set(REQUIRED) <= expected
    common = {"seed", "max_steps", "seats", "protocol", "output_mode"}
    for name in expected:
        registered = registry_lookup("task", f"dilemmax/{name}")
        assert registered is not None, name
        assert common <= set(inspect.signature(registered).parameters), name


def test_a_design_s_options_and_its_task_parameters_are_one_declaration():
    """Every design's ``dilemmax experiment`` options and its Inspect task's parameters are
    generated from its ``Design.params`` fields: the same names and the same defaults."""
    from inspect_ai._util.registry import registry_lookup

    from dilemmax.evals._registry import RUN_DEFAULTS

    for name, design in plans.designs().items():
        fields = {f.name: f.default for f in dataclasses.fields(design.params)}
        assert fields, name
        parser = argparse.ArgumentParser()
        add_config_arguments(parser, design.params)
        options = vars(parser.parse_args([]))
        listed = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
        assert listed == fields, name
        task = inspect.signature(registry_lookup("task", f"dilemmax/{plans.task_name(name)}"))
        own = {n: p.default for n, p in task.parameters.items() if n in fields}
        assert own == fields, name
        assert set(task.parameters) == {*fields, *RUN_DEFAULTS, "output_mode"}, name


def test_scores_name_each_entry_by_the_axes_the_game_declares():
    """Three trials and two agents: each trial's Gini under its trial, each agent's return under
    its agent; a per-trial-and-agent table gives its mean. (They were ``gini[0]`` and
    ``return[0]``, one index for either axis.)"""
    from dilemmax.evals.scoring import score_values

    record = {
        "metrics": {"gini": [0.6, 0.8, 0.0], "return": [3.0, 1.0], "length": 6,
                    "recipes_known": [[1, 0], [2, 1], [2, 2]]},
        "metric_axes": {"gini": ["trial"], "return": ["agent"], "length": [],
                        "recipes_known": ["trial", "agent"]},
        "agents": ["agent_0", "agent_1"],
        "steps": 6,
    }  # fmt: skip
    values = score_values(record)
    assert math.isnan(values.pop("model_valid_replies"))  # no model seat
    assert values == pytest.approx({
        "gini": 1.4 / 3, "gini[trial_1]": 0.6, "gini[trial_2]": 0.8, "gini[trial_3]": 0.0,
        "return": 2.0, "return[agent_0]": 3.0, "return[agent_1]": 1.0,
        "length": 6.0, "recipes_known": 8 / 6, "steps": 6.0, "model_calls": 0.0,
    })  # fmt: skip
    with pytest.raises(UsageError, match="'recipes_known' is declared per trial and agent"):
        score_values({**record, "metrics": {"recipes_known": [1, 2]}})


# --------------------------------------------------------------------------- mock model
@pytest.mark.slow
def test_mockllm_run_scores_like_play_with_a_second_model_on_seat_1(tmp_path):
    from inspect_ai import eval as inspect_eval
    from inspect_ai.log import list_eval_logs, read_eval_log

    from dilemmax.evals._registry import TASKS

    with LocalChatServer(
        lambda body: moral_hazard_reply(body["model"], body["messages"][-1]["content"])
    ) as server:
        played = play_json(tmp_path, "mh", [
            "moral_hazard", "--seat", "agent_0=openai:a", "--seat", "agent_1=openai:b",
            "--episodes", "2", "--seed", "3", "--rotate", "--base-url", server.base_url,
        ])  # fmt: skip
    (log,) = inspect_eval(
        TASKS["moral_hazard"](episodes=2, seed=3, rotate=True),
        model=mock("a", moral_hazard_reply),
        model_roles={"seat_1": mock("b", moral_hazard_reply)},
        log_dir=str(tmp_path / "logs"),
        display="none",
    )
    assert log.status == "success", log.error
    assert_same_scores(log.samples, played["episodes"])
    # Model b (role seat_1) always queries, model a never does: recovered per agent, and the
    # roles move round the agents with the rotation.
    for sample in log.samples:
        score = sample.scores["episode_metrics"].value
        seats = sample.metadata["seats"]
        for agent in ["agent_0", "agent_1"]:
            assert score[f"query_by_agent[{agent}]"] == float(seats[agent] == "seat_1")
        assert sample.metadata["seed"] == 3
    assert (
        sorted(s.metadata["seats"]["agent_0"] for s in log.samples)
        == ["seat_0"] * 2 + ["seat_1"] * 2
    )

    # The written log: one sample per episode, its scores, the turns as messages.
    (info,) = list_eval_logs(str(tmp_path / "logs"))
    read = read_eval_log(info.name)
    assert len(read.samples) == 4
    assert_same_scores(read.samples, played["episodes"])
    first = read.samples[0]
    roles = [m.role for m in first.messages]
    assert roles[:3] == ["system", "user", "assistant"]
    replies = [m for m in first.messages if m.role == "assistant"]
    assert len(replies) == first.scores["episode_metrics"].value["model_calls"]
    work = replies[0]
    assert work.metadata["step"] == 0 and work.metadata["agent"] == "agent_0"
    assert work.text == "ACTION LOCAL B" and work.metadata["valid"]
    metrics = {s.name: s.metrics for s in read.results.scores}
    assert {"mean", "stderr"} <= set(metrics["team_success"])
    team = [s.scores["episode_metrics"].value["team_success"] for s in read.samples]
    assert metrics["team_success"]["mean"].value == pytest.approx(np.mean(team))


# --------------------------------------------------------------------------- protocol hooks
class ReflectingGame(MoralHazardEnv):
    """The moral-hazard game with test_play's protocol: NoReply at the note stage for a
    non-querier, a reflect question after the work step, replies logged in memory."""

    def text_protocol(self, **options):
        return RecordingProtocol(self)


@pytest.mark.slow
def test_noreply_and_reflect_prompts_as_in_batched_play(tmp_path):
    from inspect_ai import eval as inspect_eval

    from dilemmax.evals.tasks import plan_task

    env = ReflectingGame()
    client = ScriptedClient(reply_for)
    model = LLMPolicy(client, "model")
    expected = BatchedPlay(env, [Seat("m", model), Seat("m", model)], num_envs=2).run(
        jax.random.key(0), 3
    )
    plan = Plan([Part("main", env, episodes=3)])
    (log,) = inspect_eval(
        plan_task(plan, "reflecting"),
        model=mock(
            "m", lambda name, text: reply_for(ChatRequest(({"role": "user", "content": text},)))
        ),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success", log.error
    episodes = [
        {**info, "metrics": {k: v[i].tolist() for k, v in expected.metrics.items()}}
        for i, info in enumerate(expected.episodes)
    ]
    assert_same_scores(log.samples, episodes, env.metric_axes)
    replies = [m for s in log.samples for m in s.messages if m.role == "assistant"]
    assert len(replies) == len(client.calls)  # the same calls: NoReply seats are not asked
    kinds = [m.metadata["kind"] for m in replies]
    assert kinds.count("reflect") == 2 * 3  # one per agent per episode, after the work step
    lessons = [m for m in replies if m.metadata["kind"] == "reflect"]
    assert all(m.text.startswith("LESSON") and m.metadata["valid"] for m in lessons)


# --------------------------------------------------------------------------- OpenAI provider
@pytest.mark.slow
def test_inspect_eval_command_with_the_openai_compatible_provider_scores_like_play(
    tmp_path, monkeypatch
):
    """``inspect eval dilemmax/consequence`` (the entry point, Inspect's command line and its
    OpenAI-compatible provider) against the local server, beside ``dilemmax play``. The command
    line is Inspect's click group, called in this process: its console script only wraps it
    (with an exception hook and a .env reader), and the game's programs are play's, compiled
    once."""
    from inspect_ai._cli.main import inspect as inspect_command
    from inspect_ai.log import list_eval_logs, read_eval_log

    monkeypatch.setenv("LOCAL_API_KEY", "test")
    with LocalChatServer(lambda body: consequence_reply(body["messages"][-1]["content"])) as srv:
        played = play_json(tmp_path, "ca", [
            "consequence", "--seats", "openai:tiny", "--episodes", "2", "--base-url", srv.base_url,
        ])  # fmt: skip
        served = srv.answered
        command = [
            "eval", "dilemmax/consequence", "--model", "openai-api/local/tiny",
            "--model-base-url", srv.base_url, "-T", "episodes=2",
            "--log-dir", str(tmp_path / "logs"), "--display", "none",
        ]  # fmt: skip
        inspect_command.main(command, standalone_mode=False, auto_envvar_prefix="INSPECT")
        assert srv.answered == 2 * served  # every call went over HTTP, as many as play made
    (info,) = list_eval_logs(str(tmp_path / "logs"))
    log = read_eval_log(info.name)
    assert log.status == "success" and log.eval.task == "dilemmax/consequence"
    assert_same_scores(log.samples, played["episodes"], played["metric_axes"])
    assert all("fatality" in s.scores["episode_metrics"].value for s in log.samples)


# --------------------------------------------------------------------------- designs
@dataclass(frozen=True)
class ToyParams(DesignParams):
    episodes: int | None = setting(None, "episodes")
    partner: str = setting("teacher", "the partner's scripted policy")
    quick: bool = setting(False, "a switch")
    names: tuple[str, ...] | None = setting(None, "repeatable", append=True)
    costs: str | None = setting(None, "comma-separated", list=True)


def _toy_design() -> Design:
    def plan(params, run) -> Plan:
        env = plans.game_plan("moral_hazard").parts[0].env
        seats = {"agent_1": f"scripted:{params.partner}"}
        return Plan([Part("cell", env, seats=seats, episodes=params.episodes or 5)])

    return Design("moral_hazard/toy", "test", "a toy", ToyParams, plan, lambda *a: Report({}))


def test_design_parameters_shrink_a_design_and_bad_ones_are_named():
    from dilemmax.evals._registry import TASKS
    from dilemmax.evals.tasks import plan_task

    design = _toy_design()
    plan, args, run = plans.design_plan(design, {"episodes": 2, "partner": "always_local"})
    assert run.seed == 0 and plan.parts[0].episodes == 2 and not args.quick
    _, args, run = plans.design_plan(
        design, {"quick": True, "names": ["a", "b"], "costs": [0.1, 0.2], "seed": 4}
    )
    assert args.quick and args.names == ("a", "b") and args.costs == "0.1,0.2" and run.seed == 4
    task = plan_task(plan, "toy", seed=1)
    assert [s.id for s in task.dataset] == ["cell|e0", "cell|e1"]
    assert task.dataset[0].metadata["seats"] == {
        "agent_0": "seat_0",
        "agent_1": "scripted:always_local",
    }
    with pytest.raises(UsageError, match="no parameter 'cells'"):
        plans.design_plan(design, {"cells": 3})
    with pytest.raises(UsageError, match="episodes"):
        plans.design_plan(design, {"episodes": "many"})
    with pytest.raises(UsageError, match="--model-role seat_1="):
        plan_task(plan, "toy", seats="agent_0=scripted:teacher agent_1=openai:m")
    with pytest.raises(UsageError, match="seed=-1"):
        plan_task(plan, "toy", seed=-1)
    with pytest.raises(UsageError, match="max_steps='many'"):
        plan_task(plan, "toy", max_steps="many")
    with pytest.raises(UsageError, match="output_mode"):
        plan_task(plan, "toy", output_mode="yaml")
    with pytest.raises(UsageError, match="episodes"):
        TASKS["moral_hazard"](episodes=0)
    with pytest.raises(UsageError, match="unknown agent"):
        plan_task(plan, "toy", seats={"agent_9": "scripted:teacher"})
    with pytest.raises(UsageError, match="scripted policy 'nobody'"):
        plan_task(plans.design_plan(design, {"partner": "nobody"})[0], "toy")


@pytest.mark.slow
def test_a_design_task_plays_the_episodes_of_dilemmax_experiment(tmp_path):
    from inspect_ai import eval as inspect_eval

    from dilemmax.evals._registry import TASKS

    sizes = {"costs": "0.1", "shares": "0.5", "replicates": 1, "episodes": 3, "no_probes": True}
    with LocalChatServer(
        lambda body: moral_hazard_reply(body["model"], body["messages"][-1]["content"])
    ) as server:
        assert main([
            "experiment", "moral_hazard/isolation", "--seats", "openai:a", "--costs", "0.1",
            "--shares", "0.5", "--replicates", "1", "--episodes", "3", "--no-probes",
            "--base-url", server.base_url, "--out", str(tmp_path / "run"), "--no-progress",
        ]) == 0  # fmt: skip
    lines = (tmp_path / "run" / "transcript.jsonl").read_text().splitlines()
    episodes = [row for row in map(json.loads, lines) if row.get("type") == "episode"]
    (log,) = inspect_eval(
        TASKS["moral_hazard_isolation"](**sizes),
        model=mock("a", moral_hazard_reply),
        log_dir=str(tmp_path / "logs"),
        display="none",
    )
    assert log.status == "success", log.error
    assert len(log.samples) == len(episodes) >= 3
    assert_same_scores(log.samples, episodes)
    for sample in log.samples:
        assert sample.metadata["seats"]["agent_1"] == "scripted:isolation_partner"
        assert sample.metadata["config_name"]
        assert sample.metadata["config"]["cost"] == pytest.approx(0.1)
        agents = {m.metadata["agent"] for m in sample.messages if m.role == "assistant"}
        assert agents == {"agent_0"}  # the partner plays inside JAX: no model calls


@pytest.mark.slow
def test_import_dilemmax_imports_no_inspect():
    code = "import sys, dilemmax; print('inspect_ai' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
