"""The suite's own accounting (tests/cost_report.py, dilemmax.compile_log) and its two tiers.

- A compile is counted once per program, in the process that compiles it and in a process a test
  starts (``DILEMMAX_COMPILE_LOG``); a program already in memory is not counted again.
- A file over its compile budget fails the run with a line naming it; budgets carry their slack.
- The processes a run starts (its workers, and the processes tests start) allocate memory through
  jemalloc where it is installed (conftest.py).
- The fast tier (``-m "not slow"``, CONTRIBUTING.md) touches every test file: each holds at least
  one test that is not marked slow, read from the source with :mod:`ast`.
"""

from __future__ import annotations

import ast
import ctypes.util
import os
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path

import jax
import numpy as np
import pytest

from dilemmax import compile_log
from tests import cost_report

ROOT = Path(__file__).resolve().parents[1]


class NoOptions:
    """A pytest config whose every option is off."""

    def getoption(self, name):
        return False


def report_phase(recorder, when: str, nodeid: str = "a/test_x.py::t1"):
    """A test report of ``nodeid`` as the recorder's ``makereport`` hook leaves it after one
    phase (its ``user_properties`` carry the phase's figures)."""
    report = type("Report", (), {"nodeid": nodeid, "duration": 0.1, "user_properties": []})
    outcome = type("Outcome", (), {"get_result": lambda self: report})()
    phase = recorder.pytest_runtest_makereport(item=None, call=type("Call", (), {"when": when}))
    next(phase)
    with pytest.raises(StopIteration):
        phase.send(outcome)
    return report


def test_a_new_program_counts_once_and_a_program_in_memory_not_again():
    three, four = np.ones(3, np.float32), np.ones(4, np.float32)
    tally = compile_log.CompileTally()
    compile_log.listen(tally)
    # A function no other test compiles (its constant is this test's own), called twice.
    fresh = jax.jit(lambda x: x * 3.25 + 1.0)
    fresh(three).block_until_ready()
    assert tally.programs == 1 and tally.compile_s > 0 and tally.trace_s > 0
    fresh(three).block_until_ready()
    assert tally.programs == 1  # served from memory: no compile
    fresh(four).block_until_ready()
    assert tally.programs == 2  # another shape is another program


@pytest.mark.slow
def test_the_programs_a_subprocess_compiles_are_read_from_its_log(tmp_path):
    code = """
        import jax, jax.numpy as jnp
        import dilemmax  # starts the log: DILEMMAX_COMPILE_LOG is set
        for n in (2, 3, 5):
            jax.jit(lambda x: x - 0.75)(jnp.ones(n)).block_until_ready()
        print(jax.jit(lambda x: x - 0.75)(jnp.ones(2)))  # another function object: compiled too
    """
    env = {**os.environ, compile_log.ENV_VAR: str(tmp_path)}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    reader = compile_log.DirectoryReader(tmp_path, skip_pid=os.getpid())
    first = reader.read()
    assert first.programs >= 4  # dilemmax's import compiles nothing of its own beyond these
    assert reader.read().programs == 0  # each line is read once


def test_a_line_still_being_written_waits_for_the_next_read(tmp_path):
    log = tmp_path / "123.log"
    log.write_text(f"{compile_log.PROGRAM_EVENT} 0.5\n{compile_log.PROGRAM_EVENT} 0.2")
    reader = compile_log.DirectoryReader(tmp_path)
    assert reader.read().programs == 1
    with open(log, "a") as file:
        file.write("5\n/jax/compilation_cache/cache_hits 0.0\ngarbage line\n")
    second = reader.read()
    assert (second.programs, second.cache_hits) == (1, 1)
    assert abs(second.compile_s - 0.25) < 1e-9


def test_a_budget_leaves_a_small_slack():
    assert cost_report.budget_for(0) == 4
    assert cost_report.budget_for(10) == 14
    assert cost_report.budget_for(100) == 110
    assert cost_report.budget_for(101) == 112


