"""A game and a model provider from another package get everything dilemmax's own get (#46).

The plug-in is ``tests/plugin_package/dilemmax_commons_plugin``: the Shared Well, a common-pool
game of its own design, and the ``localtest:`` seat kind, a standard-library client of an
OpenAI-compatible server. No line of dilemmax names either. A module fixture installs it as
pip would leave it: a folder holding the package and its ``.dist-info`` (METADATA and
``entry_points.txt`` declaring ``"dilemmax.games"`` and ``"dilemmax.seats"``) is put on
``sys.path`` (and on PYTHONPATH for a process), and dilemmax reads its entry points again.

Every command runs in this process (``dilemmax.cli.main``) at tiny sizes, except ``dilemmax
list`` once as a process, which checks what a user's shell sees. Each command runs under a
deadline that ends the worker with every thread's stack rather than hanging the suite.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.utils import env_checker
from pettingzoo.test import api_test, parallel_api_test

import dilemmax
from dilemmax.cli import main
from dilemmax.envs import registry, seat_spec
from dilemmax.envs.text import Prompt
from dilemmax.llm.server import LocalChatServer
from dilemmax.wrappers.pettingzoo import aec_env, parallel_env

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = Path(__file__).parent / "plugin_package" / "dilemmax_commons_plugin"
GAME = "shared_well"
DEADLINE = 120  # seconds any one command may take here before the worker is ended
WELL = ["--set", "growth_low=2", "--set", "growth_high=2"]  # a known hidden regrowth, g = 2
ENTRY_POINTS = {
    "dilemmax.games": {GAME: "dilemmax_commons_plugin.shared_well.declaration:GAME"},
    "dilemmax.seats": {"localtest": "dilemmax_commons_plugin.provider:SEAT"},
}


# --------------------------------------------------------------------------- installing
def install(site: Path, dist: str, package: Path | None, entry_points: dict, files=None) -> None:
    """``site`` as pip leaves an installed distribution: the package, and ``<dist>.dist-info``
    with its METADATA and entry_points.txt (``files``: package files written instead)."""
    if package is not None:
        shutil.copytree(package, site / package.name, ignore=shutil.ignore_patterns("__pycache__"))
    for relative, text in (files or {}).items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_text(text)
    info = site / f"{dist}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    sections = [
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in points.items())
        for group, points in entry_points.items()
    ]
    (info / "entry_points.txt").write_text("\n".join(sections))


def reread_plugins() -> None:
    """dilemmax reads both entry-point groups again (what a new process does at start)."""
    importlib.invalidate_caches()
    registry.reload_plugins()
    seat_spec.reload_seat_kinds()


@contextlib.contextmanager
def on_path(site: Path):
    """``site`` on sys.path while inside, its modules and entry points forgotten after."""
    sys.path.insert(0, str(site))
    reread_plugins()
    try:
        yield site
    finally:
        sys.path.remove(str(site))
        for name in [m for m in sys.modules if m.split(".")[0] in _packages(site)]:
            del sys.modules[name]
        reread_plugins()


def _packages(site: Path) -> set[str]:
    return {p.name for p in site.iterdir() if p.is_dir() and not p.name.endswith(".dist-info")}


@pytest.fixture(scope="module")
def plugin(tmp_path_factory):
    """The plug-in installed for every test of this file; its site folder. Uninstalled after
    them (the games, kinds and Inspect tasks read again), so the files a worker runs next see
    dilemmax's own games only."""
    site = tmp_path_factory.mktemp("site")
    install(site, "dilemmax_commons_plugin", PACKAGE, ENTRY_POINTS)
    with on_path(site):
        yield site
    if "dilemmax.evals._registry" in sys.modules:
        tasks_read_again()


