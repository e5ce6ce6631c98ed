"""benchmarks/gpu/bench.py, the prepared accelerator call (issue #39): its dry run (``--tiny``)
takes every part's code path on the CPU and writes every report with every key; a part out of
time stops itself and says what it skipped; a part that hangs is killed; nothing starts when
no time is left."""

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu" / "bench.py"


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu-dry")
    _run(["--tiny", "--out", str(out)], timeout=900)
    return out, json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_dry_run_runs_every_part_and_writes_every_report(dry_run):
    out, result = dry_run
    status = {part: row["status"] for part, row in result["status"].items()}
    assert status == {
        "meta": "done",
        "env": "done",
        "ab": "done",
        "train": "done",
        # The dry run stops the curriculum after 3 s (a CPU compiles it for minutes).
        "rl2": status["rl2"],
    }
    assert status["rl2"] in ("done", "cut short")
    assert result["errors"] == []

    meta = result["meta"]
    for key in ("jax", "jaxlib", "backend", "devices", "nvidia_smi", "device_memory", "commit"):
        assert key in meta
    assert meta["backend"] == "cpu" and meta["devices"]

    env_rows = {(r["env"], r["mode"]): r for r in result["env"]}
    assert set(env_rows) == {
        ("moral_hazard", "vmap_step"),
        ("moral_hazard", "vecenv"),
        ("moral_hazard", "step_env"),
        ("consequence", "vmap_step"),
    }
    for r in env_rows.values():
        assert r["num_envs"] == 8 and r["steps"] == 4
        assert r["env_steps_per_s"] > 0 and r["compile_s"] > 0

    variants = {r["variant"]: r for r in result["ab"]}
    assert variants["default (CPU-tuned)"]["vs_default"] == 1.0
    assert variants["plain JAX (jax.random + select)"]["env_steps_per_s"] > 0
    conv = variants["conv3x3 gradient"]
    assert conv["xla_ms"] > 0 and conv["im2col_ms"] > 0

    (train,) = result["train"]
    assert (train["run"], train["env"], train["num_envs"]) == ("ippo_mlp", "moral_hazard", 8)
    assert train["env_steps_per_s"] > 0 and train["env_fraction"] > 0
    assert train["env_fraction"] == pytest.approx(
        train["env_steps_per_s"] / train["env_alone_steps_per_s"]
    )

    rl2 = [r for r in result["rl2"] if r["kind"] in ("start", "end")]
    assert [r["kind"] for r in rl2] == ["start", "end"]
    assert rl2[0]["GAMES"] == "open_harvest" and rl2[0]["steps_per_stage"] == 8

    targets = {t["what"]: t["verdict"] for t in result["targets"]}
    assert targets["open_cleanup vmap(env.step) at 4,096 envs"] == "not measured"
    assert targets["moral_hazard IPPO training end to end"] in ("met", "not met")

    text = (out / "results.md").read_text()
    for heading in (
        "## Parts",
        "## Targets",
        "## Env throughput",
        "## CPU-tuned paths",
        "## Training throughput",
        "## RL^2 curriculum",
    ):
        assert heading in text
    # What the device tool brings back: at most 8 plainly named files, no deeper than 2 folders.
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"rows.jsonl", "results.json", "results.md"}
    assert (out / "env_throughput.png").stat().st_size > 0
    assert len(files) <= 8
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", p.name) for p in files)


def _bench():
    """bench.py as a module, for calling its functions in this process."""
    spec = importlib.util.spec_from_file_location("gpu_bench", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


@pytest.mark.slow
def test_a_part_past_its_deadline_stops_and_says_what_it_skipped(tmp_path, monkeypatch):
    """The part's own code (``child``, what ``--child env`` runs) in this process: what is checked
    is the rows it writes, not the process around it (the dry run above runs every part as one)."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # child prepends the benchmark folders
    sigterm, modules = signal.getsignal(signal.SIGTERM), set(sys.modules)
    try:
        assert _bench().child("env", time.time() - 1, tmp_path, tiny=True) == 0
    finally:
        signal.signal(signal.SIGTERM, sigterm)  # child installs the part's stop handler
        for name in set(sys.modules) - modules:  # the benchmark helpers (run_all, timing)
            if str(ROOT / "benchmarks") in str(getattr(sys.modules[name], "__file__", "")):
                del sys.modules[name]
    rows = _rows(tmp_path)
    cut = [r for r in rows if r["kind"] == "cut"]
    assert sorted(r["skipped"] for r in cut) == [["consequence N=8"], ["moral_hazard N=8"]]
    assert not [r for r in rows if r["kind"] == "row"]
    assert rows[-1]["kind"] == "status" and rows[-1]["status"] == "cut short"


def test_no_part_starts_without_time_and_the_reports_still_come(tmp_path):
    _run(["--tiny", "--budget", "0", "--out", str(tmp_path)], timeout=120)
    result = json.loads((tmp_path / "results.json").read_text())
    assert {row["status"] for row in result["status"].values()} == {"not started: no time left"}
    assert "| env | not started: no time left |" in (tmp_path / "results.md").read_text()


def test_a_part_that_hangs_is_killed_at_its_limit():
    bench = _bench()
    start = time.time()
    problem = bench.run_child([sys.executable, "-c", "import time; time.sleep(60)"], 1.0)
    assert problem == "timed out (killed)" and time.time() - start < 30
    assert bench.run_child([sys.executable, "-c", "raise SystemExit(3)"], 30.0) == "exited 3"
    assert bench.run_child([sys.executable, "-c", "pass"], 30.0) is None


@pytest.mark.slow
def test_a_part_stopped_from_outside_stops_what_it_started(tmp_path):
    """The orchestrator's stop (SIGTERM to the part's group, :func:`stop_group` as
    :func:`run_child` sends it at a part's limit) reaches the RL^2 script's own process group
    too: nothing a part started outlives it on the machine."""
    bench = _bench()
    command = [
        sys.executable,
        str(SCRIPT),
        "--child",
        "rl2",
        "--tiny",
        "--out",
        str(tmp_path),
        "--deadline",
        str(time.time() + 120),
    ]
    part = subprocess.Popen(command, start_new_session=True)
    try:
        # Stopped as soon as the part has started the script (the tiny plan would stop it itself
        # a few seconds later).
        started = time.time() + 60
        while not _started(tmp_path) and part.poll() is None and time.time() < started:
            time.sleep(0.05)
        assert _started(tmp_path), "the RL^2 part never started its script"
        bench.stop_group(part, grace=5.0)
    finally:
        if part.poll() is None:
            os.killpg(part.pid, 9)
    # Ended by the stop (its handler's 128 + SIGTERM), not by its own clock.
    assert part.returncode == 128 + signal.SIGTERM
    (start,) = [r for r in _rows(tmp_path) if r["kind"] == "start"]
    deadline = time.time() + 10
    while _running_in_group(start["process_group"]) and time.time() < deadline:
        time.sleep(0.2)
    assert _running_in_group(start["process_group"]) == []


def _started(out: Path) -> bool:
    return (out / "rows.jsonl").exists() and '"kind": "start"' in (out / "rows.jsonl").read_text()


def _running_in_group(group: int) -> list[int]:
    """The processes of process group ``group`` that are not zombies (Linux /proc)."""
    running = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            running.append(int(stat.parent.name))
    return running