def test_a_file_over_its_budget_is_named_with_its_count(tmp_path, monkeypatch):
    budgets = tmp_path / "compile_budget.json"
    budgets.write_text('{"files": {"a/test_x.py": {"measured": 3, "programs": 5}}}')
    monkeypatch.setattr(cost_report, "BUDGET_FILE", budgets)

    report = cost_report.CostReport(NoOptions())
    for nodeid, programs in (("a/test_x.py::t1", 4), ("a/test_x.py::t2", 2), ("b/test_y.py::t", 0)):
        report.tests[nodeid]["programs"] = programs
    report.tests["c/test_new.py::t"]["programs"] = 1
    report.check_budgets()
    over, unbudgeted = report.over_budget
    assert over.startswith("a/test_x.py: compiled 6 program(s), over its budget of 5")
    assert unbudgeted.startswith("c/test_new.py: compiled 1 program(s) and has no budget")
    assert report.strict  # a run with a file over its budget fails

    budgets.write_text('{"strict": false, "files": {"a/test_x.py": {"programs": 5}}}')
    lenient = cost_report.CostReport(NoOptions())
    lenient.tests["a/test_x.py::t1"]["programs"] = 6
    lenient.check_budgets()
    assert len(lenient.over_budget) == 1 and not lenient.strict  # reported, not failing


def test_what_collecting_compiles_is_the_run_s_not_the_first_test_s(monkeypatch):
    """A test module that compiles at import (a constant built with jnp) charges the collection
    row, so the first file a worker runs is not pushed over a budget measured alone."""
    monkeypatch.setenv(compile_log.ENV_VAR, "")  # the recorder points it at its folder
    recorder = cost_report.CostRecorder(isolate_files=False)
    jax.jit(lambda x: x * 5.5 + 2.0)(np.ones(3, np.float32)).block_until_ready()  # "collecting"
    recorder.pytest_collection_finish(session=None)
    # The first test's report carries the collection row, the next none.
    first, second = report_phase(recorder, "call"), report_phase(recorder, "call")
    report = cost_report.CostReport(NoOptions())
    report.pytest_runtest_logreport(first)
    report.pytest_runtest_logreport(second)
    assert report.tests["a/test_x.py::t1"]["programs"] == 0
    assert report.collection["programs"] == 1
    assert [key for key, _ in first.user_properties].count(cost_report.COLLECTION) == 1
    assert cost_report.COLLECTION not in dict(second.user_properties)


def test_a_session_fixture_s_programs_count_against_no_file_s_budget(tmp_path, monkeypatch):
    """Whichever file of a worker first needs a session fixture sets it up, and that depends on
    how the files were handed out: its programs stay in the test's row, for the time, but out of
    the file's budget. A module fixture's programs are the file's own."""
    budgets = tmp_path / "compile_budget.json"
    budgets.write_text('{"files": {"a/test_x.py": {"measured": 1, "programs": 1}}}')
    monkeypatch.setattr(cost_report, "BUDGET_FILE", budgets)
    monkeypatch.setenv(compile_log.ENV_VAR, "")  # the recorder points it at its folder
    recorder = cost_report.CostRecorder(isolate_files=False)

    def set_up(scope, program):
        fixture = recorder.pytest_fixture_setup(
            fixturedef=type("FixtureDef", (), {"scope": scope}), request=None
        )
        next(fixture)
        program()  # a session fixture setting up another one counts once
        with pytest.raises(StopIteration):
            next(fixture)

    ones = np.ones(3, np.float32)
    inner = lambda: jax.jit(lambda x: x * 7.25 - 1.0)(ones).block_until_ready()
    set_up("session", lambda: (jax.jit(lambda x: x * 6.5 + 3.0)(ones), set_up("session", inner)))
    set_up("module", lambda: jax.jit(lambda x: x * 4.75 + 1.0)(ones).block_until_ready())
    report = cost_report.CostReport(NoOptions())
    report.pytest_runtest_logreport(report_phase(recorder, "setup"))
    row = report.tests["a/test_x.py::t1"]
    assert (row["programs"], row[cost_report.SHARED]) == (3, 2)
    report.check_budgets()
    assert report.over_budget == []  # 1 program of its own, within its budget of 1


def test_each_program_s_cost_is_kept_under_its_function_s_name():
    costs = compile_log.ProgramCosts()
    compile_log.listen_by_program(costs)
    costs.take()  # what other tests left pending

    def scaled_by_six_and_a_quarter(x):  # a name and a constant no other test compiles
        return x * 6.25 - 1.0

    jax.jit(scaled_by_six_and_a_quarter)(np.ones(3, np.float32)).block_until_ready()
    rows = costs.take()
    row = rows["scaled_by_six_and_a_quarter"]  # tracing's "name" and compiling's "jit(name)"
    assert row["programs"] == 1 and row["compile_s"] > 0 and row["trace_s"] > 0
    assert row["lower_s"] > 0
    assert costs.take() == {}  # each event is taken once
    assert compile_log.program_name("jit(step)") == "step"
    assert compile_log.program_name("<lambda>") == "<lambda>"
    assert compile_log.program_name("") == "?"


