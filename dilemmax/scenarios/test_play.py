"""Language-model focal seats on a scenario set: a planted model's scores are the scores of the
jittable policy that plays its moves, the transcript resumes without a call."""

import argparse
import json

import jax
import jax.numpy as jnp
import pytest

from dilemmax.agents import zoo
from dilemmax.agents.trained import TrainedPolicy
from dilemmax.commandline import run_parsed
from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard.observation import decode
from dilemmax.envs.moral_hazard.policies import by_stage
from dilemmax.envs.rollout import episode_keys, job_keys
from dilemmax.errors import UsageError
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.seats import build_seat
from dilemmax.llm.server import LocalChatServer
from dilemmax.scenarios import cli
from dilemmax.scenarios import evaluate as E
from dilemmax.scenarios import play as P
from dilemmax.scenarios.api import evaluate_scenarios
from dilemmax.scenarios.env import game_reset_keys
from dilemmax.scenarios.registry import SETS


def planted(body) -> str:
    """Keeps the local opportunity with answer B, posts no note, picks D."""
    text = body["messages"][-1]["content"]
    if "(work)" in text or "| WORK" in text:
        return "ACTION LOCAL B"
    if "(note)" in text or "| NOTE" in text:
        return "NO NOTE"
    return "FINAL D"


def local_b_final_d(key, observation):
    """The planted model's moves as a jittable policy."""
    del key
    view = decode(observation.array)
    return by_stage(view, jnp.int32(c.LOCAL_BASE + 1), jnp.int32(c.NO_NOTE),
                    jnp.int32(c.FINAL_BASE + 3))  # fmt: skip


def test_a_set_builds_its_env_once_per_content(monkeypatch):
    """An evaluation builds its set's env; a second evaluation of the same set (its resume, a
    notebook's next run) gets the same env and so its compiled programs, until a scenario's
    hash (its backgrounds' checkpoint digests included) changes."""
    scenarios = SETS["moral_hazard/test"]
    env = scenarios.build()
    assert scenarios.build() is env
    monkeypatch.setattr(type(scenarios.scenarios[0]), "digest", lambda self, zoo=None: "changed")
    assert scenarios.build() is not env


def evaluate(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="dilemmax")
    cli.add_commands(parser.add_subparsers(dest="command", required=True))
    return run_parsed(parser.parse_args(["scenarios", "evaluate", *argv]))


@pytest.mark.slow
def test_scenario_configs_are_the_ones_score_policy_plays(built):
    """Episode e of scenario s starts from the configuration ScenarioEnv samples for its job key
    (job_keys(key, E, S)[s, e]); scenario 1, episode 1 checked against the env's own split."""
    env = built("moral_hazard/test")
    key = jax.random.key(3)
    configs = P.scenario_configs(env, key, 2)
    job = job_keys(key, 2, env.num_scenarios)[1, 1]
    key_config, _ = game_reset_keys(episode_keys(job)[1])
    want = env.game.sample_config(key_config)
    got = jax.tree.map(lambda x: x[1, 1], configs)
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), got, want))
    other = jax.tree.map(lambda x: x[0, 1], configs)
    assert not jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), other, want))


@pytest.mark.slow
def test_planted_model_scores_what_its_policy_scores_and_resumes_without_a_call(tmp_path, built):
    """moral_hazard/test, 2 episodes a scenario. Against the partner who never queries (a
    deterministic script) the game is deterministic given its configuration, and the model plays
    the configurations score_policy plays: the rows are equal. The random partner draws other
    keys, so there only the row's shape is fixed. Resumed, the run asks nothing and writes the
    same rows."""
    out = tmp_path / "run"
    argv = ["--game", "moral_hazard", "--seats", "openai:planted", "--episodes", "2",
            "--references", "none", "--envs", "2", "--no-progress", "--out", str(out)]  # fmt: skip
    with LocalChatServer(planted) as server:
        assert evaluate([*argv, "--base-url", server.base_url]) == 0
        calls = server.answered
        first = json.loads((out / "results.json").read_text())
        assert calls >= 2 * 2 * 2  # a work and a final move per episode, at least
        assert evaluate([*argv, "--base-url", server.base_url, "--resume"]) == 0
        assert server.answered == calls
        # From Python, as a notebook runs it: the same seats, seed and sizes give the CLI's
        # results, and the CLI's transcript resumes from Python without a call (same identity).
        generate = GenerateConfig(base_url=server.base_url)
        again = evaluate_scenarios("moral_hazard", default_seat="openai:planted", episodes=2,
                                   references=False, envs=2, generate=generate, out=out,
                                   resume=True)  # fmt: skip
        assert server.answered == calls and again.to_json()["rows"] == first["rows"]
        fresh = evaluate_scenarios("moral_hazard", "openai:planted", episodes=2,
                                   references=False, envs=2, generate=generate)  # fmt: skip
        assert server.answered == 2 * calls and fresh.out is None
        assert {k: v for k, v in fresh.to_json().items() if k != "calls"} == {
            k: v for k, v in first.items() if k != "calls"
        }
    assert json.loads((out / "results.json").read_text())["rows"] == first["rows"]
    assert (out / "transcript.jsonl").is_file()
    [(seat, stats)] = first["calls"].items()
    assert seat == "openai:planted" and stats["calls"] == calls
    scenarios = SETS["moral_hazard/test"]
    env = built("moral_hazard/test")
    want = E.score_policy(scenarios, local_b_final_d, jax.random.key(0), 2, env)
    got = {r["scenario"]: r for r in first["rows"]}
    never = got["moral_hazard/never_queries"]
    assert never["mean"] == pytest.approx(want[0].mean, abs=1e-6)
    assert never["background"] == pytest.approx(want[0].background, abs=1e-6)
    assert never["digest"] == want[0].digest == scenarios.digests()[want[0].scenario]
    assert got["moral_hazard/random_partner"]["episodes"] == 2


def test_a_zoo_background_is_seated_as_the_run_and_seed_the_zoo_names(tmp_path, monkeypatch):
    run = tmp_path / "consequence" / "ippo"
    run.mkdir(parents=True)
    (run / "config.json").write_text("{}")
    entry = {"run": "consequence/ippo", "seed": 1, "digest": zoo.run_digest(run)}
    (tmp_path / zoo.MANIFEST).write_text(json.dumps({"consequence/ippo_s1": entry}))
    monkeypatch.setenv("DILEMMAX_ZOO", str(tmp_path))
    loaded = []  # what the play seat loads: the zoo's run folder, at the zoo's seed
    monkeypatch.setattr(
        TrainedPolicy, "load", lambda path, seed, greedy, env: loaded.append((path, seed, greedy))
    )
    assert P.seat_spec("zoo:consequence/ippo_s1,greedy") == "zoo:consequence/ippo_s1,greedy"
    build_seat(P.seat_spec("zoo:consequence/ippo_s1,greedy"), None)
    assert loaded == [(run, 1, True)]
    assert P.seat_spec("scripted:all_zero") == "scripted:all_zero"
    with pytest.raises(UsageError, match="not in the zoo"):
        build_seat(P.seat_spec("zoo:consequence/ippo_s7"), None)
    (run / "config.json").write_text('{"changed": 1}')
    with pytest.raises(UsageError, match="do not match"):
        build_seat(P.seat_spec("zoo:consequence/ippo_s1"), None)
