"""Which programs a test run compiles more than once: every backend compile of the run's test
processes, with its persistent-cache key, whether the cache served it, its CPU time and the test
that asked for it. Results: the sixth round of benchmarks/results/suite_cost.md.

    COMPILE_KEYS_DIR=/tmp/keys PYTHONPATH=benchmarks/suite python -m pytest -n 2 -p compile_keys
    python benchmarks/suite/compile_keys.py /tmp/keys

As a pytest plugin (``-p compile_keys``) it wraps ``jax._src.compiler.compile_or_get_cached`` and
the two functions that log a cache hit or miss, in each process that loads it (both xdist
workers; not the commands and kernels tests start), and appends one line per compile to
``$COMPILE_KEYS_DIR/<pid>.tsv``. Those are JAX's private functions (as of jax 0.10.2): the plugin
refuses to load, naming the one missing, rather than record nothing. As a script it reads the
folder and prints what was compiled twice, what the cache served and what the compiles cost.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import threading
import time
from pathlib import Path

FIELDS = ("test", "program", "key", "hit", "cpu_s", "wall_s")
SIZES = (0.02, 0.05, 0.1, 0.3, 1.0, 3.0)  # compile CPU s: the histogram's bin edges


# ----------------------------------------------------------------------------- the plugin
def pytest_configure(config):
    import pytest  # loaded as a plugin only; the summary runs without pytest

    folder = os.environ.get("COMPILE_KEYS_DIR")
    if not folder:
        raise pytest.UsageError("compile_keys: set COMPILE_KEYS_DIR to the folder to write to")
    Path(folder).mkdir(parents=True, exist_ok=True)
    record_compiles(Path(folder) / f"{os.getpid()}.tsv")


def record_compiles(path: Path) -> None:
    """Appends a ``FIELDS`` line to ``path`` for every compile of this process from now on."""
    from jax._src import compiler  # a private module: the only place the cache key is seen

    for name in ("compile_or_get_cached", "log_persistent_cache_hit", "log_persistent_cache_miss"):
        if not callable(getattr(compiler, name, None)):
            raise RuntimeError(f"compile_keys: jax._src.compiler.{name} is gone in this JAX")
    out = open(path, "a", buffering=1)  # noqa: SIM115 (open for the process's life)
    seen = threading.local()
    log_hit, log_miss = compiler.log_persistent_cache_hit, compiler.log_persistent_cache_miss
    compile_or_get_cached = compiler.compile_or_get_cached

    def hit(module_name, cache_key):
        seen.last = (module_name, cache_key, 1)
        return log_hit(module_name, cache_key)

    def miss(module_name, cache_key):
        seen.last = (module_name, cache_key, 0)
        return log_miss(module_name, cache_key)

    def compiled(*args, **kwargs):
        seen.last = None
        cpu, wall = time.process_time(), time.perf_counter()
        try:
            return compile_or_get_cached(*args, **kwargs)
        finally:
            program, key, was_hit = seen.last or ("?", "?", -1)  # -1: the cache was off
            test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            out.write(f"{test}\t{program}\t{key}\t{was_hit}\t{cpu:.4f}\t{wall:.4f}\n")

    compiler.log_persistent_cache_hit, compiler.log_persistent_cache_miss = hit, miss
    compiler.compile_or_get_cached = compiled


# ----------------------------------------------------------------------------- the summary
def read(folder: Path) -> list[dict]:
    rows = []
    for path in sorted(folder.glob("*.tsv")):
        for line in path.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) != len(FIELDS):
                continue  # a line cut short by a crash
            row = dict(zip(FIELDS, parts, strict=True))
            row.update(pid=path.stem, hit=int(row["hit"]), cpu_s=float(row["cpu_s"]))
            row["file"] = row["test"].split("::")[0]
            rows.append(row)
    return rows


def summary(rows: list[dict]) -> list[str]:
    compiled = [r for r in rows if r["hit"] != 1]
    served = [r for r in rows if r["hit"] == 1]
    by_key = collections.defaultdict(list)
    for r in rows:
        by_key[r["key"]].append(r)
    twice = {k: v for k, v in by_key.items() if sum(r["hit"] != 1 for r in v) > 1}
    again = collections.Counter((r["pid"], r["key"]) for r in rows)
    lines = [
        f"{len(rows)} compile requests in {len({r['pid'] for r in rows})} processes, "
        f"{len(by_key)} distinct programs",
        f"compiled: {len(compiled)}, {sum(r['cpu_s'] for r in compiled):.1f} s of CPU",
        f"served by the persistent cache: {len(served)}, {sum(r['cpu_s'] for r in served):.1f} s",
        f"programs compiled more than once: {len(twice)}, "
        f"{sum(sum(r['cpu_s'] for r in v if r['hit'] != 1) for v in twice.values()):.1f} s",
        f"requests for a program its process had already compiled or loaded (traced and lowered "
        f"again): {sum(n - 1 for n in again.values() if n > 1)}",
        "compile CPU by program size:",
    ]
    edges = (0.0, *SIZES, float("inf"))
    for low, high in zip(edges, edges[1:], strict=False):
        sized = [r["cpu_s"] for r in compiled if low <= r["cpu_s"] < high]
        lines.append(f"  {low:g}-{high:g} s: {len(sized)} programs, {sum(sized):.1f} s")
    by_file = collections.defaultdict(lambda: [0, 0.0])
    for r in compiled:
        by_file[r["file"]][0] += 1
        by_file[r["file"]][1] += r["cpu_s"]
    lines.append("files that compiled most (CPU s, programs):")
    for file, (count, cpu) in sorted(by_file.items(), key=lambda kv: -kv[1][1])[:15]:
        lines.append(f"  {cpu:6.1f} {count:5d}  {file}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the COMPILE_KEYS_DIR of a run")
    args = parser.parse_args()
    rows = read(args.folder) if args.folder.is_dir() else []
    if not rows:
        sys.exit(f"compile_keys: no compile lines under {args.folder}")
    print("\n".join(summary(rows)))


if __name__ == "__main__":
    main()
