"""The replay page of a large grid run: its size, the time to write it, and how fast headless
chromium shows it.

A run of ``--episodes`` open_cleanup episodes of 2,000 steps with 5 agents (scripted ``greedy``
seats, played in one compiled program) goes through the same path as ``dilemmax view`` of a
training run (:func:`dilemmax.view.runs.played_episodes`, then :func:`write_page`). The page is
then opened from file:// in headless chromium (selenium): first contentful paint, the time the
first episode is drawn (``data-first-ms``), the time to switch to the last episode, and the
slowest of 20 jumps of the step slider to random steps.

    python benchmarks/view_size.py --episodes 256 --out /tmp/view_size

Writes ``view_size.json`` (and the page) under --out; benchmarks/results/view_size.md records a
run with the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import time
from pathlib import Path

import jax

import dilemmax
from dilemmax.envs.policies import policies_for
from dilemmax.envs.rollout import run_episodes
from dilemmax.view.page import write_page
from dilemmax.view.runs import Run, played_episodes


def write_large_page(episodes: int, out: Path) -> dict:
    env = dilemmax.make("open_cleanup")
    key = jax.random.key(0)
    start = time.perf_counter()
    rollouts, metrics = jax.block_until_ready(
        run_episodes(env, policies_for(env)["greedy"], key, episodes)
    )
    played_s = time.perf_counter() - start
    seats = dict.fromkeys(env.agents, "scripted:greedy")
    run = Run(f"open_cleanup: {episodes} greedy episodes", "benchmark", [])
    run.episodes = played_episodes(env, key, rollouts, metrics, seats, "open_cleanup")
    start = time.perf_counter()
    page = write_page(run, out / "view.html")
    return {
        "episodes": episodes,
        "steps": int(run.episodes[0].actions.shape[0]),
        "agents": env.num_agents,
        "play_s": round(played_s, 1),
        "write_page_s": round(time.perf_counter() - start, 1),
        "page_bytes": page.stat().st_size,
    }


def browser_timings(page: Path, jumps: int = 20) -> dict:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1300,1300"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.set_page_load_timeout(600)
    driver.set_script_timeout(600)
    try:
        start = time.perf_counter()
        driver.get(page.resolve().as_uri())
        loaded_s = time.perf_counter() - start
        first = _wait(driver, "return document.body.dataset.firstMs")
        paint = driver.execute_script(
            "const p = performance.getEntriesByName('first-contentful-paint')[0];"
            "return p ? p.startTime : null;"
        )
        last = driver.execute_script("return document.getElementById('episode').options.length") - 1
        start = time.perf_counter()
        driver.execute_script(
            "const s = document.getElementById('episode'); s.value = String(arguments[0]);"
            "s.dispatchEvent(new Event('change'));",
            last,
        )
        _wait(driver, f"return document.body.dataset.ready === '{last}' || null")
        switch_s = time.perf_counter() - start
        steps = driver.execute_script("return window.viewState().steps")
        slowest = 0.0
        for t in random.Random(0).sample(range(steps + 1), jumps):
            ms = driver.execute_script(
                "const s = document.getElementById('step'), t0 = performance.now();"
                "s.value = arguments[0]; s.dispatchEvent(new Event('input'));"
                "return performance.now() - t0;",
                t,
            )
            slowest = max(slowest, ms)
        return {
            "load_event_s": round(loaded_s, 2),
            "first_contentful_paint_ms": None if paint is None else round(paint, 1),
            "first_episode_drawn_ms": float(first),
            "switch_to_last_episode_s": round(switch_s, 2),
            "slowest_step_jump_ms": round(slowest, 1),
        }
    finally:
        driver.quit()


def _wait(driver, script: str, timeout_s: float = 600):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(script)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--out", default="/tmp/view_size")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = write_large_page(args.episodes, out)
    result.update(browser_timings(out / "view.html"))
    result["machine"] = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    (out / "view_size.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
