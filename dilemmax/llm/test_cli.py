"""``dilemmax play``: one-line errors for user mistakes, the sweeps, held-out defaults, and
homogeneous / mixed OpenSocialJax arenas against a local server."""

from __future__ import annotations

import json

import pytest

import dilemmax
from dilemmax.cli import main
from dilemmax.llm.api import grid_parts, held_out_options
from dilemmax.llm.server import LocalChatServer

MH = ["play", "moral_hazard", "--no-progress"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (MH + ["--seats", "gpt"], "has no kind"),
        (MH + ["--seats", "bogus:x"], "unknown seat kind"),
        (MH + ["--seats", "scripted:nope"], "no scripted policy 'nope'"),
        (MH + ["--seat", "agent_0=scripted:teacher"], "no seat for agent_1"),
        (MH + ["--seats", "scripted:teacher", "--seat", "agent_9=scripted:teacher"], "agent_9"),
        (MH + ["--seat", "agent_0"], "agent=<kind>:<target>"),
        (MH + ["--seats", "scripted:teacher", "--resume"], "--resume needs"),
        (MH + ["--seats", "scripted:teacher", "--episodes", "0"], ">= 1"),
        (MH + ["--seats", "trained:/no/such/run"], "cannot load trained seat"),
        (MH + ["--seats", "scripted:teacher", "--protocol", "nope=1"], "--protocol"),
        (MH + ["--seats", "openai:m", "--api-key-env", "DILEMMAX_NO_KEY"], "DILEMMAX_NO_KEY"),
        (MH + ["--seats", "hf:/no/such/model"], "no model at"),
        (MH + ["--seats", "scripted:teacher", "--set", "mapping='nope'"], "moral_hazard:"),
        (["play", "open_harvest", "--seats", "scripted:greedy", "--grid"], "no sweep grid"),
        (["play", "chess", "--seats", "scripted:greedy"], "unknown environment 'chess'"),
    ],
)
def test_user_mistakes_exit_2_with_one_line(argv, message, capsys, monkeypatch):
    monkeypatch.delenv("DILEMMAX_NO_KEY", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dilemmax play: error:") and "\n" not in err and message in err


def test_a_refused_model_stops_the_run(tmp_path, capsys):
    with LocalChatServer(lambda body: "x", faults={0: "404"}) as server:
        argv = MH + ["--seats", "openai:missing", "--base-url", server.base_url]
        assert main(argv + ["--out", str(tmp_path / "run")]) == 2
    assert "refused model 'missing'" in capsys.readouterr().err


def test_held_out_split_by_default():
    assert held_out_options("open_harvest", {}) == {"split": "held_out"}
    assert held_out_options("open_cleanup", {"split": "train"}) == {"split": "train"}
    assert held_out_options("moral_hazard", {}) == {}


def test_sweep_grids():
    env = dilemmax.make("moral_hazard")
    parts = grid_parts("moral_hazard", env, {})
    assert [name for name, *_ in parts] == ["n=2", "n=3", "n=4"]
    assert sum(len(names) for *_, names in parts) == 15
    assert [part_env.num_agents for _, part_env, _, _ in parts] == [2, 3, 4]
    [(_, _, configs, names)] = grid_parts("consequence", dilemmax.make("consequence"), {})
    assert configs.rule.shape == (228 * 5,) and len(set(names)) == 5


@pytest.mark.slow
def test_consequence_sweep_is_one_command(tmp_path, capsys):
    out = tmp_path / "grid"
    argv = ["play", "consequence", "--seats", "scripted:fair_share", "--seat",
            "agent_0=scripted:all_zero", "--grid", "--envs", "1140", "--out", str(out),
            "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert len(results["episodes"]) == 228 * 5
    rules = ["AON", "DV", "PP", "RE", "RP"]
    assert sorted(results["summary"]) == [f"rule={r}" for r in rules]
    mean, low, high = results["summary"]["rule=RP"]["return[scripted:all_zero]"]
    assert low <= mean <= high


def harvest_reply(body) -> str:
    return '{"reason": "apples ahead", "action": "move_up"}'


@pytest.mark.slow
def test_open_harvest_homogeneous_team_and_mixed_arena(tmp_path):
    with LocalChatServer(harvest_reply) as server:
        base = ["play", "open_harvest", "--set", "num_agents=2", "--max-steps", "2",
                "--episodes", "2", "--envs", "2", "--base-url", server.base_url,
                "--no-progress"]  # fmt: skip
        team = base + ["--seats", "openai:tiny", "--out", str(tmp_path / "team")]
        assert main(team) == 0
        team_calls = server.answered
        mixed = base + ["--seats", "scripted:greedy", "--seat", "agent_0=openai:tiny",
                        "--rotate", "--out", str(tmp_path / "mixed")]  # fmt: skip
        assert main(mixed) == 0
        mixed_calls = server.answered - team_calls
    assert team_calls == 2 * 2 * 2  # episodes x steps x model seats
    assert mixed_calls == 2 * 2 * 2  # two rotations x episodes x steps x one model seat
    results = json.loads((tmp_path / "mixed" / "results.json").read_text())
    assert {e["group"] for e in results["episodes"]} == {"all"}
    seatings = {tuple(e["seats"].values()) for e in results["episodes"]}
    assert seatings == {("openai:tiny", "scripted:greedy"), ("scripted:greedy", "openai:tiny")}
    assert all(e["truncated"] and e["steps"] == 2 for e in results["episodes"])
    assert "return[openai:tiny]" in results["summary"]["all"]


def fake_trained_run(folder, env_id="moral_hazard"):
    """A run folder as ``dilemmax train`` writes it, holding an untrained actor (one seed)."""
    import jax
    import jax.numpy as jnp
    from flax import serialization

    from dilemmax.agents.networks import NetworkSpec, make_actor

    env = dilemmax.make(env_id)
    spec = NetworkSpec(hidden=8, num_layers=1)
    space = env.observation_space(env.agents[0])
    actor = make_actor(spec, space, env.action_space(env.agents[0]).n, env.num_agents)
    params = actor.init(jax.random.key(0), jnp.zeros(space.shape, space.dtype), jnp.int32(0))
    stacked = jax.tree.map(lambda x: x[None], params)
    config = {"env": env_id, "env_kwargs": {}, "shared_params": True, **spec.to_dict()}
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    checkpoint = {"runner_state": {"params": {"actor": stacked}}}
    (folder / "checkpoints" / "ckpt_1.msgpack").write_bytes(
        serialization.msgpack_serialize(jax.tree.map(jnp.asarray, checkpoint))
    )
    return folder


@pytest.mark.slow
def test_a_trained_seat_beside_a_scripted_one(tmp_path, capsys):
    run = fake_trained_run(tmp_path / "trained")
    argv = MH + ["--seat", f"agent_0=trained:{run},greedy", "--seat",
                 "agent_1=scripted:teacher", "--episodes", "4", "--envs", "4",
                 "--json", str(tmp_path / "r.json")]  # fmt: skip
    assert main(argv) == 0
    results = json.loads((tmp_path / "r.json").read_text())
    assert f"return[trained:{run},greedy]" in results["summary"]["all"]
    assert results["calls"] == {}
    assert main(["play", "consequence", "--seats", f"trained:{run}", "--no-progress"]) == 2
    assert "trained on moral_hazard, not consequence" in capsys.readouterr().err
