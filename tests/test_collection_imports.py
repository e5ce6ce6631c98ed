"""Collecting the suite imports no optional heavy stack (issue #43).

Every pytest worker imports every test module (and conftest) to collect it, whether or not it
runs its tests, so a test module that imports torch, transformers or JaxMARL at its top makes
every worker pay seconds for it. Such a module skips with
``pytest.mark.skipif(importlib.util.find_spec(name) is None, ...)``, which finds the package
without importing it, and imports the package inside its tests or fixtures.

Read from the source with :mod:`ast`, nothing imported: what a module runs when it is imported
is every statement outside function bodies (a class body, a decorator, a default value, an
``if`` or ``try`` at the top all run; an ``if TYPE_CHECKING:`` block does not), and an import of
one of dilemmax's own modules (or a helper module under tests/) brings in what that module
imports the same way, so a test module that imports ``dilemmax.evals.tasks`` imports Inspect.
``pytest.importorskip(name)`` and ``importlib.import_module(name)`` import ``name``;
``find_spec("a.b")`` imports ``a``; a conftest's ``pytest_plugins`` imports each plug-in named.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
TEST_ROOTS = ("tests", "dilemmax")  # pyproject.toml's testpaths

# The optional stacks that cost a collecting worker 0.3-4 s each (importtime, issue #43).
HEAVY = frozenset({
    "torch", "transformers", "trl", "peft", "accelerate", "inspect_ai", "tianshou",
    "stable_baselines3", "supersuit", "jaxmarl", "gymnax", "seaborn", "pandas",
})  # fmt: skip
# Modules of lighter packages that import one of them.
PULLS = {"safetensors.torch": "torch", "datasets": "pandas"}
# Calls whose first argument (a string) names a module they import.
IMPORTING_CALLS = {"importorskip": "all", "import_module": "all", "find_spec": "parent"}


@dataclass(frozen=True)
class Load:
    """One module a file imports when it is itself imported."""

    module: str  # dotted name
    line: int
    statement: str  # as written, on one line


def _statement(lines: list[str], node: ast.AST) -> str:
    """The source lines of ``node``, on one line."""
    return " ".join(" ".join(lines[node.lineno - 1 : node.end_lineno]).split())


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The module ``from <module> import ...`` names, relative ones resolved against
    ``package`` (the importing module's package)."""
    if not node.level:
        return node.module or ""
    parts = package.split(".") if package else []
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _called_module(node: ast.Call) -> str | None:
    """The module an ``importorskip`` / ``import_module`` / ``find_spec`` call imports."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in IMPORTING_CALLS or not node.args:
        return None
    first = node.args[0]
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
        return None
    if IMPORTING_CALLS[name] == "parent":  # find_spec imports the parents of what it finds
        return first.value.rpartition(".")[0] or None
    return first.value


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return getattr(test, "id", None) == "TYPE_CHECKING" or getattr(test, "attr", "") == (
        "TYPE_CHECKING"
    )


def module_level_loads(text: str, package: str, filename: str = "<text>") -> list[Load]:
    """The modules a module's source imports when it is imported (see the module docstring);
    ``package`` is its package's dotted name, for relative imports."""
    loads: list[Load] = []
    lines = text.splitlines()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            # Only the decorators and default values run at import; the body runs when called.
            args = node.args
            for part in [*getattr(node, "decorator_list", []), *args.defaults, *args.kw_defaults]:
                if part is not None:
                    visit(part)
            return
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                loads.append(Load(alias.name, node.lineno, _statement(lines, node)))
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            for alias in node.names:  # `from a import b` imports a, and a.b if it is a module
                loads.append(Load(f"{base}.{alias.name}", node.lineno, _statement(lines, node)))
        elif isinstance(node, ast.Call) and (module := _called_module(node)):
            loads.append(Load(module, node.lineno, _statement(lines, node)))
        elif isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == "pytest_plugins" for t in node.targets
        ):
            for item in ast.walk(node.value):
                if isinstance(item, ast.Constant) and isinstance(item.value, str):
                    loads.append(Load(item.value, node.lineno, _statement(lines, node)))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(text, filename))
    return loads


def heavy_package(module: str) -> str | None:
    """The heavy stack importing ``module`` loads by itself (None if none)."""
    parts = module.split(".")
    if parts[0] in HEAVY:
        return parts[0]
    for prefix in (".".join(parts[:n]) for n in range(len(parts), 0, -1)):
        if prefix in PULLS:
            return PULLS[prefix]
    return None


def _is_test_file(path: Path) -> bool:
    return path.name.startswith("test_") or path.name == "conftest.py"


