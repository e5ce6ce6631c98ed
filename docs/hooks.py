"""mkdocs hooks: the repository's recorded benchmark results and examples become part of the site,
CHANGELOG.md its changes page, and every registered game a page under "Games".

The games' entries in the navigation are made from the registry (``gen_pages.with_games``), not
written in mkdocs.yml: dilemmax's own games have their generated pages committed under
docs/games/, and a plug-in game installed where the site is built gets its page generated here
from its code (``gen_pages.game_page``), with its frame for a grid game.

The docs pages cite files outside docs/ as ``../benchmarks/...`` and ``../examples/...`` (so they
read on the repository's web view as well); the site serves those trees under ``benchmarks/``
and ``examples/`` (markdown as pages, the rest as it is), and each page's links are rewritten to
match before mkdocs checks them, so a link to a file that does not exist fails the strict build.
"""

from __future__ import annotations

import importlib.util
import re
import tempfile
from pathlib import Path

from mkdocs.structure.files import File, Files, InclusionLevel

ROOT = Path(__file__).resolve().parent.parent
SERVED = {
    "benchmarks": (".md", ".png", ".json", ".csv", ".py"),
    "examples": (".md", ".yaml", ".yml", ".py"),
}
_FOLDER_LINK = re.compile(r"\[([^\]]*)\]\(([^)\s:#]+/)\)")
_LINK = re.compile(r"\]\((?:\.\./)+(" + "|".join(SERVED) + r")/")


def _gen_pages():
    spec = importlib.util.spec_from_file_location("gen_pages", ROOT / "docs" / "gen_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def on_config(config):
    config["nav"] = _gen_pages().with_games(config["nav"])
    return config


def _plugin_game_pages(files: Files, config) -> None:
    """A page (and frame) for each documented game without a committed page: a plug-in's."""
    gen = _gen_pages()
    images = Path(tempfile.mkdtemp(prefix="dilemmax-games-"))
    for game in gen.documented_games():
        if (ROOT / "docs" / "games" / f"{game}.md").is_file():
            continue
        text = gen.game_page(game, images)
        files.append(File.generated(config, f"games/{game}.md", content=text))
        frame = images / f"{game}.png"
        if frame.is_file():
            files.append(File.generated(config, f"games/{game}.png", abs_src_path=str(frame)))


def on_files(files: Files, config) -> Files:
    for tree, suffixes in SERVED.items():
        for path in sorted((ROOT / tree).rglob("*")):
            if path.is_file() and path.suffix in suffixes and "__pycache__" not in path.parts:
                uri = path.relative_to(ROOT).as_posix()
                files.append(
                    File.generated(
                        config, uri, abs_src_path=str(path), inclusion=InclusionLevel.NOT_IN_NAV
                    )
                )
    files.append(File.generated(config, "changes.md", abs_src_path=str(ROOT / "CHANGELOG.md")))
    _plugin_game_pages(files, config)
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri.startswith(tuple(f"{tree}/" for tree in SERVED)):
        # A served file links within its own tree; a link to a folder (which the repository's
        # web view lists) becomes its text, since the site has no folder listings.
        here = (ROOT / page.file.src_uri).parent
        return _FOLDER_LINK.sub(
            lambda m: m.group(1) if (here / m.group(2)).is_dir() else m.group(0), markdown
        )
    depth = page.file.src_uri.count("/")
    return _LINK.sub(lambda m: "](" + "../" * depth + m.group(1) + "/", markdown)
