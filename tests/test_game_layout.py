"""Every game folder has one layout, and renamed names keep working where a user would break.

A game folder is any ``dilemmax/envs/<game>/`` with an ``env.py``, so a fifth game is held to the
same layout as the four: the same module names, the class names ``<Game>Env``, ``<Game>Config``,
``<Game>State`` and ``<Game>Text`` (``<Game>`` the CamelCase of the folder name), one scripted
table ``policies.SCRIPTED_POLICIES`` and the same five ``__init__`` exports. The old spellings of
renamed options and flags still work, each with one deprecation line on stderr.
"""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path

import jax
import pytest

import dilemmax
import dilemmax.envs
from dilemmax import errors
from dilemmax.commandline import build_env
from dilemmax.envs.options import parse_env_options
from dilemmax.envs.registry import registered_envs
from dilemmax.train.config import TrainConfig
from dilemmax.train.configure import make_config

ENVS = Path(dilemmax.envs.__file__).parent
GAMES = sorted(p.parent.name for p in ENVS.glob("*/env.py"))
# The modules every game folder has; a game may add its own (dynamics.py, ledger.py, ...).
MODULES = {
    "__init__", "constants", "declaration", "env", "generator", "metrics", "policies",
    "rendering", "text", "types",
}  # fmt: skip


def camel(game: str) -> str:
    return "".join(part.capitalize() for part in game.split("_"))


def test_the_game_folders_are_registered_games():
    """Every folder with an env.py is a registered game (so the tests below hold it)."""
    assert {"consequence", "moral_hazard", "open_cleanup", "open_harvest"} <= set(GAMES)
    assert set(GAMES) <= set(registered_envs())


@pytest.mark.parametrize("game", GAMES)
def test_every_game_folder_has_the_same_modules(game):
    modules = {p.stem for p in (ENVS / game).glob("*.py") if not p.stem.startswith("test_")}
    assert modules >= MODULES, f"{game} lacks {sorted(MODULES - modules)}"
    assert not {"outcomes", "render"} & modules  # the names metrics.py and rendering.py replaced


@pytest.mark.parametrize("game", GAMES)
def test_every_game_module_has_the_same_entry_point(game):
    """metrics.py's ``episode_metrics`` is what env.episode_metrics returns, rendering.py's
    ``render_ansi`` what env.render(state, "ansi") prints."""
    metrics = importlib.import_module(f"dilemmax.envs.{game}.metrics")
    rendering = importlib.import_module(f"dilemmax.envs.{game}.rendering")
    assert callable(metrics.episode_metrics) and callable(rendering.render_ansi)


@pytest.mark.parametrize("game", GAMES)
def test_every_game_has_the_same_class_names_table_and_exports(game):
    name = camel(game)
    package = importlib.import_module(f"dilemmax.envs.{game}")
    assert sorted(package.__all__) == sorted(
        ["SCRIPTED_POLICIES", f"{name}Config", f"{name}Env", f"{name}State", f"{name}Text"]
    )
    env_module = importlib.import_module(f"dilemmax.envs.{game}.env")
    types = importlib.import_module(f"dilemmax.envs.{game}.types")
    text = importlib.import_module(f"dilemmax.envs.{game}.text")
    policies = importlib.import_module(f"dilemmax.envs.{game}.policies")
    assert getattr(package, f"{name}Env") is getattr(env_module, f"{name}Env")
    assert getattr(package, f"{name}Config") is getattr(types, f"{name}Config")
    assert getattr(package, f"{name}State") is getattr(types, f"{name}State")
    assert getattr(package, f"{name}Text") is getattr(text, f"{name}Text")
    assert package.SCRIPTED_POLICIES is policies.SCRIPTED_POLICIES
    env = dilemmax.make(game, **SMALL.get(game, {}))
    assert type(env) is getattr(env_module, f"{name}Env")
    assert env.scripted_policies() == policies.SCRIPTED_POLICIES
    assert type(env.text_protocol()) is getattr(text, f"{name}Text")


# Small pools, so that building a grid game costs little.
SMALL = {
    "open_cleanup": {"num_layouts": 4, "num_rules": 4},
    "open_harvest": {"num_layouts": 4, "num_rules": 4},
}


@pytest.mark.parametrize("game", GAMES)
def test_option_names_mean_one_thing(game):
    """Pool sizes are num_layouts / num_rules in every game; no option is called plain
    ``reward`` (consequence's is ``objective``, moral_hazard's ``payoff``)."""
    options = set(dilemmax.envs.options.env_option_specs(game))
    assert not {o for o in options if o.endswith("_pool_size")}
    assert "reward" not in options


@pytest.fixture
def fresh_deprecations(monkeypatch):
    """Each deprecation is said once per process; a test sees its own line."""
    monkeypatch.setattr(errors, "_SAID", set())


def one_deprecation(capsys, *words: str) -> None:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dilemmax: deprecated:"), lines
    assert all(w in lines[0] for w in words), lines[0]