@dataclass(frozen=True)
class Tree:
    """A source tree: its root (on the path, as the repository is) and the folders under it
    that hold test files and the modules they import."""

    root: Path = REPOSITORY
    tops: tuple[str, ...] = TEST_ROOTS

    @functools.cached_property
    def sources(self) -> frozenset[Path]:
        """Every module an import can reach: under ``tops``, and at the root."""
        found = [*self.root.glob("*.py")]
        for top in self.tops:
            found += (self.root / top).rglob("*.py")
        return frozenset(found)

    @functools.cached_property
    def top_names(self) -> frozenset[str]:
        """The names of its top-level packages and modules (``dilemmax``, ``tests``, ...)."""
        return frozenset(
            p.relative_to(self.root).parts[0].removesuffix(".py") for p in self.sources
        )

    def test_files(self) -> list[Path]:
        """The test modules and conftests pytest imports to collect the tree's tests."""
        return sorted(p for p in self.sources if _is_test_file(p))

    def library_files(self) -> list[Path]:
        """The modules test files may import."""
        return sorted(p for p in self.sources if not _is_test_file(p))

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def module_files(self, module: str, near: Path) -> tuple[Path, ...]:
        """The files importing ``module`` runs: the ``__init__.py`` of each package on its way
        and the module itself; a bare name not found is looked up beside ``near`` (pytest puts
        a test file's folder on the path)."""
        parts = module.split(".")
        if parts[0] not in self.top_names:  # another distribution's (numpy, jax.numpy, ...)
            beside = near.parent / f"{parts[0]}.py"
            return (beside,) if len(parts) <= 2 and beside in self.sources else ()
        files = []
        for n in range(1, len(parts) + 1):
            base = self.root.joinpath(*parts[:n])
            files += [
                f for f in (base / "__init__.py", base.with_suffix(".py")) if f in self.sources
            ]
        return tuple(files)


@functools.cache
def _edges(path: Path, tree: Tree) -> tuple[tuple[Load, str | None, tuple[Path, ...]], ...]:
    """Each module-level import of ``path``: (the import, the heavy stack it names or None, the
    tree's non-test files it runs). A test module reached is checked on its own."""
    package = ".".join(path.parent.relative_to(tree.root).parts)
    edges = []
    for load in module_level_loads(path.read_text(), package, str(path)):
        stack = heavy_package(load.module)
        files = () if stack else tree.module_files(load.module, path)
        edges.append((load, stack, tuple(f for f in files if not _is_test_file(f))))
    return tuple(edges)


def _heavy_edges(path: Path, tree: Tree, heavy: dict) -> Iterator[tuple[Load, str, tuple]]:
    """Each module-level import of ``path`` that brings in a stack: (the import, the stack, the
    chain of the tree's modules to it), given ``heavy``, the modules known to."""
    for load, stack, targets in _edges(path, tree):
        if stack is not None:
            yield load, stack, ()
        elif reached := next((heavy[t] for t in targets if t in heavy), None):
            yield load, reached[0], reached[1]


def _name_word(path: Path) -> str:
    """The name an import of this module spells (a package's own, for its ``__init__``)."""
    return path.parent.name if path.name == "__init__.py" else path.stem


def _spells_any(text: str, names) -> bool:
    """Whether ``text`` holds one of ``names`` (a substring test: cheap, and never misses)."""
    return any(name in text for name in names)


# A module may import a stack only if its source has an import statement that names the stack, or
# an importing call: a cheap test first (substrings), then the lines (parsing is what costs).
_NAMED = (*HEAVY, *PULLS)
_CALLS = (*IMPORTING_CALLS, "pytest_plugins")
_STACK = "|".join(re.escape(name) for name in _NAMED)
_IMPORT_LINE = re.compile(
    rf"^[ \t]*(?:from[ \t]+(?:{_STACK})\b|import[ \t]+[\w., \t]*\b(?:{_STACK})\b)", re.M
)


def may_import_a_stack(text: str) -> bool:
    """False only where no statement of ``text`` can import a stack."""
    if _spells_any(text, _CALLS):
        return True
    return _spells_any(text, _NAMED) and _IMPORT_LINE.search(text) is not None


