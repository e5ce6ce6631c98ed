"""kill -9 in the middle of a ``dilemmax play`` run, then ``--resume``: every model call is made
exactly once, and the results equal those of a run that was never interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from dilemmax.cli import main
from dilemmax.llm.conftest import moral_hazard_reply as reply
from dilemmax.llm.server import LocalChatServer
from dilemmax.llm.transcript import read_lines

ROOT = Path(__file__).resolve().parents[2]
HELD = 7  # the request that never gets its answer: the process is killed while it waits


def command(url: str, out: Path) -> list[str]:
    # One request in flight at a time, so when request HELD is held every earlier one has
    # returned and been written.
    return [
        "play", "moral_hazard", "--seats", "openai:tiny", "--episodes", "3", "--envs", "2",
        "--concurrency", "1", "--no-progress", "--base-url", url, "--out", str(out),
    ]  # fmt: skip


def calls_in(out: Path) -> list[dict]:
    rows, _ = read_lines(out / "transcript.jsonl")
    return [r for r in rows if r["type"] == "call"]


def test_kill_9_then_resume_calls_each_prompt_exactly_once(tmp_path):
    with LocalChatServer(reply) as server:
        assert main(command(server.base_url, tmp_path / "reference")) == 0
        expected = server.answered
    reference = calls_in(tmp_path / "reference")
    assert len(reference) == expected > HELD

    out = tmp_path / "run"
    with LocalChatServer(reply, faults={HELD: "hold"}) as server:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
        process = subprocess.Popen(
            [sys.executable, "-m", "dilemmax.cli", *command(server.base_url, out)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            assert server.held.wait(240), process.stderr.read().decode()[-2000:]
        finally:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(30)
        before = server.answered
        assert before == HELD == len(calls_in(out))  # nothing answered went unrecorded
        with open(out / "transcript.jsonl", "a") as handle:
            handle.write('{"type": "call", "key": "main|e2|n0')  # died mid-write
        assert main(command(server.base_url, out) + ["--resume"]) == 0
        made_on_resume = server.answered - before
    assert before + made_on_resume == expected  # no call lost, none made twice
    calls = calls_in(out)
    assert len(calls) == expected == len({c["key"] for c in calls})
    assert {c["key"] for c in calls} == {c["key"] for c in reference}
    assert {c["key"]: c["prompt_hash"] for c in calls} == {
        c["key"]: c["prompt_hash"] for c in reference
    }
    got = json.loads((out / "results.json").read_text())
    want = json.loads((tmp_path / "reference" / "results.json").read_text())
    assert got["summary"] == want["summary"] and got["episodes"] == want["episodes"]
    assert got["calls"]["openai:tiny"]["replayed"] == HELD