@contextlib.contextmanager
def deadline(seconds: float = DEADLINE):
    """A command that hangs ends the worker with every thread's stack (pytest-xdist reports
    the lost worker) instead of holding the suite."""
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def run(*argv: str) -> tuple[int, str, str]:
    """``dilemmax <argv>`` in this process: (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with deadline(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(list(argv))
        except SystemExit as exit_:  # argparse's own usage errors
            status = exit_.code
    return status, out.getvalue(), err.getvalue()


def ok(*argv: str) -> str:
    status, out, err = run(*argv)
    assert status == 0, f"dilemmax {' '.join(argv)} -> {status}\n{err[-3000:]}"
    return out


def summary(path: Path) -> dict:
    return json.loads(path.read_text())


# --------------------------------------------------------------------------- the game
def test_list_shows_the_plugin_game(plugin):
    lines = ok("list").splitlines()
    (line,) = [x for x in lines if x.split()[0] == GAME]
    assert "Shared Well (a plug-in)" in line
    assert {"consequence", "moral_hazard", "open_cleanup", "open_harvest"} <= {
        x.split()[0] for x in lines
    }


def test_the_rules_step_by_step_jitted_and_vmapped(plugin):
    """Hand-built wells through ``dilemmax.make``: rationing by floor(a_i * stock / sum a),
    regrowth min(remaining, g), an illegal request asks for nothing, an empty well ends the
    episode and ``step`` starts a full one; the same step vmapped over two wells."""
    from dilemmax_commons_plugin.shared_well.types import SharedWellConfig

    env = dilemmax.make(GAME, growth_low=4, growth_high=4)
    well = SharedWellConfig(jnp.int32(4), jnp.int32(5), jnp.int32(12))
    reset, step = jax.jit(env.reset_to), jax.jit(env.step_env)
    _, state = reset(jax.random.key(0), well)
    key = jax.random.key(1)
    obs, state, rewards, dones, infos = step(key, state, {"agent_0": 3, "agent_1": 3})
    # 6 asked of 5: each gets 3 * 5 // 6 = 2; 1 remains and regrows by min(1, 4) = 1.
    assert [int(x) for x in infos["take"]] == [2, 2] and bool(infos["rationed"])
    assert int(infos["growth"]) == 1 and int(state.stock) == 2 and not bool(dones["__all__"])
    assert rewards == {"agent_0": 2.0, "agent_1": 2.0}
    np.testing.assert_allclose(obs["agent_0"], [2 / 12, 1 / 10, 2 / 3, 2 / 3, 1 / 12], rtol=1e-6)
    assert jax.jit(env.action_mask)(state)["agent_0"].tolist() == [True, True, True, False]
    # Asking 3 of 2 is illegal (asks 0); the other takes the last 2: the well is dry.
    obs, state, rewards, dones, infos = step(key, state, {"agent_0": 3, "agent_1": 2})
    assert [bool(v) for v in infos["valid"]] == [False, True]
    assert [int(x) for x in infos["take"]] == [0, 2] and bool(infos["dry"])
    assert bool(dones["__all__"]) and int(state.stock) == 0
    _, fresh, *_ = jax.jit(env.step)(key, state, {"agent_0": 0, "agent_1": 0})  # auto-reset
    assert int(fresh.stock) == 12 and int(fresh.round) == 0
    # Two wells at once: the second has 12 units, so nothing is rationed there.
    wells = well.replace(
        stock=jnp.array([5, 12]), growth=jnp.array([4, 4]), capacity=jnp.array([12, 12])
    )

    @jax.jit
    def step_both(wells):
        _, states = jax.vmap(env.reset_to, in_axes=(None, 0))(key, wells)
        actions = {"agent_0": 3, "agent_1": 3}
        return jax.vmap(env.step_env, in_axes=(None, 0, None))(key, states, actions)

    both = step_both(wells)
    assert both[4]["take"].tolist() == [[2, 2], [3, 3]] and both[1].stock.tolist() == [2, 10]


def test_options_checked_together_in_one_line(plugin):
    status, _, err = run("rollout", GAME, "--set", "growth_low=5", "--set", "growth_high=2")
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert "growth_low (5) must not exceed growth_high (2)" in err
    status, _, err = run("rollout", GAME, "--set", "capacity=2")
    assert status == 2 and "capacity" in err and len(err.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def rollout_file(plugin, tmp_path_factory):
    """``dilemmax rollout`` of a greedy agent beside a restrained one, g = 2: its summary and
    the step-by-step transcript ``dilemmax view`` reads."""
    folder = tmp_path_factory.mktemp("rollout")
    files = ["--json", str(folder / "summary.json"), "--out", str(folder / "steps.jsonl")]
    seats = ["--policy", "restrained", "--seat", "agent_0=greedy"]
    ok("rollout", GAME, *seats, "--episodes", "2", *WELL, *files)
    return folder


def test_rollout_plays_the_dilemma(rollout_file):
    """Greedy (3 a round) beside restrained (1) on a full well of 12, g = 2: the stock goes
    12 -> 10 -> 8 -> 6 -> 4 and the fifth round's 4 empties it: 15 units against 5, in 5
    rounds. (Two restrained agents would take 10 each over all 10 rounds, two greedy 8 each.)"""
    got = summary(rollout_file / "summary.json")
    assert got["return"] == [15.0, 5.0] and got["take_by_agent"] == [15.0, 5.0]
    assert got["length"] == 5 and got["dried_up"] == 1.0 and got["final_stock"] == 0.0
    assert got["total_take"] == 20.0 and got["rationed_rounds"] == 0.0
    assert got["format_validity"] == 1.0


# --------------------------------------------------------------------------- training
TINY_TRAINING = ["total_timesteps=64", "num_envs=4", "num_steps=4", "num_minibatches=1",
                 "update_epochs=1", "eval_every=0", "eval_episodes=2", "hidden=8"]  # fmt: skip


@pytest.mark.slow  # the file's most expensive test: a training program and its evaluation
def test_train_a_few_updates_then_evaluate(plugin, tmp_path):
    """Four PPO updates on the game's own training grid (every regrowth g = 1..4), then
    ``dilemmax evaluate`` of the run: the game's metrics, per configuration of that grid."""
    run_dir = tmp_path / "run"
    sets = [word for s in TINY_TRAINING for word in ("--set", s)]
    ok("train", GAME, "--out", str(run_dir), "--no-progress", *sets)
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["env"], config["train_grid"]) == (GAME, "growth_grid")  # the game's defaults
    ok("evaluate", str(run_dir), "--episodes", "2", "--json", str(tmp_path / "eval.json"))
    evaluated = json.loads((tmp_path / "eval.json").read_text())
    text = json.dumps(evaluated)
    for metric in ("total_take", "dried_up", "final_stock", "format_validity"):
        assert metric in text, metric


