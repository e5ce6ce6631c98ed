"""Issue #44: nothing a user made is overwritten. A run folder belongs to the command that wrote
it (its lock's record, dilemmax.runlock): every other command that writes a folder refuses it,
and a file output (a replay page, a rollout's files) never lands on a run's own files. Each
refusal is one line naming the folder, what wrote it and what to do, before any work.

The CLI runs in-process (``dilemmax.cli.main``); every probe stops before anything plays,
trains or replays (the work is patched to fail the test if reached).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_errors import _fails_cleanly  # the one-line, exit-2 check of every CLI probe

from dilemmax.cli import main
from dilemmax.runlock import RunFolderError, RunLock, is_own, last_writer
from dilemmax.view.page import MARKER
from dilemmax.view.runs import Run

# The kinds of run a folder's lock records, one per command that writes a folder.
KINDS = [
    "play", "experiment", "scenarios evaluate", "training", "redteam play", "redteam ablate",
    "redteam gap", "redteam label", "play merge", "experiment merge", "experiment combine",
]  # fmt: skip


def _run_folder(folder: Path, kind: str, **files: str) -> Path:
    """A finished run of ``kind`` as its folder holds it: the lock's record and its files."""
    folder.mkdir(parents=True)
    with RunLock(folder, kind):
        for name, text in files.items():
            (folder / name.replace("_", ".", 1)).write_text(text)
    return folder


def _kept(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name != ".lock"}


@pytest.fixture
def nothing_runs(monkeypatch):
    """Fails a probe that gets past its checks into playing, training or replaying."""

    def forbidden(*args, **kwargs):
        raise AssertionError("the command got past its checks")

    monkeypatch.setattr("dilemmax.train.run.TrainingRun._train", forbidden)
    monkeypatch.setattr("dilemmax.llm.session.Transcript", forbidden)  # opened past the lock
    monkeypatch.setattr("dilemmax.view.cli.read_run", forbidden)
    monkeypatch.setattr("dilemmax.cli.Arena.run", forbidden)


# ----------------------------------------------------------------------------- the one mechanism
@pytest.mark.parametrize("writer", KINDS)
def test_every_kind_of_run_refuses_a_folder_another_kind_wrote(tmp_path, writer):
    for other in KINDS:
        folder = _run_folder(tmp_path / other.replace(" ", "_"), writer)
        if is_own(writer, other):  # its own folder (a resume, a rerun), or under a former name
            RunLock(folder, other).acquire().release()
            continue
        with pytest.raises(RunFolderError) as refused:
            RunLock(folder, other).acquire()
        message = str(refused.value)
        assert "\n" not in message and str(folder) in message and f"(`{writer}`)" in message
        assert "choose a new folder" in message
        assert last_writer(folder) == writer  # the record is left as it was


def test_a_redteam_folder_recorded_under_its_former_name_is_still_its_own(tmp_path):
    folder = tmp_path / "population"
    folder.mkdir()
    (folder / ".lock").write_text("play pid 12\n")  # what `redteam play` recorded before
    RunLock(folder, "redteam play").acquire().release()
    assert last_writer(folder) == "redteam play"


@pytest.mark.parametrize("command", ["play", "experiment"])
def test_a_merged_run_is_its_commands_own(tmp_path, command):
    """`play merge` writes the whole run, which `play --resume` continues (and the same for
    experiments); a combine is another command's folder."""
    merged = _run_folder(tmp_path / "merged", f"{command} merge")
    RunLock(merged, command).acquire().release()
    with pytest.raises(RunFolderError, match="another command"):
        RunLock(merged, "experiment combine").acquire()


# ----------------------------------------------------------------------------- folders
def test_play_refuses_a_scenarios_evaluation_folder(capsys, tmp_path, nothing_runs):
    scored = _run_folder(tmp_path / "scores", "scenarios evaluate", results_json='{"rows": []}')
    kept = _kept(scored)
    argv = ["play", "moral_hazard", "--seats", "scripted:teacher", "--episodes", "1",
            "--no-progress", "--out", str(scored)]  # fmt: skip
    err = _fails_cleanly(capsys, argv)
    assert str(scored) in err and "(`scenarios evaluate`)" in err and "new folder" in err
    assert _kept(scored) == kept


