"""``dilemmax scenarios``: the listing, an evaluation end to end, and refusals before any work."""

import argparse
import json

import jax
import pytest

from dilemmax.commandline import run_parsed
from dilemmax.envs.policies import policies_for
from dilemmax.scenarios import cli
from dilemmax.scenarios import evaluate as E
from dilemmax.scenarios.registry import SETS


def scenarios(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="dilemmax")
    cli.add_commands(parser.add_subparsers(dest="command", required=True))
    return run_parsed(parser.parse_args(["scenarios", *argv]))


def test_list_names_every_scenario_with_its_seats_and_digest(tmp_path, capsys):
    assert scenarios(["list", "--game", "consequence", "--json", str(tmp_path / "l.json")]) == 0
    listing = json.loads((tmp_path / "l.json").read_text())
    assert [e["set"] for e in listing] == ["consequence/train", "consequence/test"]
    for entry in listing:
        digests = SETS[entry["set"]].digests()
        for row in entry["scenarios"]:
            assert row["digest"] == digests[row["scenario"]]
            assert row["focal"] == ["agent_0"]
            assert sorted(row["background"]) == ["agent_1", "agent_2"]
    out = capsys.readouterr().out
    assert "consequence/rp_exploiters  [" in out and "agent_1=scripted:starve_then_cover" in out