# --------------------------------------------------------------------------- a model seat
def well_reply(body: dict) -> str:
    """The local server's model: one unit while the well holds at least 8, else two."""
    prompt = body["messages"][-1]["content"]
    holds = int(prompt.split("The well holds ")[1].split()[0])
    return f"I leave the rest to regrow.\nTAKE {1 if holds >= 8 else 2}"


@pytest.mark.parametrize(
    "reply,action,error",
    [
        ("I leave some.\nTAKE 2", 2, ""),
        ("**take: 1.**", 1, ""),
        ("TAKE 1\nOn second thought:\nTAKE 0", 0, ""),  # the last TAKE line counts
        ("TAKE 3", 0, "TAKE 3 is outside 0..2"),  # more than the well's 2 units
        ("TAKE -1", 0, "TAKE -1 is outside 0..2"),
        ("TAKE \uff12", 0, "is not a number"),  # a full-width digit is no ASCII number
        ("TAKE " + "9" * 5000, 0, "is not a number"),
        ("I would rather not say", 0, "no 'TAKE <units>' line found"),
        (None, 0, "no 'TAKE <units>' line found"),
    ],
)
def test_the_text_protocol_reads_any_reply(plugin, reply, action, error):
    """Untrusted replies: the move read or refused (asking for nothing), never raising."""
    env = dilemmax.make(GAME)
    parsed = env.text_protocol().parse_reply(reply, Prompt("", "", context={"stock": 2}))
    assert (parsed.action, parsed.valid) == (action, not error)
    assert error in parsed.error


@pytest.fixture(scope="module")
def played(plugin, tmp_path_factory):
    """``dilemmax play`` with a ``localtest:`` seat (the plug-in's provider) against the local
    test server, beside a greedy scripted seat: (run folder, results, the requests served)."""
    folder = tmp_path_factory.mktemp("play")
    bodies = []

    def reply(body):
        bodies.append(body)
        return well_reply(body)

    with LocalChatServer(reply) as server:
        seat = f"agent_0=localtest:well-model,base_url={server.base_url},temperature=0.5"
        ok("play", GAME, "--seat", seat, "--seat", "agent_1=greedy", "--episodes", "1",
           *WELL, "--out", str(folder / "run"), "--json", str(folder / "results.json"),
           "--no-progress")  # fmt: skip
    return folder / "run", json.loads((folder / "results.json").read_text()), bodies


