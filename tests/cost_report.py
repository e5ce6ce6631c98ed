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
  (no other file's programs in memory, the most it can compile) plus a small slack
  (:func:`budget_for`). ``python -m pytest -n 2 --cost-budget-write`` measures and rewrites them
  in one run: each worker clears JAX's caches when it starts a new file, so every file compiles
  what it would alone.
"""

from __future__ import annotations

import functools
import json
import math
import os
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from dilemmax import compile_log

BUDGET_FILE = Path(__file__).with_name("compile_budget.json")
PROPERTY = "cost"  # the user_properties key a phase's figures travel under
# ...and the key a worker's collection figures travel under, with its first test's report.
COLLECTION = "collection cost"
PROGRAMS = "program costs"  # ...and a phase's figures by program name
SHARED = "fixture_programs"  # a phase's programs that session-scoped fixtures compiled
TOP = 20
TOP_PROGRAMS = 10  # program names printed (--cost-json holds them all)
FILES_PER_PROGRAM = 5  # the files that spent most on one program name, in --cost-json


class SpeedProbe:
    """How fast this machine computes while the suite runs: a fixed pure-Python workload's CPU
    time (its own thread's clock, so waiting for a core does not count), sampled every
    ``every_s`` seconds in the reporting process. A shared machine's speed drifts: the same
    two test files took 65 s and then 81 s back to back on an idle 2-core machine, so a run's
    wall time is read next to this figure, not alone."""

    def __init__(self, every_s: float = 20.0):
        self.every_s = every_s
        self.samples_ms: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="speed-probe", daemon=True)

    @staticmethod
    def measure_ms() -> float:
        """The median of three runs of the workload (about 15-30 ms each)."""
        runs = []
        for _ in range(3):
            start = time.thread_time()
            counts: dict[int, int] = {}
            for i in range(100_000):
                counts[i % 997] = counts.get(i % 997, 0) + i * 3
            runs.append((time.thread_time() - start) * 1000)
        return statistics.median(runs)

    def _run(self) -> None:
        while True:
            self.samples_ms.append(self.measure_ms())
            if self._stop.wait(self.every_s):
                return

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> dict[str, float]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        return self.summary()

    def summary(self) -> dict[str, float]:
        samples = sorted(self.samples_ms)
        if not samples:
            return {}
        return {
            "samples": len(samples),
            "median_ms": round(statistics.median(samples), 1),
            "min_ms": round(samples[0], 1),
            "max_ms": round(samples[-1], 1),
        }


def budget_for(programs: int) -> int:
    """A file's budget from its count run alone: 10% or 4 programs of slack, whichever is more,
    for the few programs whose shapes depend on timing or on Hypothesis's draws (derandomized
    on CI, drawn afresh elsewhere)."""
    return programs + max(4, math.ceil(0.10 * programs))


def recorded_seconds() -> dict[str, float]:
    """Each test file's wall time as its budget was last measured (none before a measurement)."""
    if not BUDGET_FILE.exists():
        return {}
    files = json.loads(BUDGET_FILE.read_text())["files"]
    return {name: row.get("wall_s", 0.0) for name, row in files.items()}


def _file_of(nodeid: str) -> str:
    return nodeid.split("::")[0]


# Their memoised functions are the entry points read, not compiled work: a test that put a
# plug-in on the path reads them again itself (reload_plugins, reload_seat_kinds).
REGISTRY_MODULES = ("dilemmax.envs.registry", "dilemmax.envs.seat_spec")


def forget_compiled_work() -> None:
    """As a fresh process would start: JAX's in-memory caches, and dilemmax's own memoised
    functions (pools, grids, jitted helpers), whose results would otherwise hide the programs
    that computing them again compiles."""
    import gc

    import jax

    jax.clear_caches()
    for obj in gc.get_objects():
        module = getattr(obj, "__module__", "") if callable(obj) else ""
        if (
            isinstance(obj, functools._lru_cache_wrapper)
            and module.startswith("dilemmax")
            and module not in REGISTRY_MODULES
        ):
            obj.cache_clear()


class CostRecorder:
    """The per-process side: tallies this process's compiles and its children's."""

    def __init__(self, isolate_files: bool):
        self.isolate_files = isolate_files
        self._file = None
        self.tally = compile_log.CompileTally()
        compile_log.listen(self.tally)
        self.by_program = compile_log.ProgramCosts()  # this process's own programs, by name
        compile_log.listen_by_program(self.by_program)
        self.children_dir = tempfile.mkdtemp(prefix="dilemmax-compiles-")
        os.environ[compile_log.ENV_VAR] = self.children_dir
        self.children = compile_log.DirectoryReader(self.children_dir, skip_pid=os.getpid())
        self._before = self.tally.copy()
        self._collection: compile_log.CompileTally | None = None
        self._shared = 0  # programs of session-scoped fixtures set up since the last report
        self._in_shared = False

    def pytest_collection_finish(self, session):
        # What importing the test modules compiled belongs to the run, not to the first test
        # this process runs (whose file would then be over a budget measured without it).
        now = self.tally.copy()
        self._collection = now.minus(self._before)
        self._collection.add(self.children.read())
        self._before = now
        self.by_program.take()  # collection's programs are the run's, counted in its row

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        # Measuring budgets: each file starts with no compiled program in memory, as alone.
        file = _file_of(item.nodeid)
        if self.isolate_files and file != self._file:
            forget_compiled_work()
        self._file = file

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        # A session (or package) fixture is set up by whichever file of the worker needs it
        # first, and which that is depends on how the workers were handed the files. Its
        # programs stay in that test's row (they cost its time) but count against no file's
        # budget, or a file measured after another had set the fixture up fails when it is the
        # first: open_harvest/test_options.py, measured 0, compiled the conftest's 39.
        outermost = fixturedef.scope in ("session", "package") and not self._in_shared
        if outermost:
            self._in_shared = True
        before = self.tally.programs
        try:
            yield
        finally:
            if outermost:
                self._shared += self.tally.programs - before
                self._in_shared = False

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        now = self.tally.copy()
        phase = now.minus(self._before)
        phase.add(self.children.read())
        self._before = now
        shared, self._shared = self._shared, 0
        figures = {"when": call.when, **phase.as_dict(), SHARED: shared}
        report.user_properties.append((PROPERTY, figures))
        report.user_properties.append((PROGRAMS, self.by_program.take()))
        if self._collection is not None:
            report.user_properties.append((COLLECTION, self._collection.as_dict()))
            self._collection = None


class CostReport:
    """The reporting side (the controller under xdist, the only process without it)."""

    def __init__(self, config):
        self.config = config
        self.tests: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.started = time.monotonic()
        self.over_budget: list[str] = []
        self.collection: dict[str, float] = defaultdict(float)  # every worker's, added up
        # program name -> file -> figures: which programs the time goes to, and where
        self.programs: dict[str, dict[str, dict[str, float]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(float))
        )
        # compile_budget.json's "strict": false reports a file over its budget without failing
        # the run, while budgets measured before a change of the measurement are re-measured.
        self.strict = True
        self.speed = SpeedProbe()  # sampling from the session's start to its end
        self.written: Path | None = None  # where --cost-json went

    def pytest_runtest_logreport(self, report):
        row = self.tests[report.nodeid]
        row["wall_s"] += report.duration
        for key, value in report.user_properties:
            if key == PROPERTY:
                for name, figure in value.items():
                    if name != "when":
                        row[name] += figure
            elif key == COLLECTION:
                for name, figure in value.items():
                    self.collection[name] += figure
            elif key == PROGRAMS:
                for program, figures in value.items():
                    row = self.programs[program][_file_of(report.nodeid)]
                    for name, figure in figures.items():
                        row[name] += figure

    def files(self) -> dict[str, dict[str, float]]:
        totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for nodeid, row in self.tests.items():
            file_row = totals[_file_of(nodeid)]
            file_row["tests"] += 1
            for name, figure in row.items():
                file_row[name] += figure
        return totals

    @functools.cache  # noqa: B019 (one report per run; read after it by the json and the summary)
    def program_rows(self) -> dict[str, dict]:
        """Each program name's figures over the run (the test processes' own programs; a
        subprocess's count in its test's row, not here), with the files that spent most on it,
        most expensive first."""
        rows = {}
        for program, by_file in self.programs.items():
            total: dict[str, float] = defaultdict(float)
            for figures in by_file.values():
                for name, figure in figures.items():
                    total[name] += figure
            ranked = sorted(by_file.items(), key=lambda kv: -_seconds(kv[1]))
            rows[program] = {
                **_rounded(total),
                "files": {f: _rounded(row) for f, row in ranked[:FILES_PER_PROGRAM]},
            }
        return dict(sorted(rows.items(), key=lambda kv: -_seconds(kv[1])))

    def write_budgets(self) -> None:
        """tests/compile_budget.json from this run's counts, files measured alone."""
        budgets = json.loads(BUDGET_FILE.read_text())["files"] if BUDGET_FILE.exists() else {}
        for name, row in self.files().items():
            budgets[name] = {
                "measured": _own_programs(row),
                "programs": budget_for(_own_programs(row)),
                "wall_s": round(row["wall_s"], 1),  # measured alone; orders the files (conftest)
            }
        document = {
            "about": "Programs each test file may compile; tests/cost_report.py holds files to "
            "them and python -m pytest -n 2 --cost-budget-write [FILES] rewrites them.",
            "strict": True,
            "files": dict(sorted(budgets.items())),
        }
        BUDGET_FILE.write_text(json.dumps(document, indent=1) + "\n")

    def check_budgets(self) -> None:
        """Every file is held to its recorded budget (a file run in part compiles no more than
        whole, so a partial run is held to the same number)."""
        if not BUDGET_FILE.exists() or self.config.getoption("cost_no_budget"):
            return
        document = json.loads(BUDGET_FILE.read_text())
        self.strict = document.get("strict", True)
        budgets = document["files"]
        for name, row in sorted(self.files().items()):
            budget = budgets.get(name)
            if budget is None:
                if _own_programs(row) > 0:
                    self.over_budget.append(
                        f"{name}: compiled {_own_programs(row)} program(s) and has no budget in "
                        f"{BUDGET_FILE.name} (python -m pytest --cost-budget-write {name})"
                    )
                continue
            if _own_programs(row) > budget["programs"]:
                self.over_budget.append(
                    f"{name}: compiled {_own_programs(row)} program(s), over its budget of "
                    f"{budget['programs']} ({BUDGET_FILE.name}): reuse the programs a fixture "
                    f"holds, or re-measure with python -m pytest --cost-budget-write {name}"
                )

    def pytest_sessionstart(self, session):
        self.speed.start()

    def pytest_sessionfinish(self, session, exitstatus):
        self.speed.stop()
        if self.config.getoption("cost_budget_write"):
            if self.config.option.keyword or self.config.option.markexpr:
                self.over_budget.append("budgets are measured on whole files: drop -k and -m")
            else:
                self.write_budgets()
        else:
            self.check_budgets()
        if self.over_budget and self.strict and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        path = self.config.getoption("cost_json")
        if path:
            text = json.dumps(self.as_json(), indent=1, sort_keys=True) + "\n"
            self.written = write_new(Path(path), text)

    def as_json(self) -> dict:
        return {
            "wall_s": round(time.monotonic() - self.started, 1),
            "totals": self.totals(),
            "collection": _rounded(self.collection),
            "files": {name: _rounded(row) for name, row in sorted(self.files().items())},
            # A list, most expensive first: the file is written with sorted keys.
            "programs": [
                {"name": name, **row, "files": [{"file": f, **r} for f, r in row["files"].items()]}
                for name, row in self.program_rows().items()
            ],
            "speed_probe": self.speed.summary(),
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
        write(f"{TOP_PROGRAMS} most expensive program names (of {len(self.programs)}):")
        write(f"{'cost s':>8} {'programs':>8} {'compile s':>9} {'trace s':>8}  name: its files")
        for program, row in list(self.program_rows().items())[:TOP_PROGRAMS]:
            where = ", ".join(f"{f} {int(r['programs'])}" for f, r in row["files"].items())
            write(
                f"{_seconds(row):8.1f} {int(row['programs']):8d} {row['compile_s']:9.1f} "
                f"{row['trace_s'] + row['lower_s']:8.1f}  {program}: {where}"
            )
        t = self.totals()
        write(
            f"all {t['tests']} tests: {t['wall_s']:.0f} s of test time, {int(t['programs'])} "
            f"programs compiled ({int(t['cache_hits'])} from the persistent cache), "
            f"{t['compile_s']:.0f} s compiling, {t['trace_s'] + t['lower_s']:.0f} s tracing and "
            f"lowering; collecting them compiled {int(self.collection['programs'])} more"
        )
        speed = self.speed.summary()
        if speed:
            write(
                f"machine speed: a fixed workload took {speed['median_ms']:.1f} ms of CPU "
                f"(median of {speed['samples']} samples, {speed['min_ms']:.1f}-"
                f"{speed['max_ms']:.1f}); compare two runs' wall times only at like figures"
            )
        if self.written is not None:
            write(f"cost report written to {self.written}")
        for line in self.over_budget:
            label = "COMPILE BUDGET" if self.strict else "COMPILE BUDGET (reported, not failing)"
            terminalreporter.write_line(f"{label}: {line}", red=True)


def _own_programs(row) -> int:
    """The programs a file's budget counts: its tests' and their module fixtures', not those of
    the session fixtures it happened to set up first."""
    return int(row["programs"] - row.get(SHARED, 0))


def _seconds(row) -> float:
    """Compiling, tracing and lowering: what a program costs before it runs."""
    return row.get("compile_s", 0.0) + row.get("trace_s", 0.0) + row.get("lower_s", 0.0)


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
    group.addoption(
        "--cost-budget-write",
        action="store_true",
        help="measure each file's programs as if run alone and rewrite tests/compile_budget.json",
    )


def pytest_configure(config):
    # Every process that runs tests records; only the process that reports (no xdist, or the
    # xdist controller) adds up and prints.
    is_xdist_worker = hasattr(config, "workerinput")
    runs_tests = is_xdist_worker or not _distributed(config)
    if runs_tests:
        recorder = CostRecorder(isolate_files=config.getoption("cost_budget_write"))
        config.pluginmanager.register(recorder, "dilemmax-cost-recorder")
    if not is_xdist_worker:
        _check_cost_json(config.getoption("cost_json"))
        config.pluginmanager.register(CostReport(config), "dilemmax-cost-report")


def _check_cost_json(path: str | None) -> None:
    """A --cost-json path whose folder is missing, or that names a file already there (another
    run's report), is refused before the run, not after it."""
    if not path:
        return
    if not Path(path).resolve().parent.is_dir():
        folder = Path(path).parent
        raise pytest.UsageError(f"--cost-json {path}: the folder {folder} does not exist")
    if Path(path).exists():
        raise pytest.UsageError(
            f"--cost-json {path}: the file exists; give a new path (no report replaces another)"
        )


def write_new(path: Path, text: str) -> Path:
    """Writes ``text`` to ``path`` if no file is there, else beside it (``name.<pid>.json``): a
    file that appeared while the suite ran is kept. Returns where it went."""
    for target in (path, path.with_name(f"{path.stem}.{os.getpid()}{path.suffix}")):
        try:
            with open(target, "x") as out:
                out.write(text)
            return target
        except FileExistsError:
            continue
    raise FileExistsError(f"--cost-json {path}: it and {target.name} both exist")


def _distributed(config) -> bool:
    numprocesses = getattr(config.option, "numprocesses", None)
    return bool(numprocesses) and getattr(config.option, "dist", "no") != "no"
