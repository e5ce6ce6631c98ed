"""Test-session setup shared by tests/ and the games' own tests."""

import ctypes.util
import os

# Tests compile far more programs than they run steps, so XLA's CPU backend compiles cheaply here:
# - LLVM's cheaper pipeline: the open_cleanup contract tests take 76 s instead of 106 s (cold);
# - no constant folding: XLA's folding pass evaluates every computation on constants (a constant
#   key's whole reset, a closure's configuration) in its slow interpreter, at compile time. A test
#   compiles a sweep whose every input is a constant (moral_hazard's Holmstrom grid: 25 s to
#   compile, 0.4 s without folding) where a user's program takes its inputs as arguments; the
#   moral_hazard policy tests take 90 s instead of 435 s (one loaded run each);
# - XLA:CPU's older loop emitters for fusions instead of its MLIR fusion emitters, whose
#   compile is the larger share of a big program's: the contract, open_cleanup env, PPO and
#   moral_hazard policy tests compile in 112 s instead of 186 s (273 s -> 204 s of test time,
#   one quiet run each, benchmarks/results/suite_cost.md), with the same results.
# Every exact comparison of the suite (jit against eager, resumes, replays, two processes against
# one) holds as it does with XLA's defaults. Set before JAX starts a backend, and inherited by
# the commands, kernels and processes the tests start; a flag already in XLA_FLAGS is left as it
# is. Users' runs and the benchmarks keep XLA's defaults.
_TEST_XLA_FLAGS = {
    "xla_backend_optimization_level": "0",
    "xla_llvm_disable_expensive_passes": "true",
    "xla_disable_hlo_passes": "constant_folding",
    "xla_cpu_use_fusion_emitters": "false",
}
_given = os.environ.get("XLA_FLAGS", "")
os.environ["XLA_FLAGS"] = " ".join(
    [_given, *(f"--{k}={v}" for k, v in _TEST_XLA_FLAGS.items() if f"--{k}" not in _given)]
).strip()

# jemalloc for the processes the run starts (the pytest-xdist workers, and the commands, kernels
# and training processes tests start), where Debian's libjemalloc2 is installed (`.ci/run`
# installs it): XLA's compiler allocates and frees vast numbers of small objects, and glibc's
# malloc is a tenth of the suite's CPU profile. A grid program compiled in 6.4 s instead of 8.3 s,
# and three expensive test files ran in 106-112 s instead of 123-126 s (one process each,
# alternating, benchmarks/results/suite_cost.md), with the same results. LD_PRELOAD is read when a
# process starts, so the process that reads this file (the controller under -n 2, the only one
# without it) keeps its allocator. A preload the user set is left as it is, and without the
# library nothing changes.
if not os.environ.get("LD_PRELOAD"):
    _jemalloc = ctypes.util.find_library("jemalloc")
    if _jemalloc:
        os.environ["LD_PRELOAD"] = _jemalloc

# One persistent compilation cache for the whole run: both pytest-xdist workers and every process
# a test starts (commands, notebook kernels, the GPU script's dry run, second training processes)
# read and write it through these variables, so a program compiled once anywhere in the run is a
# disk read everywhere else. Set before anything imports JAX, which reads them then (and XLA
# reads XLA_FLAGS when its first backend starts). Every program is cached, however quick its
# compile: most of the suite's programs compile in 0.03-0.5 s, and the same small ones recur in
# both workers and in every process a test starts (test_contract, test_seat_grammar and
# llm/test_cost in one process: 219 s with a 0.5 s threshold, 191 s with none, fresh caches).
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR", os.path.join(os.path.dirname(__file__), ".jax_cache")
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
# The same for the grid games' built pools (dilemmax/envs/pool_store.py): the first process of a
# run to make open_cleanup or open_harvest with some options builds their layouts and rules, and
# the other worker and every process a test starts read them. Here, not in the user's cache
# folder, so a fresh clone's run starts cold and a run never reads what another checkout built.
os.environ.setdefault("DILEMMAX_POOL_CACHE", os.path.join(os.path.dirname(__file__), ".pool_cache"))

# What each test and file costs in wall time and compiled programs, and the compile budget each
# file is held to (tests/cost_report.py).
pytest_plugins = ["tests.cost_report"]


def pytest_collection_modifyitems(config, items):
    """The longest test files run first, each file's tests still together and in their order.
    pytest-xdist hands out whole files in this order (``--dist loadfile``), so the long files
    start while the short ones fill the gaps after them, and no worker is left finishing a long
    file alone at the end of the run. A file's length is its recorded wall time
    (tests/compile_budget.json); a file with none yet goes first if it holds a test marked slow."""
    # Imported here: pytest imports the plugin itself first (and rewrites its asserts).
    from tests.cost_report import recorded_seconds

    seconds = recorded_seconds()
    slow_files = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}

    def length(item) -> float:
        file = item.nodeid.split("::")[0]
        return seconds.get(file, float("inf") if file in slow_files else 0.0)

    items.sort(key=lambda item: -length(item))