def test_the_report_ranks_program_names_and_the_files_that_spent_most_on_them():
    report = cost_report.CostReport(NoOptions())
    phases = [  # (test, {name: figures}) as the workers' reports carry them
        ("a/test_x.py::t1", {"step": {"programs": 2, "compile_s": 3.0, "trace_s": 1.0}}),
        ("a/test_x.py::t2", {"step": {"programs": 1, "compile_s": 1.0}, "add": {"programs": 1}}),
        ("b/test_y.py::t", {"step": {"programs": 1, "compile_s": 6.0, "lower_s": 0.5}}),
        ("b/test_y.py::u", {"fn": {"programs": 3, "compile_s": 2.0}}),
    ]
    for nodeid, by_name in phases:
        properties = [(cost_report.PROGRAMS, by_name)]
        report.pytest_runtest_logreport(
            type("Report", (), {"nodeid": nodeid, "duration": 0.1, "user_properties": properties})
        )
    rows = report.program_rows()
    assert list(rows) == ["step", "fn", "add"]  # by compile + trace + lower seconds
    assert rows["step"]["programs"] == 4 and rows["step"]["compile_s"] == 10.0
    assert list(rows["step"]["files"]) == ["b/test_y.py", "a/test_x.py"]  # 6.5 s before 5 s
    assert rows["step"]["files"]["a/test_x.py"]["programs"] == 3
    written = report.as_json()["programs"]  # a list, so sorted keys keep the ranking
    assert [row["name"] for row in written] == ["step", "fn", "add"]
    assert [f["file"] for f in written[0]["files"]] == ["b/test_y.py", "a/test_x.py"]


def test_the_speed_probe_samples_until_stopped_and_summarises():
    probe = cost_report.SpeedProbe(every_s=0.01)
    assert probe.stop() == {}  # never started: nothing sampled, nothing to wait for
    probe = cost_report.SpeedProbe(every_s=0.01)
    probe.start()
    deadline = time.monotonic() + 30
    while len(probe.samples_ms) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    summary = probe.stop()
    assert not probe._thread.is_alive()
    taken = len(probe.samples_ms)
    time.sleep(0.05)
    assert len(probe.samples_ms) == taken  # stopped means no more samples
    assert summary["samples"] == taken >= 3
    assert 0 < summary["min_ms"] <= summary["median_ms"] <= summary["max_ms"]


def test_the_results_page_section_shows_program_names_and_speed_when_the_report_has_them():
    import importlib.util

    spec = importlib.util.spec_from_file_location("report", ROOT / "benchmarks/suite/report.py")
    page = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(page)
    row = {"wall_s": 2.0, "programs": 3, "cache_hits": 1, "compile_s": 1.5, "trace_s": 0.25}
    row["lower_s"] = 0.25
    old = {"wall_s": 10.0, "totals": {**row, "tests": 1}, "tests": {"a.py::t": row}}
    old["files"] = {"a.py": row}
    assert "program names" not in page.report(old, "old") and "Speed" not in page.report(old, "o")
    new = {**old, "speed_probe": {"samples": 4, "median_ms": 20.0, "min_ms": 15.0, "max_ms": 30.0}}
    new["programs"] = [
        {"name": "step", "programs": 3, "compile_s": 1.5, "trace_s": 0.25, "lower_s": 0.25,
         "files": [{"file": "a.py", "programs": 3}]},
    ]  # fmt: skip
    text = page.report(new, "new")
    assert "Speed probe: median 20.0 ms of CPU for the fixed workload (4 samples, 15.0-30.0)" in (
        text
    )
    assert "| 2.0 | 3 | 1.5 | 0.5 | `step` | `a.py` (3) |" in text


def test_a_cost_json_path_without_its_folder_is_refused_before_the_run(tmp_path):
    with pytest.raises(pytest.UsageError, match="does not exist"):
        cost_report._check_cost_json(str(tmp_path / "missing" / "cost.json"))
    cost_report._check_cost_json(str(tmp_path / "cost.json"))  # its folder exists
    cost_report._check_cost_json(None)


