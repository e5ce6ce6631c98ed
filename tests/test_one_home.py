"""One home per concept (docs/architecture.md, "Where to add things"), read from the source with
:mod:`ast` like tests/test_architecture.py (nothing imported, no jax):

- an interval, a standard error or a statistical test is defined in ``dilemmax/statistics/``
  only (no ``sd / sqrt(n)`` written inline elsewhere);
- the int32 range (2**31 - 1, the seeds' and counts' bound) in ``envs/option_spec.py`` only;
- a range is spelled one way: ``low`` / ``high`` with ``low_open`` / ``high_open``;
- no module imports another's private (``_name``) names: a name used across modules is public,
  with a docstring, where it is defined;
- no re-export shims, neither ``noqa: F401`` lines nor a module that only imports names and
  lists them in ``__all__``: a name is imported from its home (0.x: no compatibility promise for
  Python import paths, CHANGELOG.md). A package's ``__init__.py`` is its public face, not a shim;
- a refused value is quoted in an error message by ``envs/option_spec.shown`` only: no second
  helper that cuts a repr with ``...``;
- a model client is constructed with one ``GenerateConfig`` and one ``RetryPolicy``: no client's
  constructor takes one of their fields as a keyword parameter of its own;
- a model provider (a ``dilemmax.seats`` entry point under ``dilemmax/llm/providers/``) is named
  only in its module and its client's (``llm/<name>_*.py``): no table or branch elsewhere says
  ``"openai"``.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "dilemmax"
STATISTICS = ROOT / "statistics"  # the package: resampling.py and closed_form.py
INT32_HOME = ROOT / "envs" / "option_spec.py"
SHOWN_HOME = INT32_HOME  # option_spec.shown: how an error message quotes a value
# The declarations a model client is constructed with: (module, class) whose fields it must not
# take again as keyword parameters.
CLIENT_CONFIGS = (("llm/config.py", "GenerateConfig"), ("llm/retrying.py", "RetryPolicy"))
PROVIDERS_HOME = "dilemmax.llm.providers."  # where dilemmax's model providers are declared
# A provider's name used in another's module for something else: (file, name) -> why.
OTHER_MEANINGS = {
    ("dilemmax/llm/inspect_client.py", "openai"): "Inspect's own openai/ provider",
}

# Names of interval and test functions; a formatter of one (``_ci_text``) is not one.
INTERVAL_NAME = re.compile(
    r"bootstrap|interval|wilson|clopper|sign_flip|permutation_test|_test$|standard_error|(^|_)cis?$"
    r"|^t\d\d$"
)
# A standard error written inline: a sample deviation over a square root.
INLINE_SE = re.compile(r"std\([^)]*ddof\s*=\s*1[^)]*\)\)?\s*/\s*(np|jnp|math)\.sqrt")
# The other range vocabularies this project had (OptionSpec's, before Range).
OLD_RANGE_WORDS = ("exclusive_low", "exclusive_high", "open_low", "open_high")


def _is_test(path: Path) -> bool:
    rel = path.relative_to(ROOT)
    return rel.name.startswith("test_") or rel.name == "conftest.py" or "tests" in rel.parts


@functools.cache
def modules() -> tuple[tuple[Path, str, ast.Module], ...]:
    """Every non-test module of dilemmax: (path, text, tree)."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if not _is_test(path):
            text = path.read_text()
            found.append((path, text, ast.parse(text, str(path))))
    return tuple(found)


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT.parent)}:{node.lineno}"


def interval_functions(path: Path, tree: ast.Module) -> list[str]:
    """The interval / test functions a module defines outside the statistics module."""
    if path.is_relative_to(STATISTICS):
        return []
    return [
        f"{_where(path, node)} def {node.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and INTERVAL_NAME.search(node.name.lower())
        and not node.name.endswith("_text")  # what writes one out
    ]


def inline_standard_errors(path: Path, text: str) -> list[str]:
    """Lines outside the statistics module that divide a sample deviation by a square root."""
    if path.is_relative_to(STATISTICS):
        return []
    return [
        f"{path.relative_to(ROOT.parent)}:{i} sd / sqrt(n)"
        for i, line in enumerate(text.splitlines(), 1)
        if INLINE_SE.search(line)
    ]


