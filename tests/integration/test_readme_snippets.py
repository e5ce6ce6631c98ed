"""The README's "Use it from your RL code" blocks, run verbatim."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # CI may deselect: -m 'not integration'

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Use it from your RL code"
NEEDS = {"jaxmarl": "jaxmarl", "supersuit": "supersuit", "tianshou": "tianshou"}


def snippets() -> list[str]:
    text = README.read_text()
    section = text[text.index(SECTION) :]
    section = section[: section.find("\n## ", len(SECTION))]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_section_has_one_snippet_per_consumer():
    blocks = snippets()
    assert len(blocks) == 4
    for needle in ("jaxmarl", "supersuit", "tianshou", "gymnasium.make_vec"):
        assert any(needle in b for b in blocks)


@pytest.mark.parametrize("index", range(4))
def test_snippet_runs(index):
    code = snippets()[index]
    for needle, module in NEEDS.items():
        if f"import {needle}" in code or f"from {needle}" in code:
            pytest.importorskip(module)
    exec(compile(code, f"README snippet {index}", "exec"), {"__name__": "readme"})
