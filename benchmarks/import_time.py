"""What starting dilemmax costs a fresh process: ``import dilemmax`` and ``dilemmax --help``, in
wall and CPU seconds, and the modules whose own import time is largest (``python -X importtime``).
Every command, notebook kernel, test worker and test subprocess pays this once. Results:
benchmarks/results/import_time.md.

    python benchmarks/import_time.py [--runs 5] [--python PATH ...]

``--python`` names the interpreters to compare (say two virtual environments that differ in one
package); they are measured in turn, alternating, ``--runs`` times each. Figures are medians.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time

CASES = {
    "import dilemmax": ["-c", "import dilemmax"],
    "dilemmax --help": ["-m", "dilemmax", "--help"],
}
TOP_MODULES = 8


def timed(python: str, args: list[str]) -> tuple[float, float]:
    """(wall s, CPU s of the child) of one fresh ``python args`` run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([python, *args], check=True, capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def slowest_modules(python: str) -> list[tuple[float, str]]:
    """(own import ms, module) of the ``TOP_MODULES`` slowest modules ``import dilemmax`` loads."""
    done = subprocess.run(
        [python, "-X", "importtime", "-c", "import dilemmax"], capture_output=True, text=True
    )
    rows = []
    for line in done.stderr.splitlines():
        found = re.match(r"import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)", line)
        if found:
            rows.append((int(found.group(1)) / 1000, found.group(2)))
    return sorted(rows, reverse=True)[:TOP_MODULES]


def interpreter_problem(python: str) -> str | None:
    """Why ``python`` cannot be measured (not runnable, or no dilemmax there), else None."""
    try:
        done = subprocess.run([python, "-c", "import dilemmax"], capture_output=True, text=True)
    except OSError as err:
        return f"cannot run it ({err.strerror})"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return f"import dilemmax fails there ({last})"
    return None


def package_version(python: str, name: str) -> str:
    code = f"import importlib.metadata as m; print(m.version({name!r}))"
    done = subprocess.run([python, "-c", code], capture_output=True, text=True)
    return done.stdout.strip() or "absent"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--python", nargs="+", default=[sys.executable])
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: give 1 or more")
    for python in args.python:
        problem = interpreter_problem(python)
        if problem:
            parser.error(f"--python {python}: {problem}")
    print(f"load {os.getloadavg()[0]:.2f}; medians of {args.runs} fresh processes")
    times = {(py, case): [] for py in args.python for case in CASES}
    for _ in range(args.runs):
        for python in args.python:  # alternate the interpreters within each run
            for case, argv in CASES.items():
                times[python, case].append(timed(python, argv))
    print("| interpreter | numpy | ml_dtypes | jax | case | wall s | CPU s |")
    print("| --- | --- | --- | --- | --- | ---: | ---: |")
    for python in args.python:
        versions = " | ".join(package_version(python, n) for n in ("numpy", "ml_dtypes", "jax"))
        for case in CASES:
            walls, cpus = zip(*times[python, case], strict=True)
            print(
                f"| {python} | {versions} | {case} | {statistics.median(walls):.2f} | "
                f"{statistics.median(cpus):.2f} |"
            )
    for python in args.python:
        print(f"\nslowest modules of `import dilemmax` under {python} (own ms):")
        for ms, module in slowest_modules(python):
            print(f"  {ms:7.1f}  {module}")


if __name__ == "__main__":
    main()