def test_play_with_a_seat_of_the_plugin_kind(played):
    """The model takes 1 while the well holds 8 or more, then 2; greedy takes what it may (3,
    or all the well holds). g = 2: 12 -> 10 -> 8 -> 6 (4 taken a round, 2 regrown); at 6 they
    take 2 + 3, 1 remains and regrows 1; at 2 both ask 2, rationed to 2 * 2 // 4 = 1 each, and
    the well is dry after round 5: the model 1+1+1+2+1 = 6, greedy 3+3+3+3+1 = 13."""
    _, results, bodies = played
    (episode,) = results["episodes"]
    assert episode["metrics"]["return"] == [6.0, 13.0]
    assert episode["metrics"]["rationed_rounds"] == 1.0 and episode["metrics"]["length"] == 5
    assert len(bodies) == 5  # one call a round, over HTTP, by the plug-in's client
    assert {b["model"] for b in bodies} == {"well-model"}
    assert {b["temperature"] for b in bodies} == {0.5}  # the seat's own option, over the run's
    assert bodies[0]["messages"][0]["role"] == "system"
    assert "Round 1 of 10. The well holds 12 of 12 units." in bodies[0]["messages"][-1]["content"]


@pytest.mark.parametrize(
    "seat,words",
    [
        ("localtest:m,temperature=9", ["temperature", "9"]),
        ("localtest:m,top_k=3", ["top_k", "localtest seats take"]),
        ("localtest:m", ["needs base_url"]),
    ],
)
def test_a_bad_seat_of_the_plugin_kind_is_one_line(plugin, tmp_path, seat, words):
    status, _, err = run("play", GAME, "--seats", seat, "--out", str(tmp_path / "r"))
    assert status == 2, err
    assert len(err.strip().splitlines()) == 1 and all(w in err for w in words), err
    assert not (tmp_path / "r").exists()  # refused before any folder is written


def test_view_of_the_play_run_and_of_the_rollout(played, rollout_file):
    """The replay page of a plug-in game's runs: the game's declared key events and action
    names, every model call of the play run."""
    run_dir, _, bodies = played
    ok("view", str(run_dir))
    page = (run_dir / "view.html").read_text()
    assert '"actions":["take 0","take 1","take 2","take 3"]' in page  # the declared names
    ok("view", str(rollout_file / "steps.jsonl"))
    assert GAME in (rollout_file / "steps.html").read_text()


# --------------------------------------------------------------------------- the views
def test_pettingzoo_parallel_and_aec_views_pass_pettingzoo_s_api_tests(plugin):
    with deadline():
        parallel_api_test(parallel_env(GAME), num_cycles=30)
        api_test(aec_env(GAME), num_cycles=30)


def test_gymnasium_view_from_its_registered_id(plugin):
    """``gymnasium.make("dilemmax/shared_well-v0")``, registered from the entry point: the
    learner takes 1 a round beside a greedy seat (g = 2) and earns 5 in the 5 rounds the well
    lasts, as in ``test_rollout_plays_the_dilemma``; Gymnasium's own checker passes."""
    env = gymnasium.make(
        f"dilemmax/{GAME}-v0", others="scripted:greedy", growth_low=2, growth_high=2
    )
    with deadline():
        env_checker.check_env(env.unwrapped, skip_render_check=True)
        env.reset(seed=0)
        total, steps, terminated = 0.0, 0, False
        while not terminated:
            _, reward, terminated, truncated, _ = env.step(1)
            total, steps = total + reward, steps + 1
    assert (total, steps, truncated) == (5.0, 5, False)


# --------------------------------------------------------------------------- Inspect and docs
def tasks_read_again() -> None:
    """dilemmax's Inspect tasks registered again from today's games, as a new process's
    ``inspect eval`` registers them (the tasks module, once imported, keeps the games it saw)."""
    module = sys.modules.get("dilemmax.evals._registry")
    if module is None:
        importlib.import_module("dilemmax.evals._registry")
    else:
        importlib.reload(module)


def test_the_inspect_task_plays_the_plugin_game(plugin, tmp_path):
    """``dilemmax/shared_well`` as an Inspect task, with Inspect's mock model answering TAKE 1
    for both seats (g = 2: 12 -> 12 every round, 1 each for 10 rounds)."""
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import ModelOutput, ModelUsage, get_model

    def outputs(messages, tools, tool_choice, config):
        output = ModelOutput.from_content("mockllm/well", "TAKE 1")
        output.usage = ModelUsage(input_tokens=7, output_tokens=3, total_tokens=10)
        return output

    tasks_read_again()
    with deadline():
        (log,) = inspect_eval(
            f"dilemmax/{GAME}",
            task_args={"episodes": 1, "options": "growth_low=2 growth_high=2"},
            model=get_model("mockllm/well", custom_outputs=outputs, memoize=False),
            log_dir=str(tmp_path),
            display="none",
        )
    assert log.status == "success", log.error
    (sample,) = log.samples
    score = sample.scores["episode_metrics"].value
    assert score["return[agent_0]"] == score["return[agent_1]"] == 10.0
    assert score["total_take"] == 20.0 and score["final_stock"] == 12.0