def _is_int32_bound(node: ast.AST) -> bool:
    """``2**31`` (so ``2**31 - 1`` and ``-(2**31)`` too) or the number written out."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        base, exponent = node.left, node.right
        return all(isinstance(n, ast.Constant) for n in (base, exponent)) and (
            base.value,
            exponent.value,
        ) == (2, 31)
    return isinstance(node, ast.Constant) and node.value in (2**31 - 1, 2**31)


def int32_copies(path: Path, tree: ast.Module) -> list[str]:
    if path == INT32_HOME:
        return []
    return [f"{_where(path, n)} 2**31" for n in ast.walk(tree) if _is_int32_bound(n)]


def old_range_words(path: Path, text: str) -> list[str]:
    return [
        f"{path.relative_to(ROOT.parent)}:{i} {word}"
        for i, line in enumerate(text.splitlines(), 1)
        for word in OLD_RANGE_WORDS
        if re.search(rf"\b{word}\b", line)
    ]


def _module_of(path: Path) -> list[str]:
    parts = ["dilemmax", *path.relative_to(ROOT).with_suffix("").parts]
    return parts[:-1] if parts[-1] == "__init__" else parts


def private_imports(path: Path, tree: ast.Module) -> list[str]:
    """``from <a dilemmax module> import _name`` (relative ones resolved)."""
    module = _module_of(path)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            anchor = module if path.name == "__init__.py" else module[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            source = anchor + (node.module.split(".") if node.module else [])
        else:
            source = (node.module or "").split(".")
        if source[0] != "dilemmax":
            continue
        for alias in node.names:
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                found.append(f"{_where(path, node)} from {'.'.join(source)} import {alias.name}")
    return found


def f401_shims(path: Path, text: str) -> list[str]:
    comments = (
        tok
        for tok in tokenize.generate_tokens(io.StringIO(text).readline)
        if tok.type == tokenize.COMMENT
    )
    return [
        f"{path.relative_to(ROOT.parent)}:{tok.start[0]}"
        for tok in comments
        if re.search(r"noqa:[^#]*\bF401\b", tok.string)
    ]


def _is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)


def _is_all(statement: ast.stmt) -> bool:
    return "__all__" in _assigned_names(statement) or (
        isinstance(statement, ast.AugAssign) and getattr(statement.target, "id", "") == "__all__"
    )


def all_only_modules(path: Path, tree: ast.Module) -> list[str]:
    """A module (not a package's ``__init__.py``) whose body is only imports and ``__all__``
    (a docstring aside): another module's names offered from a second address."""
    if path.name == "__init__.py":
        return []
    body = [s for s in tree.body if not _is_docstring(s)]
    imports = [s for s in body if isinstance(s, ast.Import | ast.ImportFrom)]
    rest = [s for s in body if s not in imports and not _is_all(s)]
    if imports and not rest and len(body) > len(imports):
        return [f"{path.relative_to(ROOT.parent)} re-exports through __all__"]
    return []


def _is_cut(node: ast.AST) -> bool:
    """``text[: limit - 3] + "..."``: a slice with an ellipsis added, what ``shown`` does."""
    return (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Add)
        and isinstance(node.left, ast.Subscript)
        and isinstance(node.left.slice, ast.Slice)
        and isinstance(node.right, ast.Constant)
        and node.right.value in ("...", "\u2026")
    )


def value_cuts(path: Path, tree: ast.Module) -> list[str]:
    """The places outside option_spec.py that cut a text and add ``...`` (a copy of shown)."""
    if path == SHOWN_HOME:
        return []
    return [f"{_where(path, n)} [...] + '...'" for n in ast.walk(tree) if _is_cut(n)]