def heavy_modules(tree: Tree) -> dict[Path, tuple[str, tuple[str, ...]]]:
    """The tree's non-test modules that import a heavy stack when imported: (the stack, the
    chain of ``file:line`` to it). Parsed only where the source could say so: the modules that
    spell a stack's name, then those that spell the name of a module found (or sit in a package
    whose ``__init__`` was found), until no more are found."""
    sources = {path: path.read_text() for path in tree.library_files()}
    heavy: dict[Path, tuple[str, tuple[str, ...]]] = {}
    names: set[str] | None = None  # None: the first round, which looks for the stacks' names
    while names != set():
        found = {}
        for path, text in sources.items():
            inside = [p for p in heavy if p.name == "__init__.py" and path.is_relative_to(p.parent)]
            spelled = may_import_a_stack(text) if names is None else _spells_any(text, names)
            if path in heavy or not (inside or spelled):
                continue
            if inside:
                found[path] = heavy[inside[0]]
            elif (first := next(_heavy_edges(path, tree, heavy), None)) is not None:
                load, stack, chain = first
                found[path] = (stack, (f"{tree.rel(path)}:{load.line}", *chain))
        heavy |= found
        names = {_name_word(path) for path in found}
    return heavy


def heavy_imports(tree: Tree = Tree()) -> list[str]:
    """One line per module-level import of a test file or conftest of ``tree`` that brings in a
    heavy stack, directly or through the tree's own modules: ``file:line imports <stack>[
    through <file:line -> ...>]: <statement>``. A test file is parsed only where its source
    spells a stack's name, an importing call or the name of a module that imports a stack."""
    heavy = heavy_modules(tree)
    names = {_name_word(path) for path in heavy}
    found = []
    for path in tree.test_files():
        text = path.read_text()
        if not (may_import_a_stack(text) or _spells_any(text, names)):
            continue
        named = set()  # the lines reported: `from a import b, c` is one statement
        for load, stack, chain in _heavy_edges(path, tree, heavy):
            if load.line in named:
                continue
            named.add(load.line)
            through = f" through {' -> '.join(chain)}" if chain else ""
            found.append(f"{tree.rel(path)}:{load.line} imports {stack}{through}: {load.statement}")
    return found


def test_no_test_module_imports_a_heavy_stack_when_collected():
    found = heavy_imports()
    assert not found, (
        "test modules that import an optional heavy stack when collected, which every pytest "
        "worker then pays for: skip with pytest.mark.skipif(importlib.util.find_spec(...) is "
        "None, reason=...) and import it inside the tests or a fixture:\n  " + "\n  ".join(found)
    )


def test_the_scan_sees_direct_late_and_indirect_imports(tmp_path):
    """A planted test module and conftest: each way a heavy stack is imported at collection is
    named with its file and line; imports inside functions, under TYPE_CHECKING and a
    top-level ``find_spec`` of a package are not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "light.py").write_text("import json\ndef f():\n    import torch\n")
    (pkg / "heavy.py").write_text("from . import light\nfrom inspect_ai import Task\n")
    (pkg / "reexport.py").write_text("from pkg.heavy import Task\n")
    (pkg / "test_planted.py").write_text(
        "import importlib.util\n"
        "from typing import TYPE_CHECKING\n"
        "import pytest\n"
        "from pkg import light\n"
        "from pkg.reexport import Task\n"
        "if TYPE_CHECKING:\n"
        "    import torch\n"
        "pytestmark = pytest.mark.skipif(importlib.util.find_spec('peft') is None, reason='')\n"
        "torch = pytest.importorskip('torch')\n"
        "try:\n"
        "    from transformers import AutoModel\n"
        "except ImportError:\n"
        "    pass\n"
        "class Callback:\n"
        "    from safetensors.torch import load_file\n"
        "    def method(self):\n"
        "        import trl\n"
        "@pytest.mark.skipif(importlib.util.find_spec('jaxmarl.wrappers') is None, reason='')\n"
        "def test_x(fixture=__import__('json')):\n"
        "    import jaxmarl\n"
    )
    (tmp_path / "conftest.py").write_text("import pandas as pd\npytest_plugins = ['pkg.heavy']\n")
    assert heavy_imports(Tree(tmp_path, ("pkg",))) == [
        "conftest.py:1 imports pandas: import pandas as pd",
        "conftest.py:2 imports inspect_ai through pkg/heavy.py:2: pytest_plugins = ['pkg.heavy']",
        "pkg/test_planted.py:5 imports inspect_ai through pkg/reexport.py:1 -> pkg/heavy.py:2: "
        "from pkg.reexport import Task",
        "pkg/test_planted.py:9 imports torch: torch = pytest.importorskip('torch')",
        "pkg/test_planted.py:11 imports transformers: from transformers import AutoModel",
        "pkg/test_planted.py:15 imports torch: from safetensors.torch import load_file",
        "pkg/test_planted.py:18 imports jaxmarl: "
        "@pytest.mark.skipif(importlib.util.find_spec('jaxmarl.wrappers') is None, reason='')",
    ]
