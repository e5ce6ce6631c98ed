"""Every code block of the docs and the README runs, so the docs cannot rot.

A page's ```python blocks run in order in one namespace (a later block may use an earlier one's
names), in a fresh folder. Its ```bash blocks run line by line there too: each command is a
`dilemmax ...` or `python ...` line (a trailing backslash joins lines; `#` starts a comment); a
`dilemmax` line runs in this process through the command's own entry point, ``dilemmax.cli.main``,
and so does a `dilemmax` command a python block starts with ``subprocess.run`` (docs/play.md's
stand-in server): the page shows the command, not a second interpreter, and a fresh one would
import the stack and compile again what this process holds. An HTML comment just before a
block changes how it runs:

    <!-- docs-test: skip <reason> -->            the block is not run; the reason is required
    <!-- docs-test: replace <old> => <new> -->   run with <old> replaced (a smaller size, say)

Blocks that need a model server, several hosts or a real model are skipped with their reason;
the "Use it from your RL code" blocks of docs/rl_libraries.md, which drive JaxMARL, SB3 and
Tianshou, run in tests/integration/test_readme_snippets.py instead. ```text blocks are output
and are not run.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import pytest

from dilemmax.envs import seat_spec

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
RL_LIBRARIES_SECTION = ("rl_libraries.md", "## Use it from your RL code")
COMMAND_TIMEOUT = 600  # seconds for one command (a tiny training compiles for a minute or two)

_BLOCK = re.compile(r"((?:<!-- docs-test:[^\n]*-->\n)*)```(python|bash)\n(.*?)```", flags=re.S)
_MARKER = re.compile(r"<!-- docs-test: (skip|replace) (.*?) -->")


@dataclass
class Block:
    page: str
    language: str
    code: str
    line: int
    skip: str = ""
    replacements: list[tuple[str, str]] = field(default_factory=list)

    def runnable_code(self) -> str:
        code = self.code
        for old, new in self.replacements:
            assert old in code, f"{self.where}: replace {old!r}: not in the block"
            code = code.replace(old, new)
        return code

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks_of(path: Path) -> list[Block]:
    text = path.read_text()
    name = path.relative_to(ROOT).as_posix()
    found = []
    for match in _BLOCK.finditer(text):
        block = Block(name, match.group(2), match.group(3), text.count("\n", 0, match.start()) + 1)
        for kind, value in _MARKER.findall(match.group(1)):
            if kind == "skip":
                block.skip = value.strip()
            else:
                old, sep, new = value.partition(" => ")
                assert sep, f"{block.where}: a replace marker reads `old => new`"
                block.replacements.append((old, new))
        if path.name == RL_LIBRARIES_SECTION[0]:
            start = text.find(RL_LIBRARIES_SECTION[1])
            if 0 <= start < match.start():
                block.skip = "run by tests/integration/test_readme_snippets.py"
        found.append(block)
    return found


def _commands(code: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", code)
    lines = [line.strip() for line in joined.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def _run_command(line: str, cwd: Path, where: str) -> None:
    """Runs a `dilemmax ...` line in this process (the command line's own entry point, with the
    suite's imports and compiled programs already loaded: a subprocess would pay a cold import
    of the stack per line), a `python -c CODE` line by executing CODE, and any other `python`
    line as a subprocess."""
    words = shlex.split(line, comments=True)
    if words[0] == "dilemmax":
        _run_in_process(words[1:], where, line)
    elif words[0] == "python" and len(words) == 3 and words[1] == "-c":
        exec(compile(words[2], where, "exec"), {"__name__": "__main__"})
    elif words[0] == "python":
        _run_subprocess([sys.executable, *words[1:]], cwd, where, line)
    else:
        pytest.fail(f"{where}: `{line}` is neither a dilemmax nor a python command; mark the block")


def _run_in_process(argv: list[str], where: str, line: str) -> None:
    status, _, errors = _main_in_process(argv)
    assert status == 0, f"{where}: `{line}` failed ({status}):\n{errors[-3000:]}"


def _main_in_process(argv: list[str]) -> tuple[int, str, str]:
    """``dilemmax ARGV`` through ``dilemmax.cli.main``: its exit status, stdout and stderr."""
    from dilemmax.cli import main

    output, errors = io.StringIO(), io.StringIO()
    # A command that hangs ends this worker with every thread's stack, so the test fails
    # (pytest-xdist reports the lost worker) instead of holding CI.
    faulthandler.dump_traceback_later(COMMAND_TIMEOUT, exit=True)
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(errors):
            status = main(argv)
    except SystemExit as exit_:  # argparse exits on a usage error
        status = exit_.code
    finally:
        faulthandler.cancel_dump_traceback_later()
    return status or 0, output.getvalue(), errors.getvalue()


def _dilemmax_runs_in_process(real_run):
    """``subprocess.run`` for a page's python blocks: a `dilemmax ...` command (a list or a
    string) runs through :func:`_main_in_process` with the ``env`` it was given; any other
    command, or one asking for more than ``check``, ``env``, ``capture_output`` and ``text``,
    starts a process as it would for a reader."""

    def run(args, *rest, **kwargs):
        words = shlex.split(args) if isinstance(args, str) else [str(word) for word in args]
        handled = {"check", "env", "capture_output", "text"}
        if rest or set(kwargs) - handled or not words or words[0] != "dilemmax":
            return real_run(args, *rest, **kwargs)
        env = kwargs.get("env")
        with mock.patch.dict(os.environ, env or {}, clear=env is not None):
            status, out, err = _main_in_process(words[1:])
        if kwargs.get("check") and status != 0:
            raise subprocess.CalledProcessError(status, args, out, err)
        if not kwargs.get("capture_output"):
            sys.stdout.write(out)
            sys.stderr.write(err)
            return subprocess.CompletedProcess(args, status)
        if not kwargs.get("text"):
            out, err = out.encode(), err.encode()
        return subprocess.CompletedProcess(args, status, out, err)

    return run


def _run_subprocess(words: list[str], cwd: Path, where: str, line: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # the suite's compilation cache included
    done = subprocess.run(
        words, cwd=cwd, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, env=env
    )
    assert done.returncode == 0, f"{where}: `{line}` failed:\n{done.stderr[-3000:]}"


def test_every_block_is_run_or_says_why_not():
    """A skipped block gives a reason; every page has its blocks found (a block whose fence is
    mistyped would silently not run)."""
    for path in PAGES:
        for block in blocks_of(path):
            if block.skip == "":
                continue
            assert len(block.skip) > 8, f"{block.where}: a skip needs its reason"
        fences = len(re.findall(r"^```(?:python|bash)$", path.read_text(), flags=re.M))
        assert fences == len(blocks_of(path)), path


@pytest.mark.slow
@pytest.mark.parametrize("page", [p.relative_to(ROOT).as_posix() for p in PAGES])
def test_the_page_code_runs(page, tmp_path, monkeypatch):
    blocks = [b for b in blocks_of(ROOT / page) if not b.skip]
    if not blocks:
        pytest.skip("no block of this page runs (each skipped one says why)")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    # A page may register a seat kind of its own (docs/seats.md's `constant:`): it must not
    # outlive the page, or a later test of this worker meets it under the same name.
    monkeypatch.setattr(seat_spec, "_KINDS", dict(seat_spec._KINDS))
    monkeypatch.setattr(seat_spec, "_LOADED", set(seat_spec._LOADED))
    monkeypatch.setattr(subprocess, "run", _dilemmax_runs_in_process(subprocess.run))
    namespace = {"__name__": "docs_snippet"}
    for block in blocks:
        code = block.runnable_code()
        if block.language == "python":
            exec(compile(code, block.where, "exec"), namespace)
        else:
            for line in _commands(code):
                _run_command(line, tmp_path, block.where)


def test_a_dilemmax_command_a_block_starts_runs_in_this_process(tmp_path):
    """A page's ``subprocess.run(["dilemmax", ...])`` is the command's entry point in this
    process, with the process's exit status, output and ``check``; other commands start one."""
    started = []
    run = _dilemmax_runs_in_process(lambda *args, **kwargs: started.append(args[0]))
    missing = ["dilemmax", "view", str(tmp_path / "missing")]
    done = run(missing, capture_output=True, text=True)
    assert done.returncode == 2 and "no such file or folder" in done.stderr and started == []
    with pytest.raises(subprocess.CalledProcessError):
        run(missing, check=True, env={**os.environ, "DOCS_SNIPPET_ONLY": "1"})
    assert "DOCS_SNIPPET_ONLY" not in os.environ and started == []
    run(["python", "-c", "pass"], check=True)
    assert started == [["python", "-c", "pass"]]
