"""The docs site and what the docs cite: the site builds with warnings as errors, the generated
pages are what docs/gen_pages.py writes from today's code, each game's page lists every option it
declares, no file refers to a path outside the repository, and every file a doc or docstring
cites exists."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from dilemmax.envs.options import constructor_specs
from dilemmax.envs.registry import env_spec, registered_envs

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _gen_pages():
    spec = importlib.util.spec_from_file_location("gen_pages", DOCS / "gen_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tracked_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [ROOT / name for name in out.split("\0") if name and (ROOT / name).is_file()]


def _text_files() -> list[Path]:
    suffixes = {".py", ".md", ".toml", ".yml", ".yaml", ".cff", ".txt", ".ipynb", ".sh", ".json"}
    names = {"run", ".gitignore"}
    return [p for p in _tracked_files() if p.suffix in suffixes or p.name in names]


# ----------------------------------------------------------------------------- the site
@pytest.mark.slow
def test_the_site_builds_with_warnings_as_errors(tmp_path):
    """`mkdocs build --strict`: a broken link, a page missing from the nav, a stale API
    reference or a docstring griffe cannot read fails here, naming it."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=540,
        env={"NO_MKDOCS_2_WARNING": "1", **__import__("os").environ},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    site = tmp_path / "site"
    for page in ("index.html", "games/moral_hazard/index.html", "cli/index.html", "llms.txt"):
        assert (site / page).is_file(), page
    assert (site / "games" / "open_cleanup.png").is_file()


@pytest.mark.slow
def test_the_generated_pages_are_what_the_generator_writes_now():
    """docs/games/*.md, docs/cli.md, docs/model_options.md and docs/llms.txt are generated from
    the code: a change to an env's docstring or options, a command's parser or a model option
    must be followed by `python docs/gen_pages.py`."""
    gen = _gen_pages()
    stale = []
    for path, make in gen.pages(check=True).items():
        if not path.is_file() or path.read_text() != make().rstrip("\n") + "\n":
            stale.append(str(path.relative_to(ROOT)))
    assert not stale, f"out of date, run `python docs/gen_pages.py`: {stale}"


# The games dilemmax ships (tests register toy envs of their own).
GAMES = [g for g in registered_envs() if env_spec(g).entry_point.startswith("dilemmax.")]


@pytest.mark.parametrize("env_id", GAMES)
def test_each_game_page_lists_every_declared_option(env_id):
    """Every option the env declares (its option_specs and constructor arguments) has a row on
    its page with its type, default and allowed values."""
    page = (DOCS / "games" / f"{env_id}.md").read_text()
    page = page[page.index("\n## Options\n") :]
    page = page[: page.index("\n## ", 5)]
    specs = constructor_specs(env_spec(env_id).load())
    assert specs
    for name, spec in specs.items():
        rows = [line for line in page.splitlines() if line.startswith(f"| `{name}` |")]
        assert len(rows) == 1, f"{env_id}: option {name} is not on its page"
        cells = [c.strip() for c in rows[0].split(" | ")]
        assert cells[1] == spec.kind and spec.describe().replace("|", "\\|") in rows[0]


def test_the_training_page_lists_every_config_field_with_the_range_its_check_enforces():
    """docs/training.md's generated table: one row per TrainConfig field with its type, its
    meaning and the values validate() allows; two ranges read against the check itself."""
    import dataclasses

    from dilemmax.envs.option_spec import INT32_MAX
    from dilemmax.envs.options import OptionError
    from dilemmax.train.config import TrainConfig, field_doc

    page = (DOCS / "training.md").read_text()
    page = page[page.index("\n## Every config field\n") : page.index("\nA game's own defaults")]
    rows = {line.split(" | ")[0][3:-1]: line for line in page.splitlines() if line[:3] == "| `"}
    escaped = lambda text: text.replace("|", "\\|")  # noqa: E731
    for f in dataclasses.fields(TrainConfig):
        assert f"| `{f.name}` | {escaped(f.type)} |" in rows[f.name], f.name
        assert escaped(field_doc(f.name)) in rows[f.name]
    assert set(rows) == {f.name for f in dataclasses.fields(TrainConfig)}
    for name, shown, inside, outside in (
        ("lr", "(0, 1]", (1e-9, 1.0), (0.0, 1.0 + 1e-9)),
        ("eval_every", f"0..{INT32_MAX}", (0, INT32_MAX), (-1, INT32_MAX + 1)),
    ):
        assert shown in rows[name]
        for value in inside:
            TrainConfig(**{name: value}).validate()
        for value in outside:
            with pytest.raises(OptionError, match=name):
                TrainConfig(**{name: value}).validate()


def test_each_grid_game_page_shows_its_frame():
    for env_id in GAMES:
        if "rgb_array" in env_spec(env_id).load().render_modes:
            assert (DOCS / "games" / f"{env_id}.png").is_file()
            assert f"({env_id}.png)" in (DOCS / "games" / f"{env_id}.md").read_text()


