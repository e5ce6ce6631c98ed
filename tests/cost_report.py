"""The suite's cost report: what each test and each file costs in wall time and in compiled
programs, and the compile budget every test file is held to.

Loaded by the root conftest.py for every run (with or without pytest-xdist):

- each test phase (setup, call, teardown) records its programs compiled, persistent-cache hits
  and seconds compiling, tracing and lowering (:mod:`dilemmax.compile_log`), its own process's and
  those of the processes it started (commands, notebook kernels, a second training process:
  ``DILEMMAX_COMPILE_LOG`` points them at a per-worker folder);
- the phases travel with the test reports (``user_properties``), so under ``-n 2`` the controller
  adds up both workers;
- the end of the run prints the 20 most expensive tests and files and the run's totals, and
  ``--cost-json PATH`` writes every test's and file's row (benchmarks/results/suite_cost_*.json);
- **the compile budget**: tests/compile_budget.json holds, per test file, the programs it may
  compile. A file that ran whole and compiled more fails the run, naming the file, its count and
  its budget: a new test that compiles again what a fixture already holds shows up in review as a
  count, not as a slower CI that nobody can attribute. A budget is the file's count run alone
  (no other file's programs in memory, the most it can compile) plus a small slack;
  ``benchmarks/suite/budgets.py`` measures and rewrites them.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pytest

from dilemmax import compile_log

BUDGET_FILE = Path(__file__).with_name("compile_budget.json")
PROPERTY = "cost"  # the user_properties key a phase's figures travel under
TOP = 20


def _file_of(nodeid: str) -> str:
    return nodeid.split("::")[0]


class CostRecorder:
    """The per-process side: tallies this process's compiles and its children's."""

    def __init__(self):
        self.tally = compile_log.CompileTally()
        compile_log.listen(self.tally)
        self.children_dir = tempfile.mkdtemp(prefix="dilemmax-compiles-")
        os.environ[compile_log.ENV_VAR] = self.children_dir
        self.children = compile_log.DirectoryReader(self.children_dir, skip_pid=os.getpid())
        self._before = self.tally.copy()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        now = self.tally.copy()
        phase = now.minus(self._before)
        phase.add(self.children.read())
        self._before = now
        report.user_properties.append((PROPERTY, {"when": call.when, **phase.as_dict()}))


class CostReport:
    """The reporting side (the controller under xdist, the only process without it)."""

    def __init__(self, config):
        self.config = config
        self.tests: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.started = time.monotonic()
        self.over_budget: list[str] = []

    def pytest_runtest_logreport(self, report):
        row = self.tests[report.nodeid]
        row["wall_s"] += report.duration
        for key, value in report.user_properties:
            if key == PROPERTY:
                for name, figure in value.items():
                    if name != "when":
                        row[name] += figure

    def files(self) -> dict[str, dict[str, float]]:
        totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for nodeid, row in self.tests.items():
            file_row = totals[_file_of(nodeid)]
            file_row["tests"] += 1
            for name, figure in row.items():
                file_row[name] += figure
        return totals

    def check_budgets(self, session) -> None:
        """A file run whole (every test it holds collected) is held to its recorded budget."""
        if not BUDGET_FILE.exists() or self.config.getoption("cost_no_budget"):
            return
        budgets = json.loads(BUDGET_FILE.read_text())["files"]
        collected = defaultdict(int)
        for item in session.items:
            collected[_file_of(item.nodeid)] += 1
        for name, row in sorted(self.files().items()):
            budget = budgets.get(name)
            if budget is None:
                if row["programs"] > 0:
                    self.over_budget.append(
                        f"{name}: compiled {int(row['programs'])} program(s) and has no budget in "
                        f"{BUDGET_FILE.name} (python benchmarks/suite/budgets.py {name})"
                    )
                continue
            if row["programs"] > budget["programs"]:
                self.over_budget.append(
                    f"{name}: compiled {int(row['programs'])} program(s), over its budget of "
                    f"{budget['programs']} ({BUDGET_FILE.name}): reuse the programs a fixture "
                    f"holds, or re-measure with python benchmarks/suite/budgets.py {name}"
                )

    def pytest_sessionfinish(self, session, exitstatus):
        self.check_budgets(session)
        if self.over_budget and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        path = self.config.getoption("cost_json")
        if path:
            Path(path).write_text(json.dumps(self.as_json(), indent=1, sort_keys=True) + "\n")

    def as_json(self) -> dict:
        return {
            "wall_s": round(time.monotonic() - self.started, 1),
            "totals": self.totals(),
            "files": {name: _rounded(row) for name, row in sorted(self.files().items())},
            "tests": {nodeid: _rounded(row) for nodeid, row in sorted(self.tests.items())},
        }

    def totals(self) -> dict[str, float]:
        total: dict[str, float] = defaultdict(float)
        for row in self.tests.values():
            for name, figure in row.items():
                total[name] += figure
        total["tests"] = len(self.tests)
        return _rounded(total)

    def pytest_terminal_summary(self, terminalreporter):
        write = terminalreporter.write_line
        if not self.tests:
            return
        terminalreporter.section("cost report: the most expensive tests and files")
        header = f"{'wall s':>8} {'programs':>8} {'hits':>6} {'compile s':>9} {'trace s':>8}  "
        for title, rows in (("tests", self.tests), ("files", self.files())):
            write(f"{TOP} most expensive {title} (of {len(rows)}):")
            write(header + title[:-1])
            ranked = sorted(rows.items(), key=lambda kv: -kv[1]["wall_s"])[:TOP]
            for name, row in ranked:
                write(
                    f"{row['wall_s']:8.1f} {int(row['programs']):8d} {int(row['cache_hits']):6d} "
                    f"{row['compile_s']:9.1f} {row['trace_s'] + row['lower_s']:8.1f}  {name}"
                )
        t = self.totals()
        write(
            f"all {t['tests']} tests: {t['wall_s']:.0f} s of test time, {int(t['programs'])} "
            f"programs compiled ({int(t['cache_hits'])} from the persistent cache), "
            f"{t['compile_s']:.0f} s compiling, {t['trace_s'] + t['lower_s']:.0f} s tracing and "
            f"lowering"
        )
        for line in self.over_budget:
            terminalreporter.write_line(f"COMPILE BUDGET: {line}", red=True)


def _rounded(row) -> dict[str, float]:
    return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()}


def pytest_addoption(parser):
    group = parser.getgroup("cost report")
    group.addoption("--cost-json", default=None, help="write every test's and file's cost here")
    group.addoption(
        "--cost-no-budget",
        action="store_true",
        help="report costs without holding files to tests/compile_budget.json",
    )


def pytest_configure(config):
    # Every process that runs tests records; only the process that reports (no xdist, or the
    # xdist controller) adds up and prints.
    is_xdist_worker = hasattr(config, "workerinput")
    runs_tests = is_xdist_worker or not _distributed(config)
    if runs_tests:
        config.pluginmanager.register(CostRecorder(), "dilemmax-cost-recorder")
    if not is_xdist_worker:
        config.pluginmanager.register(CostReport(config), "dilemmax-cost-report")


def _distributed(config) -> bool:
    numprocesses = getattr(config.option, "numprocesses", None)
    return bool(numprocesses) and getattr(config.option, "dist", "no") != "no"