def test_the_generated_docs_page(plugin):
    """docs/gen_pages.py writes the plug-in game's page as it writes dilemmax's own: its
    summary, every option's meaning and range, its scripted policies, its first prompt."""
    spec = importlib.util.spec_from_file_location("gen_pages", ROOT / "docs" / "gen_pages.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    page = gen.game_page(GAME, images=None)
    assert "Shared Well (a plug-in)" in page
    for words in ("the most hidden regrowth g drawn", "units a full well holds", "greedy",
                  "restrained", "reciprocal", "Round 1 of 10. The well holds"):  # fmt: skip
        assert words in page, words


# --------------------------------------------------------------------------- broken plug-ins
BROKEN_FILES = {
    "dilemmax_broken_plugin/__init__.py": "",
    "dilemmax_broken_plugin/raises.py": 'raise RuntimeError("broken on purpose at import")\n',
    "dilemmax_broken_plugin/invalid.py": (
        "from dilemmax.envs.seat_spec import SCRIPTED\n"
        "GAME = {'env': 'dilemmax_broken_plugin.invalid:Nothing'}  # a dict, not a declaration\n"
        "SEAT = SCRIPTED  # a kind that calls itself 'scripted'\n"
    ),
}
BROKEN_ENTRY_POINTS = {
    "dilemmax.games": {
        "raising_game": "dilemmax_broken_plugin.raises:GAME",
        "invalid_game": "dilemmax_broken_plugin.invalid:GAME",
    },
    "dilemmax.seats": {
        "raisingseat": "dilemmax_broken_plugin.raises:SEAT",
        "invalidseat": "dilemmax_broken_plugin.invalid:SEAT",
    },
}


@pytest.fixture(scope="module")
def broken(plugin, tmp_path_factory):
    """A second distribution beside the good plug-in: two games and two seat kinds, one of
    each raising on import and one declaring something invalid."""
    site = tmp_path_factory.mktemp("broken_site")
    install(site, "dilemmax_broken_plugin", None, BROKEN_ENTRY_POINTS, BROKEN_FILES)
    with on_path(site):
        yield site


def one_line_each(err: str, *names: str) -> None:
    """Each name in exactly one line of ``err``, no traceback."""
    assert "Traceback" not in err, err
    for name in names:
        assert len([line for line in err.splitlines() if name in line]) == 1, (name, err)


@pytest.mark.slow
def test_broken_plugins_are_named_in_one_line_and_the_rest_works(broken, tmp_path):
    status, out, err = run("list")
    assert status == 0
    listed = {line.split()[0] for line in out.splitlines()}
    assert {"consequence", "moral_hazard", "open_cleanup", "open_harvest", GAME} <= listed
    assert not {"raising_game", "invalid_game"} & listed
    one_line_each(err, "raising_game", "invalid_game")
    assert "broken on purpose at import" in err and "GameDeclaration" in err
    # The broken seat kinds are named by the listing too, one line each.
    one_line_each(out, "raisingseat", "invalidseat")
    # Built-in games, seats and the good plug-in keep working.
    ok("rollout", "moral_hazard", "--policy", "teacher", "--episodes", "1")
    ok("rollout", GAME, "--policy", "greedy", "--episodes", "1", *WELL)
    ok("play", "moral_hazard", "--seats", "teacher", "--episodes", "1",
       "--out", str(tmp_path / "mh"))  # fmt: skip
    # Asking for a broken one is a one-line error naming it.
    for seat, words in [("raisingseat:x", "does not load"), ("invalidseat:x", "is not valid")]:
        status, _, err = run("rollout", GAME, "--policy", seat)
        assert status == 2 and words in err, err
        one_line_each(err, seat.split(":")[0])
    status, _, err = run("rollout", "raising_game")
    assert status == 2 and "raising_game" in err and "Traceback" not in err, err


@pytest.mark.slow  # a cold start of dilemmax in a process of its own
def test_a_new_process_finds_the_plugins_through_pythonpath(plugin, broken):
    """``dilemmax list`` in a process of its own, the two sites on PYTHONPATH (how a shell
    sees an installed plug-in): the good game listed, the broken ones named once each."""
    path = os.pathsep.join([str(plugin), str(broken), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "dilemmax", "list"],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert GAME in {line.split()[0] for line in done.stdout.splitlines()}
    one_line_each(done.stderr, "raising_game", "invalid_game")
