"""Which way imports run (docs/architecture.md, "Layers"): no cycle between dilemmax's packages,
lower layers never importing higher ones.

Read from the source with :mod:`ast`, nothing imported (no jax): every import statement of every
non-test module counts, those inside functions and ``if TYPE_CHECKING`` blocks too, since an
import that runs late still ties two packages together and hides a cycle from import time. A
package is the first name under ``dilemmax/``; a top-level module (``cli.py``, ``errors.py``) is
a package of its own and ``dilemmax/__init__.py`` is the package root (``import dilemmax``).
Naming a module in a string (``cli.py`` dispatching to a command's module by name) is no import.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "dilemmax"
PACKAGE_ROOT = "dilemmax"  # what `import dilemmax` and `from dilemmax import make` reach

# Lowest first. A package may import only packages of lower layers (and itself): siblings in one
# layer stay independent of each other. docs/architecture.md's chain is
#   envs <- wrappers <- agents <- train / llm <- redteam / finetune / scenarios <- cli;
# the papers' experiments (built on redteam) and the Inspect AI tasks (built on the experiments)
# sit between the top of that chain and the command line.
# around it sit the error type every layer raises, the statistics every layer reports with, the
# run-folder lock of the writers, the root
# that re-exports dilemmax.make, and the helpers every command shares.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "xla_defaults", "compile_log", "statistics", "cache_home"),
    ("envs", "runlock"),
    (PACKAGE_ROOT,),
    ("wrappers", "commandline"),
    ("agents",),
    ("train", "llm"),
    ("redteam", "finetune", "scenarios", "view"),
    ("experiments",),
    ("evals",),
    ("cli",),
    ("__main__",),  # `python -m dilemmax`: the command line
)
RANK = {package: rank for rank, layer in enumerate(LAYERS) for package in layer}


@dataclass(frozen=True)
class Import:
    """One import statement that reaches another dilemmax package."""

    source: str  # the importing package
    target: str  # the imported package
    path: str  # the importing file, relative to the repository
    line: int  # its line number
    statement: str  # the statement as written

    def __str__(self) -> str:
        return f"{self.path}:{self.line} ({self.source} -> {self.target}): {self.statement}"


def _is_test(path: Path) -> bool:
    return path.name.startswith("test_") or path.name == "conftest.py" or "tests" in path.parts


def _module_name(path: Path) -> list[str]:
    """``dilemmax/envs/base.py`` -> ["dilemmax", "envs", "base"] (a package's ``__init__``
    is the package itself)."""
    parts = ["dilemmax", *path.relative_to(ROOT).with_suffix("").parts]
    return parts[:-1] if parts[-1] == "__init__" else parts


def _package(dotted: list[str]) -> str | None:
    """The package a module name belongs to (None outside dilemmax)."""
    if not dotted or dotted[0] != "dilemmax":
        return None
    if len(dotted) == 1:
        return PACKAGE_ROOT
    return dotted[1]


def _is_submodule(dotted: list[str]) -> bool:
    base = ROOT.joinpath(*dotted[1:])
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _targets(node: ast.Import | ast.ImportFrom, module: list[str], is_package: bool):
    """The dotted module names an import statement loads."""
    if isinstance(node, ast.Import):
        return [alias.name.split(".") for alias in node.names]
    if node.level:  # relative: resolved against the importing module's package
        anchor = module if is_package else module[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = anchor + (node.module.split(".") if node.module else [])
    else:
        base = node.module.split(".")
    # `from dilemmax import cli` loads the module dilemmax.cli; `from dilemmax import make`, a name.
    named = [base + [alias.name] for alias in node.names]
    modules = [name for name in named if _is_submodule(name)]
    return modules + ([base] if len(modules) < len(named) else [])


def imports_in(path: Path, text: str) -> list[Import]:
    """The imports of one module (``path`` under dilemmax/, ``text`` its source) that reach
    another dilemmax package."""
    module = _module_name(path)
    source = _package(module)
    rel = str(path.relative_to(ROOT.parent))
    found = []
    for node in ast.walk(ast.parse(text, str(path))):
        if not isinstance(node, ast.Import | ast.ImportFrom):
            continue
        for dotted in _targets(node, module, path.name == "__init__.py"):
            target = _package(dotted)
            if target is not None and target != source:
                statement = " ".join((ast.get_source_segment(text, node) or "").split())
                found.append(Import(source, target, rel, node.lineno, statement))
    return found


@functools.cache
def package_imports() -> tuple[Import, ...]:
    """Every import in a non-test module of dilemmax that crosses from one package to another
    (read once: each test below looks at the same scan)."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if not _is_test(path.relative_to(ROOT)):
            found += imports_in(path, path.read_text())
    return tuple(found)


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The components of more than one package that imports reach around (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_scan_sees_late_relative_and_root_imports():
    """Imports inside functions and under TYPE_CHECKING count, relative ones are resolved, and
    `from dilemmax import <module>` reaches that module's package, `from dilemmax import make`
    the root."""
    text = (
        "from typing import TYPE_CHECKING\n"
        "import numpy as np\n"
        "from . import spaces\n"
        "if TYPE_CHECKING:\n"
        "    from dilemmax.agents.policy import Policy\n"
        "def late():\n"
        "    from ..train import config\n"
        "    import dilemmax.llm.play\n"
        "    from dilemmax import cli, make\n"
    )
    found = imports_in(ROOT / "envs" / "example.py", text)
    assert [(i.target, i.line) for i in found] == [
        ("agents", 5),
        ("train", 7),
        ("llm", 8),
        ("cli", 9),
        (PACKAGE_ROOT, 9),
    ]
    assert str(found[1]) == (
        "dilemmax/envs/example.py:7 (envs -> train): from ..train import config"
    )
    (root,) = imports_in(ROOT / "wrappers" / "example.py", "from dilemmax import make\n")
    assert root.target == PACKAGE_ROOT


@pytest.mark.slow
def test_no_package_cycle():
    imports = package_imports()
    graph: dict[str, set[str]] = {}
    for i in imports:
        graph.setdefault(i.source, set()).add(i.target)
    cycles = _strongly_connected(graph)
    lines = []
    for cycle in cycles:
        lines.append(f"packages {' <-> '.join(cycle)} import each other:")
        lines += [f"  {i}" for i in imports if i.source in cycle and i.target in cycle]
    assert not cycles, "\n".join(lines)


def test_every_package_has_a_layer():
    packages = {
        _package(_module_name(p)) for p in ROOT.rglob("*.py") if not _is_test(p.relative_to(ROOT))
    }
    missing = sorted(packages - set(RANK))
    assert not missing, (
        f"dilemmax packages {missing} have no layer: add them to LAYERS in {Path(__file__).name} "
        "(docs/architecture.md, 'Layers')"
    )


def test_imports_run_down_the_layers():
    upward = [
        i
        for i in package_imports()
        if i.source in RANK and i.target in RANK and RANK[i.target] >= RANK[i.source]
    ]
    message = "imports that run up or across the layers (a package imports only lower ones):\n"
    assert not upward, message + "\n".join(f"  {i}" for i in upward)


# ------------------------------------------------------------------ the command line stays on top
def is_command_line_module(path: Path) -> bool:
    """The modules that parse command lines: the ``dilemmax`` entry (``cli.py``,
    ``__main__.py``), each command's ``cli.py`` / ``*_cli.py``, and the argument helpers they
    share (``commandline.py``, ``finetune/arguments.py``). Everything else is the library
    those parsers call with typed values (issue #36: a notebook runs what a command runs)."""
    name = path.name
    shared = {"commandline.py", "arguments.py"}
    return name in {"cli.py", "__main__.py", *shared} or name.endswith("_cli.py")


def command_line_leaks(path: Path, text: str) -> list[str]:
    """Where a library module imports argparse or a function takes a parsed namespace
    (a parameter named ``args`` or ``namespace``, or annotated ``argparse.Namespace``)."""
    rel = str(path.relative_to(ROOT.parent))
    leaks = []
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            if any((n or "").split(".")[0] == "argparse" for n in names):
                leaks.append(f"{rel}:{node.lineno}: imports argparse")
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            params = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            for param in params:
                annotation = ast.unparse(param.annotation) if param.annotation else ""
                if param.arg in ("args", "namespace") or "Namespace" in annotation:
                    where = getattr(node, "name", "lambda")
                    leaks.append(f"{rel}:{node.lineno}: {where}() takes {param.arg}")
    return leaks


@pytest.mark.slow
def test_no_library_module_imports_argparse_or_takes_a_namespace():
    leaks = [
        leak
        for path in sorted(ROOT.rglob("*.py"))
        if not _is_test(path.relative_to(ROOT)) and not is_command_line_module(path)
        for leak in command_line_leaks(path, path.read_text())
    ]
    assert not leaks, "the command line leaks into the library:\n" + "\n".join(leaks)


def test_the_leak_scan_sees_an_import_a_namespace_parameter_and_an_annotation():
    text = (
        "import argparse\n"
        "def plan(args): ...\n"
        "def run(options, ns: argparse.Namespace): ...\n"
        "def fine(options, generate): ...\n"
    )
    leaks = command_line_leaks(ROOT / "x.py", text)
    assert [leak.split(": ", 1)[1] for leak in leaks] == [
        "imports argparse",
        "plan() takes args",
        "run() takes ns",
    ]


# ------------------------------------------------------------------ modules stay small
MAX_LINES = 500  # the project's standard: every module at or under 500 lines


def long_modules(modules, limit: int = MAX_LINES) -> list[str]:
    """``path (N lines)`` for each ``(path, text)`` of a module under dilemmax/ longer than
    ``limit`` lines."""
    found = []
    for path, text in modules:
        lines = len(text.splitlines())
        if lines > limit:
            found.append(f"{path.relative_to(ROOT.parent)} ({lines} lines)")
    return found


def test_the_length_scan_sees_a_long_module():
    planted = ROOT / "envs" / "planted.py"
    assert long_modules([(planted, "x = 1\n" * (MAX_LINES + 1))]) == [
        "dilemmax/envs/" + f"planted.py ({MAX_LINES + 1} lines)"  # split: no citation of a file
    ]
    assert long_modules([(planted, "x = 1\n" * MAX_LINES)]) == []


def test_every_module_is_at_most_500_lines():
    """Test modules under dilemmax/ too: a long one is as hard to read."""
    found = long_modules((path, path.read_text()) for path in sorted(ROOT.rglob("*.py")))
    assert not found, (
        f"modules over {MAX_LINES} lines: split each along a seam (a module that does one thing, "
        "with its docstring), importers pointing at the new home:\n  " + "\n  ".join(found)
    )