def env_classes(trees: list[ast.Module]) -> set[str]:
    """The names of the classes that subclass ``MultiAgentEnv``, directly or through another
    such class (read by name from ``trees``, nothing imported)."""
    bases = {
        node.name: {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
        for tree in trees
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    }
    found = {"MultiAgentEnv"}
    while True:
        more = {name for name, parents in bases.items() if parents & found} - found
        if not more:
            return found - {"MultiAgentEnv"}
        found |= more


def _assigned_names(statement: ast.stmt) -> list[str]:
    if isinstance(statement, ast.Assign):
        return [t.id for t in statement.targets if isinstance(t, ast.Name)]
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
        return [statement.target.id]
    return []


def hand_written_options(path: Path, tree: ast.Module, envs: set[str]) -> list[str]:
    """An env class that assigns ``option_specs`` or whose docstring has an ``Args:`` section."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef) or node.name not in envs:
            continue
        for statement in node.body:
            if "option_specs" in _assigned_names(statement):
                found.append(f"{_where(path, statement)} {node.name}.option_specs")
        if re.search(r"^Args:$", ast.get_docstring(node) or "", re.MULTILINE):
            found.append(f"{_where(path, node)} {node.name} docstring Args:")
    return found


def _scan(check, *, text: bool = False) -> list[str]:
    return [hit for path, src, tree in modules() for hit in check(path, src if text else tree)]


# ----------------------------------------------------------------------------- the scanners
def test_the_scanners_see_what_they_refuse():
    """Each check finds its kind of copy in a small planted module."""
    planted = ROOT / "envs" / "planted.py"
    text = (
        "from dilemmax.envs.option_spec import _secret, shown  # noqa: F401\n"
        "from . import _relative\n"
        "LIMIT = 2**31 - 1\n"
        "LOW = -(2**31)\n"
        "def mean_ci(x): ...\n"
        "def bootstrap(x): ...\n"
        "def _ci_text(pair): ...\n"
        "def _interval_text(entry): ...\n"
        "spec = dict(exclusive_low=True)\n"
        "def _short(value, limit=60):\n"
        "    text = repr(value)\n"
        "    return text if len(text) <= limit else text[: limit - 3] + '...'\n"
        "def population_rule_test(cells): ...\n"
        "se = float(x.std(ddof=1) / np.sqrt(len(x)))\n"
    )
    tree = ast.parse(text)
    assert private_imports(planted, tree) == [
        "dilemmax/envs/planted.py:1 from dilemmax.envs.option_spec import _secret",
        "dilemmax/envs/planted.py:2 from dilemmax.envs import _relative",
    ]
    assert f401_shims(planted, text) == ["dilemmax/envs/planted.py:1"]
    assert all_only_modules(planted, tree) == []  # it defines names of its own
    shim = ast.parse(
        '"""Moved."""\nfrom dilemmax.envs.osj.view import manhattan\n__all__ = ["manhattan"]\n'
    )
    assert all_only_modules(planted, shim) == [
        "dilemmax/envs/planted.py re-exports through __all__"
    ]
    assert all_only_modules(ROOT / "envs" / "__init__.py", shim) == []  # a package's face
    assert len(int32_copies(planted, tree)) == 2
    assert int32_copies(INT32_HOME, tree) == []
    named = [h.split()[-1] for h in interval_functions(planted, tree)]
    assert named == ["mean_ci", "bootstrap", "population_rule_test"]
    assert inline_standard_errors(planted, text) == ["dilemmax/envs/planted.py:14 sd / sqrt(n)"]
    home = STATISTICS / "resampling.py"
    assert inline_standard_errors(home, text) == [] and interval_functions(home, tree) == []
    assert old_range_words(planted, text) == ["dilemmax/envs/planted.py:9 exclusive_low"]
    assert value_cuts(planted, tree) == ["dilemmax/envs/planted.py:12 [...] + '...'"]
    assert value_cuts(SHOWN_HOME, tree) == []


# ----------------------------------------------------------------------------- the tree
@pytest.mark.slow
def test_intervals_and_tests_live_in_the_statistics_module():
    found = _scan(interval_functions) + _scan(inline_standard_errors, text=True)
    assert not found, (
        "an interval, a standard error or a statistical test outside dilemmax/statistics/ "
        "(add it there, or use the one there):\n  " + "\n  ".join(found)
    )


def test_the_int32_bound_is_defined_once():
    found = _scan(int32_copies)
    assert not found, (
        "2**31 written again: import INT32_MAX / INT32_MIN from dilemmax.envs.option_spec:\n  "
        + "\n  ".join(found)
    )


def test_ranges_have_one_vocabulary():
    found = _scan(old_range_words, text=True)
    assert not found, "a range's open end is low_open / high_open:\n  " + "\n  ".join(found)


def test_no_module_imports_another_modules_private_names():
    found = _scan(private_imports)
    assert not found, (
        "a private name imported across modules: make it public (with a docstring) where it is "
        "defined, or move it to where it is used:\n  " + "\n  ".join(found)
    )


def test_no_re_export_shims():
    found = _scan(f401_shims, text=True)
    assert not found, (
        "a `noqa: F401` re-export: import the name from its home instead (0.x, no compatibility "
        "promise for import paths):\n  " + "\n  ".join(found)
    )


def test_no_modules_that_only_re_export():
    found = _scan(all_only_modules)
    assert not found, (
        "a module that only imports names and lists them in __all__: import them from their "
        "home instead (0.x, no compatibility promise for import paths):\n  " + "\n  ".join(found)
    )


def test_a_refused_value_is_quoted_by_one_helper():
    found = _scan(value_cuts)
    assert not found, (
        "a repr or a text cut with '...' again: quote a value with "
        "dilemmax.envs.option_spec.shown(value, limit):\n  " + "\n  ".join(found)
    )


def test_the_option_scanner_sees_what_it_refuses():
    planted = ROOT / "envs" / "planted.py"
    tree = ast.parse(
        "class GameEnv(MultiAgentEnv):\n"
        "    option_specs = {}\n"
        "class Variant(GameEnv):\n"
        '    """A variant.\n\n    Args:\n        width: the map.\n    """\n'
        "    option_specs: dict = {}\n"
        "class Other:\n"
        '    """Not an env.\n\n    Args:\n        x: y.\n    """\n'
        "    option_specs = {}\n"
    )
    envs = env_classes([tree])
    assert envs == {"GameEnv", "Variant"}
    assert hand_written_options(planted, tree, envs) == [
        "dilemmax/envs/planted.py:2 GameEnv.option_specs",
        "dilemmax/envs/planted.py:9 Variant.option_specs",
        "dilemmax/envs/planted.py:3 Variant docstring Args:",
    ]


def test_env_options_are_declared_in_the_constructor_only():
    envs = env_classes([tree for _, _, tree in modules()])
    assert {"MoralHazardEnv", "RegisteredScenarios", "ScenarioEnv"} <= envs
    found = [hit for path, _, tree in modules() for hit in hand_written_options(path, tree, envs)]
    assert not found, (
        "declare an env option once, in its constructor's signature: `name: Annotated[type, "
        "Option(meaning, **range)] = default` (option_specs and the docstring's Args: are made "
        "from it):\n  " + "\n  ".join(found)
    )


# ----------------------------------------------------------------------------- model providers
def declared_fields(tree: ast.Module, name: str) -> set[str]:
    """The annotated fields of class ``name`` in ``tree`` (a dataclass's fields)."""
    return {
        statement.target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name == name
        for statement in node.body
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
    }


@functools.cache
def config_fields() -> dict[str, str]:
    """field -> the declaration it belongs to (``GenerateConfig``, ``RetryPolicy``)."""
    fields = {}
    for module, name in CLIENT_CONFIGS:
        tree = ast.parse((ROOT / module).read_text())
        fields.update(dict.fromkeys(declared_fields(tree, name), name))
    return fields


def redeclared_config_fields(path: Path, tree: ast.Module, fields: dict[str, str]) -> list[str]:
    """Keyword parameters of a ``*Client`` class's constructor named as a field of the
    declarations a client is given (``fields``: field -> declaration)."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ClassDef) and node.name.endswith("Client")):
            continue
        for init in node.body:
            if isinstance(init, ast.FunctionDef) and init.name == "__init__":
                arguments = init.args.args + init.args.kwonlyargs
                found += [
                    f"{_where(path, init)} {node.name}({a.arg}=...) repeats {fields[a.arg]}"
                    for a in arguments
                    if a.arg in fields
                ]
    return found


@functools.cache
def model_providers() -> dict[str, tuple[str, ...]]:
    """provider -> its home files (relative to the repository): the module its
    ``dilemmax.seats`` entry point names, and its client's (``llm/<name>_*.py``)."""
    project = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())
    points = project["project"]["entry-points"]["dilemmax.seats"]
    homes = {}
    for name, value in points.items():
        module = value.split(":")[0]
        if module.startswith(PROVIDERS_HOME):
            files = [module.replace(".", "/") + ".py"]
            files += [f"dilemmax/llm/{p.name}" for p in (ROOT / "llm").glob(f"{name}_*.py")]
            homes[name] = tuple(files)
    return homes


def provider_names_outside(path: Path, tree: ast.Module, homes: dict) -> list[str]:
    """Strings that are a provider's name, in a module that is not that provider's."""
    where = str(path.relative_to(ROOT.parent))
    return [
        f"{_where(path, node)} {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and node.value in homes
        and where not in homes[node.value]
        and (where, node.value) not in OTHER_MEANINGS
    ]


def test_the_provider_scanners_see_what_they_refuse():
    planted = ROOT / "llm" / "planted.py"
    tree = ast.parse(
        "class LocalClient:\n"
        "    def __init__(self, model, config, temperature=0.0, *, backoff=0.5, batch=4): ...\n"
        "class Helper:\n"
        "    def __init__(self, temperature): ...\n"
        "TARGETS = {'openai': '<model>', 'hf': '<folder>'}\n"
        "if kind == 'inspect': pass\n"
    )
    fields = config_fields()
    assert {"temperature", "max_attempts", "base_url"} <= set(fields)
    assert fields["backoff"] == "RetryPolicy" and fields["temperature"] == "GenerateConfig"
    assert redeclared_config_fields(planted, tree, fields) == [
        "dilemmax/llm/planted.py:2 LocalClient(temperature=...) repeats GenerateConfig",
        "dilemmax/llm/planted.py:2 LocalClient(backoff=...) repeats RetryPolicy",
    ]
    homes = model_providers()
    assert set(homes) >= {"openai", "inspect", "hf"}
    assert "dilemmax/llm/openai_client.py" in homes["openai"]
    assert "dilemmax/llm/providers/hf.py" in homes["hf"]
    assert [hit.split()[-1] for hit in provider_names_outside(planted, tree, homes)] == [
        "'openai'",
        "'hf'",
        "'inspect'",
    ]
    assert (
        provider_names_outside(ROOT / "llm" / "providers" / "hf.py", tree, {"hf": homes["hf"]})
        == []
    )


def test_clients_are_given_one_config_and_one_retry_policy():
    found = _scan(lambda path, tree: redeclared_config_fields(path, tree, config_fields()))
    assert not found, (
        "a client constructor takes a GenerateConfig / RetryPolicy field of its own: take "
        "`config: GenerateConfig` and `retry: RetryPolicy` and read the field there:\n  "
        + "\n  ".join(found)
    )


def test_a_provider_is_named_only_in_its_module():
    found = _scan(lambda path, tree: provider_names_outside(path, tree, model_providers()))
    assert not found, (
        "a model provider named outside its module (llm/providers/<name>.py, llm/<name>_*.py): "
        "declare what differs in its ModelProvider and ask the seat kind for it:\n  "
        + "\n  ".join(found)
    )


# ----------------------------------------------------------------------------- games
GAMES_HOME = "dilemmax/envs/"  # a game's own folder: dilemmax/envs/<game>/
# Where a game may be named in a table or a branch besides its folder, and why.
GAME_NAMES_ALLOWED = {
    "dilemmax/experiments/": "the papers' designs: each reproduces its paper's own games",
}


def builtin_games() -> dict[str, str]:
    """game -> its folder (relative to the repository), from pyproject.toml's ``dilemmax.games``
    entry points (the declaration module's package)."""
    project = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())
    points = project["project"]["entry-points"]["dilemmax.games"]
    return {name: value.split(":")[0].rpartition(".")[0].replace(".", "/") + "/"
            for name, value in points.items()}  # fmt: skip


