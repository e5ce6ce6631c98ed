"""Games found through the ``dilemmax.games`` entry points: a package's game is registered as
dilemmax's own are, a broken one is named in one line and left out, and listing the games
imports none of them.

Each plug-in here is a folder holding a package and its ``<name>.dist-info`` (METADATA,
entry_points.txt) put on ``sys.path``: how ``importlib.metadata`` finds an installed package,
then ``registry.reload_plugins()`` reads the group again.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import dilemmax
from dilemmax import cli
from dilemmax.envs import registry
from dilemmax.envs.game_declaration import DeclarationError, GameDeclaration
from dilemmax.errors import UsageError

GOOD = """
from dilemmax.envs.game_declaration import GameDeclaration

GAME = GameDeclaration(
    env="toy_env:ToyEnv",
    summary="a toy budget game from a plug-in",
    key_events=("spent",),
    action_names=("hold", "spend"),
    inspect_task=False,
)
"""


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """``plugin(entry_points, modules)``: a distribution ``toyplug`` whose ``dilemmax.games``
    group is ``entry_points`` (name -> value), its package's modules ``modules`` (name ->
    source), on sys.path and read (returns that folder); removed and read again afterwards."""

    def install(entry_points: dict[str, str], modules: dict[str, str]) -> str:
        package = tmp_path / "toyplug"
        package.mkdir()
        (package / "__init__.py").write_text("")
        for name, source in modules.items():
            (package / f"{name}.py").write_text(textwrap.dedent(source))
        info = tmp_path / "toyplug-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyplug\nVersion: 0.1\n")
        lines = [f"{name} = {value}" for name, value in entry_points.items()]
        (info / "entry_points.txt").write_text("[dilemmax.games]\n" + "\n".join(lines) + "\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        registry.reload_plugins()
        return str(tmp_path)

    yield install
    sys.path[:] = [p for p in sys.path if p != str(tmp_path)]
    for name in [m for m in sys.modules if m == "toyplug" or m.startswith("toyplug.")]:
        del sys.modules[name]
    registry.reload_plugins()


def test_a_packages_game_is_registered_as_the_games_of_dilemmax(plugin, capsys):
    plugin({"toy_plugin": "toyplug.declaration:GAME"}, {"declaration": GOOD})
    assert registry.registered_envs()[:4] == [
        "consequence", "moral_hazard", "open_cleanup", "open_harvest",
    ]  # fmt: skip
    assert "toy_plugin" in registry.registered_envs()
    declared = registry.declaration("toy_plugin")
    assert declared.action_names_for(3) == ["hold", "spend", "2"]
    assert type(dilemmax.make("toy_plugin")).__name__ == "ToyEnv"
    assert cli.main(["list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert "toy_plugin     a toy budget game from a plug-in" in listed


def test_reload_plugins_forgets_a_removed_package(plugin):
    folder = plugin({"toy_plugin": "toyplug.declaration:GAME"}, {"declaration": GOOD})
    assert "toy_plugin" in registry.registered_envs()
    sys.path.remove(folder)
    registry.reload_plugins()
    assert "toy_plugin" not in registry.registered_envs()
    assert "scenarios" in registry.registered_envs(games_only=False)  # register()'s stay


BROKEN = {
    "raises": ("toyplug.raises:GAME", {"raises": "raise RuntimeError('no such library')"}),
    "invalid": (
        "toyplug.invalid:GAME",
        {"invalid": "GAME = {'env': 'x:Y', 'summary': 'a dict, not a GameDeclaration'}"},
    ),
    "missing": ("toyplug.declaration:NO_SUCH_NAME", {"declaration": GOOD}),
}


def test_a_broken_plugin_is_named_in_one_line_and_the_rest_work(plugin, capsys):
    modules = {name: source for _, mods in BROKEN.values() for name, source in mods.items()}
    plugin({name: value for name, (value, _) in BROKEN.items()}, modules)
    assert registry.registered_envs()[:4] == [
        "consequence", "moral_hazard", "open_cleanup", "open_harvest",
    ]  # fmt: skip
    assert not set(BROKEN) & set(registry.registered_envs())
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("dilemmax: plug-in game '") for line in lines)
    errors = registry.plugin_errors()
    assert "RuntimeError: no such library" in errors["raises"]
    assert "toyplug.raises:GAME of toyplug" in errors["raises"]
    assert "TypeError: toyplug.invalid:GAME is a dict, not a GameDeclaration" in errors["invalid"]
    assert "AttributeError" in errors["missing"]
    assert dilemmax.make("consequence").num_agents == 3  # the built-in games still play
    with pytest.raises(UsageError, match="game 'raises' .* is left out: RuntimeError"):
        dilemmax.make("raises")
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("(plug-in game '") for line in out) == 3
    assert out[0].startswith("consequence ")


def test_an_id_two_packages_declare_is_left_out(plugin):
    """A plug-in may not take a built-in game's id."""
    plugin({"moral_hazard": "toyplug.declaration:GAME"}, {"declaration": GOOD})
    assert registry.declaration("moral_hazard").env.startswith("dilemmax.envs.moral_hazard.")
    assert "dilemmax declares 'moral_hazard' already" in registry.plugin_errors()["moral_hazard"]


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"env": "toy_env.ToyEnv"}, "env must be an import path"),
        ({"summary": " "}, "summary must be a non-empty line"),
        ({"key_events": ["a"]}, "key_events must be a tuple of names"),
        ({"inspect_task": 1}, "inspect_task must be True or False"),
        ({"scenario_sets": {"train": None}}, "scenario_sets must map 'train' and 'test'"),
    ],
)
def test_an_invalid_declaration_names_its_field(fields, words):
    with pytest.raises(DeclarationError, match=words):
        GameDeclaration(**{"env": "toy_env:ToyEnv", "summary": "toy", **fields})


def test_listing_the_games_imports_none_of_them():
    """``registered_envs()`` and ``dilemmax list`` read the declarations only: no game module
    (env, policies, text...) is imported, in a fresh process."""
    code = (
        "import sys, dilemmax\n"
        "from dilemmax.envs.registry import env_spec, registered_envs\n"
        "games = registered_envs()\n"
        "[env_spec(g).summary for g in games]\n"
        "loaded = [m for m in sys.modules for g in games if m.startswith(f'dilemmax.envs.{g}.')]\n"
        "print(sorted(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == str(
        sorted(f"dilemmax.envs.{g}.declaration" for g in dilemmax.registered_envs()[:4])
    )