@pytest.mark.slow
def test_train_refuses_a_play_run(capsys, tmp_path, nothing_runs):
    played = _run_folder(tmp_path / "play", "play", transcript_jsonl='{"type": "run"}\n')
    kept = _kept(played)
    err = _fails_cleanly(capsys, ["train", "consequence", "--out", str(played), "--no-progress"])
    assert str(played) in err and "(`play`)" in err and "new folder" in err
    assert _kept(played) == kept  # no config.json, no metrics.jsonl written into it


def test_finetune_refuses_a_play_run(capsys, tmp_path):
    pytest.importorskip("dilemmax.finetune.cli")
    played = _run_folder(tmp_path / "play", "play", transcript_jsonl="{}\n")
    err = _fails_cleanly(capsys, ["finetune", "data", str(played)])
    assert "(`play`)" in err and _kept(played) == {"transcript.jsonl": b"{}\n"}


# ----------------------------------------------------------------------------- files
RUN_FILES = [
    ("play", "transcript.jsonl"),
    ("play", "results.json"),
    ("training", "config.json"),
]


@pytest.mark.parametrize(("kind", "name"), RUN_FILES)
def test_view_never_writes_its_page_over_a_runs_file(capsys, tmp_path, nothing_runs, kind, name):
    run = _run_folder(tmp_path / "run", kind, **{name.replace(".", "_"): "the run's own\n"})
    err = _fails_cleanly(capsys, ["view", str(run), "--out", str(run / name)])
    assert str(run / name) in err and "not a page of dilemmax view" in err
    assert (run / name).read_text() == "the run's own\n"


def test_view_refuses_a_name_a_runs_files_may_take_even_before_they_exist(
    capsys, tmp_path, nothing_runs
):
    run = _run_folder(tmp_path / "run", "play", transcript_jsonl="{}\n")  # results.json to come
    err = _fails_cleanly(capsys, ["view", str(run), "--out", str(run / "results.json")])
    assert "the run folder of `play`" in err and not (run / "results.json").exists()


def test_view_refuses_any_file_it_did_not_write(capsys, tmp_path, nothing_runs):
    notes = tmp_path / "notes.html"
    notes.write_text("<p>mine</p>")
    err = _fails_cleanly(capsys, ["view", str(tmp_path), "--out", str(notes)])
    assert "not a page of dilemmax view" in err and notes.read_text() == "<p>mine</p>"


def test_view_rerenders_its_own_page_and_writes_pages_into_run_folders(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.setattr("dilemmax.view.cli.read_run", lambda *a, **k: Run("t", "play", []))
    monkeypatch.setattr(
        "dilemmax.view.cli.write_page", lambda run, out: Path(out).write_text(f"{MARKER} new")
    )
    run = _run_folder(tmp_path / "run", "play", transcript_jsonl="{}\n")
    (run / "view.html").write_text(f"<!DOCTYPE html>\n{MARKER}\nold page")
    assert main(["view", str(run)]) == 0  # the default page beside the run: a re-render
    assert main(["view", str(run), "--out", str(run / "second.html")]) == 0
    assert (run / "view.html").read_text().endswith("new") and (run / "second.html").exists()


@pytest.mark.parametrize("option", ["--out", "--json", "--gif"])
def test_rollout_never_writes_into_another_commands_run_folder(
    capsys, tmp_path, nothing_runs, option
):
    run = _run_folder(tmp_path / "run", "play", transcript_jsonl="{}\n")
    target = run / "transcript.jsonl"
    argv = ["rollout", "open_cleanup", "--episodes", "1", option, str(target)]
    err = _fails_cleanly(capsys, argv)
    assert f"{option} {target}" in err and "the run folder of `play`" in err
    assert target.read_text() == "{}\n"
