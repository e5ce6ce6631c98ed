"""The tutorial notebook (docs/tutorial.ipynb) runs from top to bottom, as a reader runs it.

It is executed by a Jupyter kernel (nbclient) in a fresh folder, with JAX's compilation cache
shared with the test suite's. Its cells must leave no error; a few outputs are checked so that a
cell that stops doing what the text says fails here. The committed notebook carries no outputs
(they would go stale).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "docs" / "tutorial.ipynb"


def _text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", "") or str(output.get("data", {}).get("text/plain", "")))
    return "".join(parts)


def test_the_committed_notebook_has_no_outputs_and_installs_itself_first():
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)
    assert "pip" in code[0].source and 'find_spec("dilemmax")' in code[0].source


@pytest.mark.slow
def test_the_tutorial_notebook_runs(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # The kernel inherits this environment: the suite's compilation cache, and this checkout.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    client = nbclient.NotebookClient(
        notebook,
        timeout=600,  # per cell: training compiles for a minute or two on a loaded CPU
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    outputs = "\n".join(_text(c) for c in notebook.cells if c.cell_type == "code")
    for expected in ("fatality (1140, 8)", "config.json", "trained ", "never_queries", "calls"):
        assert expected in outputs, expected
    assert (tmp_path / "runs" / "tutorial" / "config.json").is_file()
