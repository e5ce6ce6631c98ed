"""``dilemmax view``: the replay reproduces what was played, and the page, driven in headless
chromium from file://, loads nothing, logs no error and shows the run's own values.

One scripted rollout per game (tiny options) and two planted-model play runs (moral_hazard and
open_harvest against a local server whose reply is a known function of the prompt) are written
once per module; one browser session serves every page. Screenshots go to the test's tmp folder.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import jax
import numpy as np
import pytest

import dilemmax
from dilemmax.agents.arena import Arena
from dilemmax.cli import main
from dilemmax.envs.metrics import axes_text
from dilemmax.envs.policies import policies_for
from dilemmax.envs.registry import env_spec
from dilemmax.envs.replay import replay_states
from dilemmax.llm.server import LocalChatServer
from dilemmax.view.runs import read_run

# Tiny options per game; the same options for a game's rollout and play run, so one compiled
# replay serves both (open_harvest's held-out split is the one a play run takes by default).
# The recorded runs take a minute of play (built once: the suite hands out whole files), so
# every test that reads them is marked slow; the fast tier checks the paths that are no run.

GAMES = {
    "open_cleanup": ({"num_agents": 3, "trial_steps": 6, "num_trials": 2}, "greedy"),
    "open_harvest": (
        {"num_agents": 2, "trial_steps": 5, "num_trials": 2, "split": "held_out"},
        "greedy",
    ),
    "moral_hazard": ({}, "teacher"),
    "consequence": ({}, "fair_share"),
}
SEED = 3
PAGE_TIMEOUT_S = 60
RENDER_SCALE = 8  # render_rgb's default pixels per cell


def hazard_reply(body) -> str:
    """The planted moral-hazard model: query at work, a fixed note, a fixed final choice."""
    text = body["messages"][-1]["content"]
    if "stage: WORK" in text:
        return "I will ask.\nACTION QUERY"
    if "stage: NOTE" in text:
        return "NOTE CASE 2 UNSAFE B"
    return "FINAL C"


def harvest_reply(body) -> str:
    """The planted open_harvest model: a trial-end reflection, else by the prompt's parity
    exploring north or harvesting with a left turn."""
    text = body["messages"][-1]["content"]
    if '"lessons"' in text and '"action"' not in text:
        return '{"lessons": ["red apples pay"], "plans": ["go north"]}'
    odd = len(text) % 2
    mode, action = [("explore", "north"), ("harvest", "turn_left")][odd]
    return json.dumps({"reason": "apples ahead", "mode": mode, "action": action})


def _options(game: str) -> list[str]:
    return [f"--set={k}={v}" for k, v in GAMES[game][0].items()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """game or play_<game> -> (the run's path, its page); "frames" -> game -> the render_rgb
    frames of a grid game's first episode, as the arena captured them while recording it."""
    root = tmp_path_factory.mktemp("view_runs")
    out, frames = {}, {}
    for game, (options, policy) in GAMES.items():
        path = root / f"{game}.jsonl"
        if game in ("open_cleanup", "open_harvest"):
            # What `rollout --out` runs, with the frames of its first episode kept.
            env = dilemmax.make(game, **options)
            arena = Arena(env, policies_for(env)[policy])
            played = arena.run(jax.random.key(SEED), 2, record=path, gif_episodes=1)
            frames[game] = played.frames
        else:
            argv = ["rollout", game, "--policy", policy, "--episodes", "2", "--seed", str(SEED)]
            assert main([*argv, "--out", str(path), "--no-progress"]) == 0
        out[game] = path
    for game, reply in (("moral_hazard", hazard_reply), ("open_harvest", harvest_reply)):
        path = root / f"play_{game}"
        scripted = f"scripted:{GAMES[game][1]}"
        with LocalChatServer(reply) as server:
            argv = ["play", game, *_options(game), "--seats", scripted,
                    "--seat", "agent_0=openai:tiny", "--episodes", "2", "--envs", "2",
                    "--base-url", server.base_url, "--no-progress", "--out", str(path)]  # fmt: skip
            assert main(argv) == 0
        out[f"play_{game}"] = path
    pages = {}
    for name, path in out.items():
        assert main(["view", str(path)]) == 0
        page = path / "view.html" if path.is_dir() else path.with_suffix(".html")
        pages[name] = (path, page)
    pages["frames"] = frames
    return pages


# --------------------------------------------------------------------------- the replay
@pytest.mark.slow
@pytest.mark.parametrize("game", list(GAMES))
def test_the_replay_gives_back_every_recorded_reward_and_info(game, runs):
    """Replayed from its start and actions alone, each episode has the rollout's rewards and
    infos (cells cleared, apples eaten, beams, queries, eliminations...) at every step."""
    path, _ = runs[game]
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    run = read_run(path)
    assert len(run.episodes) == 2
    for e, episode in enumerate(run.episodes):
        env = episode.env
        _, rewards, dones, infos = replay_states(env, episode.key, episode.config, episode.actions)
        steps = [r for r in rows if r["episode"] == e and "t" in r]
        assert len(steps) == episode.actions.shape[0] and bool(np.asarray(dones)[-1])
        recorded = np.array([[r["rewards"][a] for a in env.agents] for r in steps])
        np.testing.assert_array_equal(np.asarray(rewards), recorded)
        for name, values in infos.items():
            recorded = np.array([r["infos"][name] for r in steps])
            np.testing.assert_array_equal(np.asarray(values), recorded, err_msg=name)


@pytest.mark.slow
def test_a_training_run_plays_its_checkpoint(tmp_path, capsys, monkeypatch):
    from dilemmax.llm.test_cli import fake_trained_run
    from dilemmax.view import cli

    run_dir = fake_trained_run(tmp_path / "trained")
    # The episodes the command played, kept as it read them (reading the run again would load
    # the checkpoint and compile its play a second time).
    played = []

    def read_and_keep(*args, **kwargs):
        played.append(read_run(*args, **kwargs))
        return played[-1]

    monkeypatch.setattr(cli, "read_run", read_and_keep)
    assert main(["view", str(run_dir), "--episodes", "2", "--seed", "5"]) == 0
    assert (run_dir / "view.html").is_file()
    assert str((run_dir / "view.html").resolve()) in capsys.readouterr().out
    [run] = played
    assert [e.seats["agent_0"] for e in run.episodes] == ["trained", "trained"]
    assert run.episodes[0].actions.shape == (3, 2)  # moral_hazard: work, note, final


@pytest.mark.slow
def test_open_hands_the_page_to_the_default_browser(runs, tmp_path, capsys, monkeypatch):
    opened = []
    monkeypatch.setattr("webbrowser.open", lambda uri: opened.append(uri) or False)
    path, _ = runs["moral_hazard"]
    page = tmp_path / "mh.html"
    assert main(["view", str(path), "--out", str(page), "--open"]) == 0
    assert opened == [page.resolve().as_uri()]
    assert "no default browser here" in capsys.readouterr().out


@pytest.mark.parametrize(
    "make_path, message",
    [
        (lambda d: d / "missing", "no such file or folder"),
        (lambda d: d, "nothing to view"),
        (lambda d: _write(d / "x.jsonl", '{"a": 1}\n'), "neither a play transcript"),
        (lambda d: _write(d / "y.jsonl", "not json\n{}\n"), "line 1: not JSON"),
        (lambda d: _write(d / "old.jsonl", '{"episode": 0, "t": 0, "actions": {}}\n'), "no start"),
    ],
)
def test_paths_that_are_no_run_are_one_line_errors(tmp_path, capsys, make_path, message):
    assert main(["view", str(make_path(tmp_path))]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dilemmax view: error:") and "\n" not in err and message in err


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- in the browser
@pytest.fixture(scope="module")
def browser():
    """One headless chromium for the module, logging the console and the network."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    driver_path = shutil.which("chromedriver")
    if driver_path is None or not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("no chromium / chromedriver (apt-get install chromium chromium-driver)")
    options = Options()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1300,1300"):  # fmt: skip
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(PAGE_TIMEOUT_S)
    driver.set_script_timeout(PAGE_TIMEOUT_S)
    yield driver
    driver.quit()


def open_page(driver, page: Path, episode: int = 0) -> None:
    driver.get_log("performance")  # drop what earlier pages logged
    driver.get_log("browser")
    driver.get(page.resolve().as_uri())
    wait_ready(driver, episode)


def wait_ready(driver, episode: int) -> None:
    deadline = time.monotonic() + PAGE_TIMEOUT_S
    while time.monotonic() < deadline:
        if driver.execute_script("return document.body.dataset.ready") == str(episode):
            return
        time.sleep(0.05)
    raise AssertionError(f"episode {episode} not shown within {PAGE_TIMEOUT_S} s")


def requested_urls(driver) -> list[str]:
    """Every URL the page asked for (DevTools network log) besides its own file and data: URLs."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return [u for u in urls if not u.startswith(("file:", "data:"))]


def show_step(driver, t: int) -> None:
    driver.execute_script(
        "const s = document.getElementById('step'); s.value = arguments[0];"
        "s.dispatchEvent(new Event('input'));",
        t,
    )


def agent_cells(driver) -> dict[str, dict]:
    """agent -> the agents table's action (number), reward and return at the shown step."""
    return driver.execute_script(
        """const out = {};
        for (const row of document.querySelectorAll('#agents tbody tr')) {
          out[row.dataset.agent] = {
            action: row.querySelector('.action').dataset.action,
            reward: row.querySelector('.reward').textContent,
            ret: row.querySelector('.return').textContent};
        }
        return out;"""
    )


def pick_episode(driver, n: int) -> None:
    driver.execute_script(
        "const s = document.getElementById('episode'); s.value = String(arguments[0]);"
        "s.dispatchEvent(new Event('change'));",
        n,
    )
    wait_ready(driver, n)


def check_clean_load(driver) -> None:
    assert requested_urls(driver) == []
    assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []


def _number(text: str) -> float:
    return float(text)


@pytest.mark.slow
@pytest.mark.parametrize("game", list(GAMES))
def test_a_rollout_page_shows_the_transcript_at_every_step_asked(game, runs, browser, tmp_path):
    path, page = runs[game]
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    open_page(browser, page)
    check_clean_load(browser)
    for e in (0, 1):
        if e:
            pick_episode(browser, e)
        steps = [r for r in rows if r["episode"] == e and "t" in r]
        for t in sorted({0, len(steps) // 2, len(steps) - 1}):
            show_step(browser, t)
            cells = agent_cells(browser)
            for agent, value in steps[t]["actions"].items():
                assert int(cells[agent]["action"]) == value
                assert _number(cells[agent]["reward"]) == pytest.approx(steps[t]["rewards"][agent])
        show_step(browser, len(steps))
        metrics = next(r["metrics"] for r in rows if r["episode"] == e and "metrics" in r)
        cells = agent_cells(browser)
        returns = [_number(cells[a]["ret"]) for a in steps[0]["actions"]]
        np.testing.assert_allclose(
            returns, np.sum([list(s["rewards"].values()) for s in steps], 0), atol=1e-3
        )
        assert metrics  # the episode's metrics are in the page's table too
        shown = browser.execute_script("return document.querySelectorAll('#metrics tr').length")
        assert shown == len(metrics)
        # Each with its axes as the game declares them (a per-trial gini reads "per trial").
        table = browser.execute_script(
            "return [...document.querySelectorAll('#metrics tr')]"
            ".map((r) => [r.cells[0].textContent, r.cells[1].textContent])"
        )
        declared = env_spec(game).load().metric_axes
        assert dict(table) == {name: axes_text(declared[name]) for name in metrics}
    browser.save_screenshot(str(tmp_path / f"view_{game}.png"))
    assert (tmp_path / f"view_{game}.png").stat().st_size > 1000


@pytest.mark.slow
@pytest.mark.parametrize("game", ["open_cleanup", "open_harvest"])
def test_a_grid_page_draws_the_frames_render_rgb_draws(game, runs, browser):
    """The canvas, cell by cell (agent cells aside), has the colours of render_rgb's frames of
    the recorded episode, beam tints included, at every step."""
    frames = runs["frames"][game]
    _, page = runs[game]
    open_page(browser, page)
    for t in range(len(frames)):
        show_step(browser, t)
        canvas = browser.execute_script(
            """const g = document.getElementById('frame'), d = window.viewState();
            const size = g.width / d.grid.width, ctx = g.getContext('2d'), out = [];
            for (let r = 0; r < d.grid.height; r++) for (let c = 0; c < d.grid.width; c++) {
              const p = ctx.getImageData(c * size + size / 2, r * size + size / 2, 1, 1).data;
              out.push([p[0], p[1], p[2]]);
            }
            return [out, d.grid.positions[arguments[0]]];""",
            t,
        )
        colours, positions = canvas
        frame = np.asarray(frames[t])
        height, width = frame.shape[0] // RENDER_SCALE, frame.shape[1] // RENDER_SCALE
        assert len(colours) == height * width
        agents = {(positions[2 * i], positions[2 * i + 1]) for i in range(len(positions) // 2)}
        for r in range(height):
            for c in range(width):
                if (r, c) in agents:
                    continue
                centre = frame[
                    r * RENDER_SCALE + RENDER_SCALE // 2, c * RENDER_SCALE + RENDER_SCALE // 2
                ]
                assert colours[r * width + c] == centre.tolist(), (t, r, c)


@pytest.mark.slow
@pytest.mark.parametrize("game", ["moral_hazard", "open_harvest"])
def test_a_play_page_shows_each_model_call_and_seat_at_its_step(game, runs, browser, tmp_path):
    path, page = runs[f"play_{game}"]
    rows = [json.loads(line) for line in (path / "transcript.jsonl").read_text().splitlines()]
    episodes = [r for r in rows if r["type"] == "episode"]
    open_page(browser, page)
    check_clean_load(browser)
    for n, episode in enumerate(episodes):
        if n:
            pick_episode(browser, n)
        calls = [
            r for r in rows
            if r["type"] == "call" and r["episode"] == episode["episode"] and r["kind"] == "act"
        ]  # fmt: skip
        assert calls
        for call in calls[:: max(1, len(calls) // 3)]:
            t = call["step"]
            show_step(browser, t)
            cells = agent_cells(browser)
            for agent, actions in episode["actions"].items():
                assert int(cells[agent]["action"]) == actions[t]
            shown = browser.execute_script(
                """const c = document.querySelector(
                  `#calls .call[data-agent="${arguments[0]}"][data-kind="act"]`);
                return c && [c.querySelector('.reply').textContent,
                             c.querySelector('.parsed').dataset.action,
                             c.querySelector('.validity').textContent];""",
                call["agent"],
            )
            assert shown == [
                call["reply"],
                str(call["action"]),
                "valid" if call["valid"] else "invalid",
            ]
        show_step(browser, episode["steps"])
        cells = agent_cells(browser)
        returns = [_number(cells[a]["ret"]) for a in episode["actions"]]
        np.testing.assert_allclose(returns, episode["metrics"]["return"], atol=1e-3)
    if game == "open_harvest":  # the reflection is carried as the agent's notes after its step
        reflect = next(r for r in rows if r["type"] == "call" and r["kind"] == "reflect")
        pick_episode(browser, reflect["episode"])
        show_step(browser, reflect["step"] + 1)
        notes = browser.execute_script(
            "return [...document.querySelectorAll('#notes .note pre')].map(n => n.textContent)"
        )
        assert reflect["reply"] in notes
        explore = browser.execute_script(
            "return !!document.querySelector('.trial-figure[data-name=explore_share]')"
        )
        assert explore
    browser.save_screenshot(str(tmp_path / f"view_play_{game}.png"))
    assert (tmp_path / f"view_play_{game}.png").stat().st_size > 1000


@pytest.mark.slow
def test_keys_and_play_move_the_step(runs, browser):
    _, page = runs["open_harvest"]
    open_page(browser, page)
    body = browser.find_element("tag name", "body")
    body.send_keys("\ue014")  # arrow right
    body.send_keys("\ue014")
    assert browser.execute_script("return window.viewState().t") == 2
    body.send_keys("\ue012")  # arrow left
    assert browser.execute_script("return window.viewState().t") == 1
    browser.execute_script("document.getElementById('speed').value = 100")
    browser.find_element("id", "play").click()
    deadline = time.monotonic() + 10
    while browser.execute_script("return window.viewState().t") < 4:
        assert time.monotonic() < deadline, "play did not advance the step"
        time.sleep(0.05)
    browser.find_element("id", "play").click()


# A model name as a seat spec allows it, with everything that could end the run index's
# <script> element or change how the HTML parser reads the rest of the page; %SCRIPT% is one of
# the page template's own slots.
HOSTILE_SEAT = "openai:<!--<script>alert(1)</script><!-- %SCRIPT% & \u2028\u2029 -->"


@pytest.mark.slow
def test_a_seat_name_that_looks_like_markup_is_text_to_the_page(runs, browser, tmp_path):
    """The play run's model seat renamed to markup in its transcript: the page's script still
    runs (the episode is shown), logs no error, adds no element, and shows the name as given."""
    path, _ = runs["play_moral_hazard"]
    rows = [json.loads(line) for line in (path / "transcript.jsonl").read_text().splitlines()]
    for row in rows:
        if row["type"] == "episode":
            row["seats"] = {a: HOSTILE_SEAT if s == "openai:tiny" else s
                            for a, s in row["seats"].items()}  # fmt: skip
        elif row["type"] == "call":
            row["seat"] = HOSTILE_SEAT
    run = tmp_path / "hostile"
    run.mkdir()
    (run / "transcript.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["view", str(run)]) == 0
    episodes = sum(r["type"] == "episode" for r in rows)
    open_page(browser, run / "view.html")
    check_clean_load(browser)
    seat = browser.execute_script(
        "return document.querySelector('#agents tr[data-agent=agent_0]').children[1].textContent"
    )
    assert seat == HOSTILE_SEAT
    assert browser.execute_script("return document.scripts.length") == episodes + 2