OLD_OPTIONS = [
    ("consequence", {"reward": "survival"}, {"objective": "survival"}),
    ("moral_hazard", {"reward": "private"}, {"payoff": "private"}),
    ("open_cleanup", {"layout_pool_size": 4}, {"num_layouts": 4}),
    ("open_cleanup", {"rule_pool_size": 4}, {"num_rules": 4}),
]


@pytest.mark.parametrize("game,old,new", OLD_OPTIONS)
def test_an_old_option_name_still_makes_the_env(game, old, new, capsys, fresh_deprecations):
    small = {k: v for k, v in SMALL.get(game, {}).items() if k not in new}
    env = dilemmax.make(game, **small, **old)
    one_deprecation(capsys, repr(next(iter(old))), repr(next(iter(new))))
    assert env.made_as["options"] == {**small, **new}  # records, and replays, the name now
    same = dilemmax.make(game, **small, **new)
    assert capsys.readouterr().err == ""
    if game == "consequence":
        assert env.objective == same.objective == "survival"
    if game == "moral_hazard":
        assert bool(env.default_config.private_reward) and bool(same.default_config.private_reward)
    if game == "open_cleanup":
        same_pools = jax.tree.map(
            lambda a, b: a.shape == b.shape and bool((a == b).all()),
            (env.layout_pool, env.rule_pool),
            (same.layout_pool, same.rule_pool),
        )
        assert all(jax.tree.leaves(same_pools))


def test_an_old_option_name_with_its_new_name_is_refused():
    with pytest.raises(ValueError, match="'reward' is the old name of 'objective'"):
        dilemmax.make("consequence", reward="survival", objective="resources")


def test_set_with_an_old_option_name(capsys, fresh_deprecations):
    """A user's ``--set reward=private`` (any command's env options) and a training
    ``--set env_kwargs.reward=...`` are typed as the option now and work."""
    env = build_env("moral_hazard", ["reward=private"])
    one_deprecation(capsys, "'reward' is now 'payoff'")
    assert env.made_as["options"] == {"payoff": "private"}
    assert parse_env_options("open_cleanup", {"rule_pool_size": "8"}) == {"num_rules": 8}
    one_deprecation(capsys, "'rule_pool_size' is now 'num_rules'")
    with pytest.raises(ValueError, match="reward"):
        build_env("consequence", ["reward=money"])  # typed and checked as objective


def test_an_old_run_folder_config_reads(tmp_path, capsys, fresh_deprecations):
    """A run folder whose config.json records the old option names (written before the
    rename) loads as a TrainConfig and as a seat; so does a training config given old names."""
    from dilemmax.agents.trained import TrainedPolicy

    zoo = Path(dilemmax.__file__).parent / "agents" / "zoo_runs" / "consequence" / "ippo"
    run = tmp_path / "run"
    shutil.copytree(zoo, run)
    config = json.loads((run / "config.json").read_text())
    config["env_kwargs"] = {"reward": "lexicographic"}  # the old name of objective
    (run / "config.json").write_text(json.dumps(config))
    loaded = TrainConfig.from_dict(json.loads((run / "config.json").read_text()))
    assert loaded.env_kwargs == {"objective": "lexicographic"}
    policy = TrainedPolicy.load(run)
    assert policy.env_id == "consequence"
    one_deprecation(capsys, "'reward' is now 'objective'")
    old = make_config("open_cleanup", overrides={"env_kwargs": {"layout_pool_size": 8}})
    assert old.env_kwargs == {"num_layouts": 8}


def test_the_scenario_set_option_is_named_for_what_it_is(capsys, fresh_deprecations):
    """The ``scenarios`` env's set is ``scenario_set`` (was ``which``): the old name builds the
    same set, with one deprecation line."""
    env = dilemmax.make("scenarios", game="moral_hazard", which="test")
    one_deprecation(capsys, "'which' is now 'scenario_set'")
    assert env.name == "scenarios:moral_hazard/test"
    assert env.made_as["options"] == {"game": "moral_hazard", "scenario_set": "test"}


@pytest.mark.slow
def test_an_old_transcript_reads(tmp_path, capsys, fresh_deprecations):
    """A play transcript whose episode starts record an old option name (written before the
    rename) still reads and replays: the same episode as under the new name."""
    from dilemmax.cli import main
    from dilemmax.view.runs import read_run

    out = tmp_path / "play"
    argv = ["play", "moral_hazard", "--seats", "scripted:teacher", "--set", "payoff=private",
            "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    transcript = out / "transcript.jsonl"
    new = read_run(transcript)
    text = transcript.read_text()
    assert '"payoff": "private"' in text
    transcript.write_text(text.replace('"payoff": "private"', '"reward": "private"'))
    capsys.readouterr()
    old = read_run(transcript)
    one_deprecation(capsys, "'reward' is now 'payoff'")
    assert [e.actions.tolist() for e in old.episodes] == [e.actions.tolist() for e in new.episodes]
    assert [e.env.made_as for e in old.episodes] == [e.env.made_as for e in new.episodes]
    assert all(bool(e.env.default_config.private_reward) for e in old.episodes)