def test_a_cost_json_path_that_holds_a_report_is_refused_and_left_as_it_was(tmp_path):
    earlier = tmp_path / "cost.json"
    earlier.write_text('{"earlier": 1}')
    with pytest.raises(pytest.UsageError, match="the file exists"):
        cost_report._check_cost_json(str(earlier))
    # One that appears while the suite runs is kept too: the report goes beside it.
    written = cost_report.write_new(earlier, '{"new": 1}')
    assert earlier.read_text() == '{"earlier": 1}'
    assert written != earlier and written.parent == tmp_path and written.read_text() == '{"new": 1}'
    fresh = cost_report.write_new(tmp_path / "other.json", "{}")
    assert fresh == tmp_path / "other.json" and fresh.read_text() == "{}"


@pytest.mark.parametrize("content", [None, "not json", '{"a": 1}', "[1, 2]"])
def test_the_results_page_refuses_what_is_not_a_report_in_one_line(tmp_path, content):
    path = tmp_path / "cost.json"
    if content is not None:
        path.write_text(content)
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/suite/report.py"), str(path), "--title", "x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert str(path) in done.stderr.strip().splitlines()[-1]


def _is_slow(decorators) -> bool:
    return any("mark.slow" in ast.unparse(d) for d in decorators)


def _tests_of(body, slow: bool):
    """(name, marked slow) for each test function of a module's or a class's body."""
    for node in body:
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            yield from _tests_of(node.body, slow or _is_slow(node.decorator_list))
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name[:4] == "test":
            yield node.name, slow or _is_slow(node.decorator_list)


def _test_files() -> list[Path]:
    files = [*ROOT.glob("tests/**/test_*.py"), *ROOT.glob("dilemmax/**/test_*.py")]
    return sorted(p for p in files if "/integration/" not in p.as_posix())


@pytest.mark.slow
def test_every_test_file_has_a_test_in_the_fast_tier():
    """``-m "not slow"`` runs at least one test of every file (integration files, which need
    other projects installed, are in neither question)."""
    only_slow = []
    for path in _test_files():
        tree = ast.parse(path.read_text())
        module_slow = any(
            isinstance(node, ast.Assign)
            and any(getattr(t, "id", "") == "pytestmark" for t in node.targets)
            and "mark.slow" in ast.unparse(node.value)
            for node in tree.body
        )
        tests = list(_tests_of(tree.body, slow=False))
        fast = [name for name, slow in tests if not slow]
        if tests and (module_slow or not fast):  # a file of helpers holds no test
            only_slow.append(path.relative_to(ROOT).as_posix())
    assert not only_slow, f"files with no test outside the slow tier: {only_slow}"


@pytest.mark.slow  # two pytest-xdist workers start: about 5 s
def test_a_crashed_worker_fails_the_run_and_nothing_waits_for_it(tmp_path):
    """With the suite's own options (whole files per worker), a worker killed by a segfault is
    one failed test naming it, the other worker runs every other file, and the run ends; with
    pytest-xdist's default worker restart the run waited forever."""
    addopts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    options = addopts["ini_options"]["addopts"].split()
    (tmp_path / "test_crash.py").write_text(
        "import os, signal\n\ndef test_crash():\n    os.kill(os.getpid(), signal.SIGSEGV)\n\n"
        "def test_after_the_crash():\n    pass\n"
    )
    for name in "bcd":
        (tmp_path / f"test_{name}.py").write_text(f"def test_{name}():\n    pass\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-q", "-p", "no:cacheprovider", *options,
         "-c", os.devnull, "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:]
    assert "crashed while running 'test_crash.py::test_crash'" in done.stdout
    assert "3 passed" in done.stdout  # every other file ran


def test_a_worker_allocates_through_jemalloc_where_it_is_installed():
    """conftest.py preloads jemalloc into the processes the run starts: under ``-n 2`` this test
    runs in one of them, a pytest-xdist worker."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        pytest.skip("only a process the run started has the preload (run with -n 2)")
    if ctypes.util.find_library("jemalloc") is None:
        pytest.skip("libjemalloc2 is not installed (.ci/run installs it)")
    preload = os.environ.get("LD_PRELOAD", "")
    if "jemalloc" not in preload:
        pytest.skip(f"the run was started with a preload of its own: {preload}")
    assert "libjemalloc" in Path("/proc/self/maps").read_text()