def game_names_outside(path: Path, tree: ast.Module, homes: dict[str, str]) -> list[str]:
    """A game's name as an entry of a table (a tuple, list or set element, a dict key) or in a
    branch (``== "<game>"``, ``in (...)``) outside that game's folder: what a game declares
    belongs in its declaration, read through the registry."""
    where = str(path.relative_to(ROOT.parent))
    if where.startswith(tuple(GAME_NAMES_ALLOWED)):
        return []
    named = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            named += node.elts
        elif isinstance(node, ast.Dict):
            named += [key for key in node.keys if key is not None]
        elif isinstance(node, ast.Compare):
            named += [node.left, *node.comparators]
    return [
        f"{_where(path, node)} {node.value!r}"
        for node in named
        if isinstance(node, ast.Constant)
        and node.value in homes
        and not where.startswith(homes[node.value])
    ]


def test_the_game_scanner_sees_what_it_refuses():
    homes = builtin_games()
    assert homes["open_harvest"] == "dilemmax/envs/open_harvest/" and len(homes) >= 4
    tree = ast.parse(
        "GRID_GAMES = ('open_cleanup', 'open_harvest')\n"
        "KEY_EVENTS = {'moral_hazard': ('query',)}\n"
        "if game == 'consequence': pass\n"
        "env = make('consequence')\n"  # using a game is not a table of games
        "DEFAULT = 'open_harvest'\n"
    )
    found = game_names_outside(ROOT / "view" / "planted.py", tree, homes)
    assert [hit.split()[-1] for hit in found] == [
        "'open_cleanup'", "'open_harvest'", "'moral_hazard'", "'consequence'",
    ]  # fmt: skip
    in_a_game = game_names_outside(ROOT / "envs" / "open_cleanup" / "planted.py", tree, homes)
    assert [hit.split()[-1] for hit in in_a_game] == [  # its own name is its own to use
        "'open_harvest'", "'moral_hazard'", "'consequence'",
    ]  # fmt: skip
    assert game_names_outside(ROOT / "experiments" / "planted.py", tree, homes) == []


def test_no_table_of_games_outside_the_games():
    found = _scan(lambda path, tree: game_names_outside(path, tree, builtin_games()))
    assert not found, (
        "a game named in a table or a branch outside its folder: declare it in the game's "
        "GameDeclaration (dilemmax/envs/<game>/declaration.py) and read it through "
        "dilemmax.envs.registry.declaration(game):\n  " + "\n  ".join(found)
    )
