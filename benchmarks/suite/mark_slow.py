"""Marks the suite's expensive tests ``slow`` from a measured cost report, so the fast tier
(``python -m pytest -n 2 -m "not slow"``) stays within its time while touching every test file.

    python -m pytest -n 2 --cost-json /tmp/cost.json       # measure (tests/cost_report.py)
    python benchmarks/suite/mark_slow.py /tmp/cost.json --fast-budget 280 [--write]

The rule: rank every test function (its parametrised cases added up) by wall time; keep the
cheapest function of each file in the fast tier, so every file is touched (the integration tests,
which need other projects installed, excepted); then keep the
cheapest of the rest while the fast tier's summed time stays within ``--fast-budget`` seconds
(two workers share it). Everything else gets ``@pytest.mark.slow``. Without ``--write`` it prints
what it would mark and the fast tier's expected time.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def function_of(nodeid: str) -> tuple[str, str]:
    """(file, function) of a test id: ``a/test_x.py::test_y[case]`` -> (a/test_x.py, test_y);
    a method keeps its class (``TestZ.test_y``)."""
    file, _, rest = nodeid.partition("::")
    return file, re.sub(r"\[.*\]$", "", rest).replace("::", ".")


def function_costs(tests: dict[str, dict]) -> dict[tuple[str, str], float]:
    costs: dict[tuple[str, str], float] = defaultdict(float)
    for nodeid, row in tests.items():
        costs[function_of(nodeid)] += row["wall_s"]
    return costs


def already_slow(path: Path) -> set[str]:
    """The test functions of a file that are marked slow already (or the whole file)."""
    tree = ast.parse(path.read_text())
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    return {f.name for f in functions if _marked_slow(f)}


def _marked_slow(function) -> bool:
    return any("mark.slow" in ast.unparse(d) for d in function.decorator_list)


def choose(costs: dict[tuple[str, str], float], fast_budget: float) -> tuple[set, float]:
    """The functions to mark slow, and the fast tier's summed time."""
    by_file: dict[str, list] = defaultdict(list)
    for (file, name), seconds in costs.items():
        by_file[file].append((seconds, name))
    fast, spent = set(), 0.0
    for file, rows in by_file.items():
        if file.startswith("tests/integration/"):
            continue  # other projects' code: in neither tier's promise (they may be absent)
        seconds, name = min(rows)
        fast.add((file, name))
        spent += seconds
    for (file, name), seconds in sorted(costs.items(), key=lambda kv: kv[1]):
        if (file, name) in fast:
            continue
        if spent + seconds > fast_budget:
            break
        fast.add((file, name))
        spent += seconds
    return set(costs) - fast, spent


def mark(path: Path, names: set[str]) -> int:
    """Adds ``@pytest.mark.slow`` above each named test function (methods: ``Class.name``)."""
    lines = path.read_text().splitlines(keepends=True)
    tree = ast.parse("".join(lines))
    inserts = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for child in node.body:
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    child.qualified = f"{node.name}.{child.name}"
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            qualified = getattr(node, "qualified", node.name)
            if qualified in names and not _marked_slow(node):
                first = min([d.lineno for d in node.decorator_list] + [node.lineno])
                indent = re.match(r"\s*", lines[first - 1]).group(0)
                inserts.append((first - 1, f"{indent}@pytest.mark.slow\n"))
    for index, line in sorted(inserts, reverse=True):
        lines.insert(index, line)
    text = "".join(lines)
    if inserts and not re.search(r"^import pytest$", text, flags=re.M):
        # Before the first import; `ruff check --fix` puts it in its block.
        first_import = min(
            n.lineno for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)
        )
        lines.insert(first_import - 1, "import pytest\n")
        text = "".join(lines)
    path.write_text(text)
    return len(inserts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cost_json", type=Path)
    parser.add_argument("--fast-budget", type=float, default=280.0, help="summed seconds")
    parser.add_argument("--write", action="store_true", help="add the marks to the test files")
    args = parser.parse_args()
    tests = json.loads(args.cost_json.read_text())["tests"]
    costs = function_costs(tests)
    slow, spent = choose(costs, args.fast_budget)
    total = sum(costs.values())
    print(f"fast tier: {len(costs) - len(slow)} of {len(costs)} test functions, {spent:.0f} s of")
    print(f"{total:.0f} s summed test time; marking slow: {len(slow)}")
    by_file: dict[str, set[str]] = defaultdict(set)
    for file, name in slow:
        by_file[file].add(name)
    added = 0
    for file, names in sorted(by_file.items()):
        path = ROOT / file
        new = names - already_slow(path)
        if new:
            print(f"  {file}: {', '.join(sorted(new))}")
        if args.write:
            added += mark(path, new)
    if args.write:
        print(f"added {added} mark(s)")


if __name__ == "__main__":
    main()
