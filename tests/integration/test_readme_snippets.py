"""The "Use it from your RL code" blocks of docs/rl_libraries.md (once the README's), run
verbatim with the RL libraries they drive. Every other code block of the docs runs in
tests/test_docs_snippets.py, which leaves these to this file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # CI may deselect: -m 'not integration'

PAGE = Path(__file__).resolve().parents[2] / "docs" / "rl_libraries.md"
SECTION = "## Use it from your RL code"
NEEDS = {"jaxmarl": "jaxmarl", "supersuit": "supersuit", "tianshou": "tianshou"}


def snippets() -> list[str]:
    text = PAGE.read_text()
    section = text[text.index(SECTION) :]
    section = section[: section.find("\n## ", len(SECTION))]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_section_has_one_snippet_per_consumer():
    blocks = snippets()
    assert len(blocks) == 4
    for needle in ("jaxmarl", "supersuit", "tianshou", "gymnasium.make_vec"):
        assert any(needle in b for b in blocks)


@pytest.mark.slow
@pytest.mark.parametrize("index", range(4))
def test_snippet_runs(index):
    code = snippets()[index]
    for needle, module in NEEDS.items():
        if f"import {needle}" in code or f"from {needle}" in code:
            pytest.importorskip(module)
    exec(compile(code, f"docs/rl_libraries.md snippet {index}", "exec"), {"__name__": "readme"})
