"""The tutorial notebook (docs/tutorial.ipynb) runs from top to bottom, as a reader runs it.

Its cells run through IPython's shell, the executor a Jupyter kernel hands each cell to, in this
test process and a fresh folder: the programs the suite has already compiled (the games' steps,
the zoo's policies) are the notebook's too, where a kernel of its own would import the whole
stack and compile them again. Its cells must leave no error; a few outputs are checked so that a
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


def _run_cells(cells) -> list[str]:
    """Each code cell's printed output, run in order in one IPython shell (no history file, no
    display of its own); the first cell that raises fails the test, naming its position."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell(config=config)
    outputs = []
    try:
        for index, cell in enumerate(cells):
            with capture_output() as captured:
                result = shell.run_cell(cell.source, store_history=False)
            outputs.append(captured.stdout + "".join(str(o.data) for o in captured.outputs))
            error = result.error_before_exec or result.error_in_exec
            assert error is None, f"cell {index} raised {error!r}:\n{captured.stdout[-2000:]}"
    finally:
        shell.cleanup()
    return outputs


@pytest.mark.slow
def test_the_tutorial_notebook_runs(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("IPython")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", os.environ.get("OPENAI_API_KEY", "unused"))
    code = [c for c in notebook.cells if c.cell_type == "code"]
    outputs = "\n".join(_run_cells(code))
    for expected in ("fatality (1140, 8)", "config.json", "trained ", "never_queries", "calls"):
        assert expected in outputs, expected
    assert (tmp_path / "runs" / "tutorial" / "config.json").is_file()