# ----------------------------------------------------------------------------- what files cite
# Written in pieces so that this file does not cite them itself.
OUTSIDE = [
    re.compile(r"\.\./" + "shared"),
    re.compile(r"(?<![\w/])" + "DESIGN" + r"\.md"),
    re.compile("shared/" + "papers"),
    re.compile("shared/" + "DESIGN" + r"\.md"),
    re.compile("shared/" + "specs"),
    re.compile(r"(?<![\w.])/" + "work" + r"/"),
    re.compile(r"(?<![\w.])/" + "root" + r"/"),
]


def test_no_file_refers_to_a_path_outside_the_repository():
    """The project's steering files and the machine's folders are not part of the repository:
    a file citing them points its reader at something they do not have."""
    found = []
    for path in _text_files():
        text = path.read_text(errors="replace")
        for pattern in OUTSIDE:
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                found.append(f"{path.relative_to(ROOT)}:{line}: {match.group(0)}")
    assert not found, "\n".join(found)


_CITED_FILE = re.compile(
    r"(?<![\w./-])((?:tests|dilemmax|docs|benchmarks|examples)/[\w./-]*\w\.(?:py|md|json|yaml|yml|ipynb|txt|png))"
)
_CITED_MODULE = re.compile(r"`(dilemmax(?:\.\w+)+)`")


def _module_target_exists(dotted: str) -> bool:
    """``dilemmax.envs.rare.rare_cond``: the longest prefix that is a package or module exists,
    and the name after it (if any) is defined or imported in that module."""
    parts = dotted.split(".")
    path = ROOT
    for i, part in enumerate(parts):
        if (path / part).is_dir():
            path = path / part
            continue
        if (path / f"{part}.py").is_file():
            source = (path / f"{part}.py").read_text()
            rest = parts[i + 1 : i + 2]
            return not rest or bool(re.search(rf"\b{re.escape(rest[0])}\b", source))
        init = path / "__init__.py"
        return (
            i > 0
            and init.is_file()
            and bool(re.search(rf"\b{re.escape(part)}\b", init.read_text()))
        )
    return True


# A path a test writes as data (a made-up module whose import the test reports), not a citation.
NOT_CITATIONS = {
    ("tests/test_architecture.py", "dilemmax/envs/" + "example.py"),
    ("tests/test_one_home.py", "dilemmax/envs/" + "planted.py"),
    ("tests/test_one_home.py", "dilemmax/llm/" + "planted.py"),
}
# Entry-point groups (`dilemmax.seats`, `dilemmax.games`): named like modules, and none.
ENTRY_POINT_GROUPS = set(
    tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
)


def test_every_cited_file_and_module_exists():
    """A `tests/...`, `dilemmax/...`, `docs/...` path or a dotted `dilemmax` module named in a doc,
    a docstring or a comment exists (a reader who follows it finds it)."""
    missing = []
    for path in _text_files():
        if path.suffix not in (".py", ".md", ".ipynb", ".toml", ".yml", ".cff"):
            continue
        if "results" in path.relative_to(ROOT).parts:  # recorded outputs: as they were
            continue
        text = path.read_text(errors="replace")
        for match in _CITED_FILE.finditer(text):
            cited = match.group(1)
            if "<" in cited or "*" in cited or not (ROOT / cited).exists():
                if "<" in cited or "*" in cited:
                    continue
                if (path.relative_to(ROOT).as_posix(), cited) not in NOT_CITATIONS:
                    missing.append(f"{path.relative_to(ROOT)}: {cited}")
        for match in _CITED_MODULE.finditer(text):
            if match.group(1) in ENTRY_POINT_GROUPS:
                continue
            if not _module_target_exists(match.group(1)):
                missing.append(f"{path.relative_to(ROOT)}: {match.group(1)}")
    assert not missing, "\n".join(sorted(set(missing)))


def test_the_version_is_single_sourced():
    """`dilemmax.__version__` is the one place the version is written: the installed
    distribution's metadata (pyproject's dynamic version) and the changelog agree with it."""
    import importlib.metadata

    import dilemmax

    assert re.fullmatch(r"\d+\.\d+\.\d+", dilemmax.__version__)
    assert importlib.metadata.version("dilemmax") == dilemmax.__version__
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject
    assert not re.search(r'^version = "', pyproject, re.M)  # no second copy of the number
    assert f"## [{dilemmax.__version__}]" in (ROOT / "CHANGELOG.md").read_text()
    citation = (ROOT / "CITATION.cff").read_text()
    assert f'version: "{dilemmax.__version__}"' in citation


def test_every_commands_help_formats():
    """The CLI reference is every command's --help: each formats (argparse %-formats help text,
    so a bare % in a help string would break that command's --help)."""
    gen = _gen_pages()
    from dilemmax.cli import build_parser

    paths = [" ".join(path) for path, parser in gen._parsers(build_parser(), ["dilemmax"])]
    assert "dilemmax experiment moral_hazard/isolation" in paths
    for path, parser in gen._parsers(build_parser(), ["dilemmax"]):
        assert gen._help(parser).startswith("usage:"), path
