"""The dilemmax command: listing, rollouts, and one-line errors (status 2) for user mistakes."""

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from dilemmax.cli import COMMANDS, build_parser, main, parse_assignments
from dilemmax.envs.options import OptionError, OptionSpec


def test_list_names_every_registered_env(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for env_id in ("consequence", "moral_hazard", "open_cleanup", "open_harvest"):
        assert env_id in out


@pytest.mark.slow
def test_rollout_writes_transcript_and_summary(tmp_path, capsys):
    out, summary = tmp_path / "run.jsonl", tmp_path / "summary.json"
    args = ["rollout", "toy", "--episodes", "3", "--seed", "1", "--out", str(out)]
    assert main([*args, "--seat", "agent_1=first_legal", "--json", str(summary)]) == 0
    assert "return" in capsys.readouterr().out
    lines = out.read_text().splitlines()
    assert sum("metrics" in json.loads(line) for line in lines) == 3
    assert json.loads(summary.read_text())["return"][1] == 0.0  # first_legal spends nothing


def _error(capsys, argv) -> str:
    """The one-line error of a command that must fail with status 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_rollout_rejects_unknown_policy_and_seat(capsys):
    assert "choose from" in _error(capsys, ["rollout", "toy", "--policy", "nope"])
    assert "unknown name 'agent_9'" in _error(
        capsys, ["rollout", "toy", "--seat", "agent_9=random"]
    )


def test_rollout_options_are_typed_by_the_env(capsys):
    assert "horizon='2.5'" in _error(capsys, ["rollout", "toy", "--set", "horizon=2.5"])
    assert "unknown name 'colour'" in _error(capsys, ["rollout", "toy", "--set", "colour=1"])
    assert "unknown environment" in _error(capsys, ["rollout", "no_such_game"])


def test_episodes_must_be_positive(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["rollout", "toy", "--episodes", "0"])
    assert exit_.value.code == 2
    assert "positive integer" in capsys.readouterr().err


def test_gif_is_refused_before_playing_where_the_game_has_no_frames(tmp_path, capsys):
    gif = tmp_path / "x.gif"
    err = _error(capsys, ["rollout", "toy", "--gif", str(gif), "--out", str(tmp_path / "t")])
    assert "no frames" in err
    assert not gif.exists() and not (tmp_path / "t").exists()


def test_parse_assignments_is_typed_and_total():
    assert parse_assignments(["n=3", "rule=RP", "w=(1, 5)"]) == {"n": 3, "rule": "RP", "w": (1, 5)}
    specs = {"flag": OptionSpec("bool"), "n": OptionSpec("int", low=1)}
    assert parse_assignments(["flag=false", "n=4"], specs=specs) == {"flag": False, "n": 4}
    for bad in (["oops"], ["=3"], ["n=0"], ["flag=perhaps"], ["other=1"]):
        with pytest.raises(OptionError):
            parse_assignments(bad, specs=specs)


@pytest.mark.slow
def test_long_rollouts_show_a_progress_bar(capsys):
    assert main(["rollout", "toy", "--episodes", "2", "--set", "horizon=250"]) == 0
    captured = capsys.readouterr()
    assert "rollout" in captured.err and "step" in captured.err  # tqdm writes to stderr
    assert main(["rollout", "toy", "--set", "horizon=250", "--no-progress"]) == 0
    assert "step/s" not in capsys.readouterr().err


@pytest.mark.slow
def test_train_a_tiny_run_then_refuse_a_second_fresh_one(tmp_path, capsys):
    out = tmp_path / "run"
    sets = [
        "total_timesteps=32", "num_envs=4", "num_steps=4", "num_minibatches=1",
        "update_epochs=1", "log_every=1", "eval_every=0", "hidden=8", "num_layers=1",
    ]  # fmt: skip
    argv = ["train", "toy", "--out", str(out), "--no-progress"]
    argv += [x for s in sets for x in ("--set", s)]
    assert main(argv) == 0
    assert [p.name for p in out.glob("checkpoints/*")] == ["ckpt_000001.msgpack"]
    from dilemmax.agents.trained import TrainedPolicy

    assert TrainedPolicy.load(out).env_id == "toy"  # reads the checksummed checkpoint
    capsys.readouterr()
    assert "--resume" in _error(capsys, argv)  # the folder holds a run: not overwritten


def _always_last_action(policy):
    """A learner transform that scripts every decision: the last action, whatever the learner."""
    return lambda key, observation: jnp.int32(observation.mask.shape[-1] - 1)


@pytest.mark.slow
def test_a_run_trained_under_a_learner_transform_loads_playing_it(tmp_path):
    """A seat that loads a run plays the policy the run trained as: the learner transform of its
    config wraps the network (here every decision is scripted, so the loaded policy plays the
    last action for every key), and a config naming a transform not allowed is refused."""
    from dilemmax.agents.trained import TrainedPolicy, TrainedRunError
    from dilemmax.agents.transforms import LEARNER_TRANSFORMS, register_learner_transform
    from dilemmax.envs.registry import make
    from dilemmax.envs.rollout import observations_for

    name = "tests.test_cli:_always_last_action"
    register_learner_transform(name, _always_last_action)
    try:
        out = tmp_path / "run"
        sets = ["total_timesteps=32", "num_envs=4", "num_steps=4", "num_minibatches=1",
                "update_epochs=1", "eval_every=0", "hidden=8",
                f"learner_transform={name}"]  # fmt: skip
        assert main(["train", "toy", "--out", str(out), "--no-progress",
                     *[x for s in sets for x in ("--set", s)]]) == 0  # fmt: skip
        env = make("toy")
        obs, state = env.reset(jax.random.key(0))
        policy = TrainedPolicy.load(out, env=env)
        for agent, view in observations_for(env, obs, state).items():
            last = view.mask.shape[-1] - 1
            assert {int(policy(jax.random.key(k), view)) for k in range(8)} == {last}, agent
    finally:
        LEARNER_TRANSFORMS.pop(name)
    with pytest.raises(TrainedRunError, match="not one of the allowed transforms"):
        TrainedPolicy.load(out)


def test_the_command_list_reads_the_same_without_the_command_modules():
    """cli.py shows the other modules' commands from its COMMANDS table: the same lines, in the
    same order, as the parser that imports every module."""
    assert build_parser("list").format_help() == build_parser().format_help()
    assert build_parser("train").format_help() == build_parser().format_help()
    assert [*COMMANDS] == [
        "train",
        "evaluate",
        "play",
        "redteam",
        "finetune",
        "experiment",
        "scenarios",
        "view",
    ]


@pytest.mark.slow
def test_listing_the_commands_imports_no_command_module():
    code = (
        "import sys; from dilemmax.cli import COMMANDS, build_parser; build_parser('list'); "
        "print(sorted({m for m, _ in COMMANDS.values()} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_evaluate_with_scenarios_is_the_scenarios_command_on_the_run(tmp_path):
    """``dilemmax evaluate RUN --scenarios test`` scores a run on its game's scenario set: the
    command line becomes ``scenarios evaluate``, the game read off the run's config.json (a run
    trained on a scenario set names its game in env_kwargs)."""
    from dilemmax.cli import scenarios_alias
    from dilemmax.errors import UsageError

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text('{"env": "open_harvest"}')
    assert scenarios_alias(["evaluate", str(run), "--scenarios", "test", "--episodes", "2"]) == [
        "scenarios", "evaluate", "--run", str(run), "--scenario-set", "test",
        "--game", "open_harvest", "--episodes", "2",
    ]  # fmt: skip
    (run / "config.json").write_text('{"env": "scenarios", "env_kwargs": {"game": "consequence"}}')
    ckpt = run / "checkpoints" / "ckpt_000001.msgpack"
    assert scenarios_alias(["evaluate", str(ckpt), "--scenarios=train"])[-2:] == [
        "--game", "consequence"
    ]  # fmt: skip
    assert scenarios_alias(["evaluate", str(run)]) == ["evaluate", str(run)]
    for argv, message in (
        (["evaluate", "--scenarios", "test"], "give the run folder"),
        (["evaluate", str(tmp_path), "--scenarios", "test"], "no readable run config.json"),
        (["evaluate", str(run), "--scenarios", "test", "--split", "all"], "drop --split"),
    ):
        with pytest.raises(UsageError, match=message):
            scenarios_alias(argv)


@pytest.mark.slow
def test_rollout_seats_a_zoo_population_by_name(capsys):
    """``--seat agent=zoo:<game>/<population>`` plays the shipped population (the querying one
    here, whose warnings are scripted by its learner transform) beside a scripted seat; a name
    not in the zoo is one line naming the known ones."""
    argv = ["rollout", "moral_hazard", "--episodes", "2", "--set", "mapping=uninformative",
            "--seat", "agent_0=zoo:moral_hazard/ippo_followup_s0",
            "--seat", "agent_1=teacher"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "zoo:moral_hazard/ippo_followup_s0" in out and "query_rate" in out
    err = _error(capsys, ["rollout", "moral_hazard", "--seat", "agent_0=zoo:moral_hazard/nope"])
    assert "not in the zoo" in err and "moral_hazard/ippo_s0" in err


def test_play_merge_is_a_subcommand_of_play(capsys):
    """``play merge`` is a subcommand with its own usage and options, while any other first word
    after ``play`` (a versioned env id too) is the game, its options after it or before it."""
    play = build_parser("play")
    args = play.parse_args(["play", "merge", "a", "b", "--out", "m"])
    assert (args.play_command, args.dirs, args.out) == ("merge", ["a", "b"], "m")
    args = play.parse_args(["play", "--episodes", "3", "moral_hazard-v0", "--seats", "teacher"])
    assert (args.env, args.episodes, args.seats, args.play_command) == (
        "moral_hazard-v0", 3, "teacher", None
    )  # fmt: skip
    for argv, message in (
        (["play", "merge", "--out", "m"], "dilemmax play merge: error: the following arguments"),
        (["play", "merge", "a", "--seats", "teacher"], "unrecognized arguments: --seats"),
        (["play", "moral_hazard", "a"], "dilemmax play: error: unrecognized arguments: a"),
    ):
        with pytest.raises(SystemExit):
            play.parse_args(argv)
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        play.parse_args(["play", "merge", "--help"])
    assert capsys.readouterr().out.startswith("usage: dilemmax play merge [-h] [--out OUT]")
    with pytest.raises(SystemExit):
        play.parse_args(["play", "--help"])
    out = capsys.readouterr().out
    assert "dilemmax play merge SHARD_DIR..." in out and "--seats SEATS" in out