@pytest.mark.slow
def test_evaluate_a_scripted_population_writes_table_plot_and_digests(tmp_path, built, monkeypatch):
    """The rows are score_policy's for the same seed, each with its scenario's digest. With an
    empty zoo (the train set's backgrounds are all scripted) the references are random focal
    agents alone (no normalised score: best = random).
    """
    (tmp_path / "empty_zoo").mkdir()
    (tmp_path / "empty_zoo" / "manifest.json").write_text("{}")
    monkeypatch.setenv("DILEMMAX_ZOO", str(tmp_path / "empty_zoo"))  # one reference compile only
    out = tmp_path / "eval"
    argv = ["evaluate", "--game", "moral_hazard", "--scenario-set", "train", "--scripted",
            "teacher", "--episodes", "2", "--seed", "4", "--out", str(out)]  # fmt: skip
    assert scenarios(argv) == 0
    results = json.loads((out / "results.json").read_text())
    digests = SETS["moral_hazard/train"].digests()
    assert results["set"] == "moral_hazard/train" and results["focal"] == "scripted:teacher"
    assert {r["scenario"]: r["digest"] for r in results["rows"]} == digests
    assert set(results["references"]) == set(digests)
    env = built("moral_hazard/train")
    teacher = policies_for(env.game)["teacher"]
    want = E.score_policy(SETS["moral_hazard/train"], teacher, jax.random.key(4), 2, env)
    for row, expected in zip(results["rows"], want, strict=True):
        assert row["mean"] == pytest.approx(expected.mean, abs=1e-6)
        assert row["random"] == results["references"][row["scenario"]]["random"]
        assert row["best_population"] == "random" and row["normalised"] is None
    table = (out / "summary.md").read_text()
    assert all(d in table for d in digests.values()) and table.count("\n| moral_hazard/") == 2
    assert (out / "summary.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_zoo_references_score_each_population_of_the_game(tmp_path, monkeypatch):
    """With a zoo of one population of the game (and one of another game, left out), each
    scenario's reference is the better of random focal agents and that population, by the scores
    score_policy gives each for the same seed; the focal row is normalised between them."""
    from dilemmax.agents import zoo

    shipped = zoo.root()
    own = tmp_path / "zoo"
    names = ("moral_hazard/ippo_s0", "consequence/ippo_s0")
    entries = {name: zoo.manifest()[name] for name in names}
    for entry in entries.values():
        (own / entry["run"]).parent.mkdir(parents=True, exist_ok=True)
        (own / entry["run"]).symlink_to(shipped / entry["run"], target_is_directory=True)
    (own / "manifest.json").write_text(json.dumps(entries))
    monkeypatch.setenv("DILEMMAX_ZOO", str(own))
    out = tmp_path / "eval"
    argv = ["evaluate", "--game", "moral_hazard", "--scenario-set", "train", "--focal",
            "teacher", "--episodes", "2", "--seed", "4", "--out", str(out)]  # fmt: skip
    assert scenarios(argv) == 0
    results = json.loads((out / "results.json").read_text())
    scenario_set, key = SETS["moral_hazard/train"], jax.random.key(4)
    population = zoo.load("moral_hazard/ippo_s0")
    mine = {r.scenario: r.mean for r in E.score_policy(scenario_set, population, key, 2)}
    rows = {row["scenario"]: row for row in results["rows"]}
    assert set(rows) == set(mine)
    for name, reference in results["references"].items():
        means = {"random": reference["random"], "zoo:moral_hazard/ippo_s0": mine[name]}
        best = max(means, key=means.get)
        assert reference["best_population"] == best
        assert reference["best"] == pytest.approx(means[best], abs=1e-6)
        assert rows[name]["normalised"] == pytest.approx(
            E.normalised(rows[name]["mean"], reference["random"], means[best])
        )


BAD = [
    (["evaluate", "--game", "moral_hazard"], "name one focal population"),
    (["evaluate", "--game", "moral_hazard", "--scripted", "teacher", "--zoo", "x/y"],
     "--zoo, --scripted"),
    (["evaluate", "--game", "chess", "--scripted", "teacher"], "--game 'chess'"),
    (["evaluate", "--game", "moral_hazard", "--scripted", "nope"], "--scripted 'nope'"),
    (["evaluate", "--game", "moral_hazard", "--run", "/no/such/run"], "no such run folder"),
    (["evaluate", "--game", "moral_hazard", "--run", ".,seed=x"], "DIR[,seed=<k>]"),
    (["evaluate", "--game", "moral_hazard", "--zoo", "../../etc"], "not in the zoo"),
    (["evaluate", "--game", "moral_hazard", "--seat", "agent_1=scripted:teacher"],
     "background seat(s) ['agent_1']"),
    (["evaluate", "--game", "moral_hazard", "--seat", "agent_9=scripted:teacher"],
     "unknown agent(s)"),
    (["evaluate", "--game", "moral_hazard", "--seats", "scripted:nope"], "no scripted policy"),
    (["evaluate", "--game", "moral_hazard", "--seats", "openai:m,colour=red"], "not known"),
    (["evaluate", "--game", "moral_hazard", "--scripted", "teacher", "--resume"],
     "--resume is for"),
    (["evaluate", "--game", "moral_hazard", "--scripted", "teacher", "--max-steps", "0"],
     "--max-steps"),
    (["evaluate", "--game", "moral_hazard", "--seats", "scripted:teacher", "--envs", "0"],
     "--envs"),
    (["evaluate", "--game", "moral_hazard", "--seats", "scripted:teacher", "--resume"],
     "holds no transcript"),
    (["list", "--game", "chess"], "no scenario sets"),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("argv,message", BAD)
def test_bad_input_is_one_line_and_status_2_before_any_work(argv, message, capsys, tmp_path):
    out = ["--out", str(tmp_path / "o")] if argv[0] == "evaluate" else []
    assert scenarios([*argv, *out]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dilemmax scenarios: error:") and "\n" not in err and message in err
    assert not (tmp_path / "o").exists()


def _evaluate_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dilemmax")
    cli.add_commands(parser.add_subparsers(dest="command", required=True))
    scenarios_parser = parser._subparsers._group_actions[0].choices["scenarios"]
    return scenarios_parser._subparsers._group_actions[0].choices["evaluate"]


def test_the_session_flags_are_declared_once_with_play_and_experiment():
    """--seat, --seats, the model flags, --protocol, --envs, --seed, --max-steps,
    --on-call-error, --out, --resume and --no-progress are llm.cli.add_session_arguments' (play's
    and experiment's): the same names, defaults, choices and help (but --out's), no --shard; and
    the same command line gives the same SessionOptions."""
    from dilemmax.llm.cli import add_session_arguments, session_options

    session = argparse.ArgumentParser()
    add_session_arguments(session, shard=False)
    evaluate = _evaluate_parser()
    theirs = {tuple(a.option_strings): a for a in evaluate._actions}
    described = ("dest", "default", "choices", "type", "nargs", "const")
    for action in session._actions[1:]:  # past -h
        ours = theirs[tuple(action.option_strings)]
        assert [getattr(ours, k) for k in described] == [getattr(action, k) for k in described]
        assert action.dest == "out" or ours.help == action.help, action.dest
    assert ("--shard",) not in theirs
    argv = ["--seats", "openai:m", "--temperature", "0.5", "--envs", "3", "--seed", "7",
            "--on-call-error", "invalid", "--no-progress", "--protocol", "reveal=true"]  # fmt: skip
    given = evaluate.parse_args(["--game", "moral_hazard", *argv])
    assert session_options(given) == session_options(session.parse_args(argv))


def test_out_in_the_way_is_refused(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    argv = ["evaluate", "--game", "moral_hazard", "--scripted", "teacher", "--out"]
    assert scenarios([*argv, str(tmp_path / "file")]) == 2
    assert "is a file" in capsys.readouterr().err


@pytest.mark.slow
def test_a_run_trained_on_the_train_set_sits_in_the_test_set_and_nowhere_else(tmp_path, built):
    """``dilemmax train scenarios`` (moral_hazard's train set, one tiny update) gives a run that
    TrainedPolicy.load checks against the test set's env itself and plays there; a consequence
    scenario env is refused by name."""
    from dilemmax.agents.trained import TrainedPolicy, TrainedRunError
    from dilemmax.cli import main

    run = tmp_path / "run"
    sets = ["env_kwargs.game=moral_hazard", "env_kwargs.scenario_set=train", "total_timesteps=64",
            "num_envs=4", "num_steps=16", "num_minibatches=1", "update_epochs=1",
            "eval_every=0", "hidden=8", "agent_id=False"]  # fmt: skip
    argv = ["train", "scenarios", "--out", str(run), "--no-progress"]
    assert main([*argv, *[x for s in sets for x in ("--set", s)]]) == 0
    test_env = built("moral_hazard/test")
    policy = TrainedPolicy.load(run, env=test_env)
    assert policy.env_id == "scenarios"
    scores = E.score_policy(SETS["moral_hazard/test"], policy, jax.random.key(0), 1, test_env)
    assert len(scores) == test_env.num_scenarios
    with pytest.raises(TrainedRunError, match="cannot play this game"):
        TrainedPolicy.load(run, env=built("consequence/test"))


@pytest.mark.slow
def test_the_old_set_spelling_of_the_scenario_set_still_works(tmp_path, capsys, monkeypatch):
    """``--set train|test`` (``--set`` means key=value options everywhere else) still chooses the
    scenario set, with one deprecation line naming ``--scenario-set``."""
    from dilemmax import errors

    monkeypatch.setattr(errors, "_SAID", set())  # said once per process: this test sees it
    out = tmp_path / "eval"
    argv = ["evaluate", "--game", "moral_hazard", "--set", "train", "--scripted", "teacher",
            "--episodes", "2", "--references", "none", "--out", str(out)]  # fmt: skip
    assert scenarios(argv) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "--set" in line]
    assert err == ["dilemmax: deprecated: scenarios evaluate --set train|test is now "
                   "--scenario-set train|test"]  # fmt: skip
    assert json.loads((out / "results.json").read_text())["set"] == "moral_hazard/train"
