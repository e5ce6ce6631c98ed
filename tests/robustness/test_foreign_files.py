"""Hand-written and foreign transcripts and rollout files (issue #44): the formats are
documented (docs/transcripts.md) so other tools write them, and every field of every line is
checked before a resume replays a reply or a page replays an episode. A wrong field is one line
naming the file, the line and the field, never a traceback from JAX or int()."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dilemmax.llm.transcript import Transcript, TranscriptError, run_key

IDENTITY = {"env": "moral_hazard", "seed": 0}
GAMES = ["moral_hazard-v0"]


def _lines(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _header(**fields) -> dict:
    return {"type": "run", "run": run_key(IDENTITY), "identity": IDENTITY, **fields}


def _call(**fields) -> dict:
    return {"type": "call", "key": "main|e0|n0|t0|agent_0|act0", "prompt_hash": "0" * 16,
            "reply": "ACTION QUERY", "prompt_tokens": 3, **fields}  # fmt: skip


# --------------------------------------------------------------------------- resume
@pytest.mark.parametrize(
    "rows, line, words",
    [
        # "recorded under -, 1, _, a, d, h, l, m, o, r, v, z" before: the text read as a list
        ([_header(games="moral_hazard-v0")], 1,
         "games='moral_hazard-v0' is not allowed: expected a list of strings"),
        ([_header(games=GAMES, protocols={"moral_hazard": 1})], 1,
         "protocols={'moral_hazard': 1} is not allowed: expected a list of strings"),
        ([_header(identity=["env"])], 1, "identity=['env'] is not allowed: expected a mapping"),
        ([_header(games=GAMES), _call(prompt_tokens="x")], 2,
         "prompt_tokens='x' is not allowed: expected an integer, or None"),
        ([_header(games=GAMES), _call(), _call(key=7)], 3,
         "key=7 is not allowed: expected a string"),
        ([_header(games=GAMES), _call(latency_s=[1])], 2, "latency_s=[1] is not allowed"),
        ([_header(games=GAMES), {"type": "episode", "id": "main|e0", "steps": "3"}], 2,
         "steps='3' is not allowed: expected an integer"),
    ],
)  # fmt: skip
def test_resume_names_the_line_and_field_of_a_transcript_from_elsewhere(
    tmp_path, rows, line, words
):
    path = _lines(tmp_path / "transcript.jsonl", rows)
    with pytest.raises(TranscriptError) as error:
        Transcript(path, IDENTITY, resume=True, games=GAMES)
    message = str(error.value)
    assert message.startswith(f"{path} line {line}: {words}") and "\n" not in message


def test_a_transcript_whose_fields_hold_what_they_should_resumes(tmp_path):
    path = _lines(tmp_path / "transcript.jsonl", [_header(games=GAMES), _call()])
    with Transcript(path, IDENTITY, resume=True, games=GAMES) as transcript:
        assert list(transcript.recorded) == [_call()["key"]]


# --------------------------------------------------------------------------- dilemmax view
START = {"env": "moral_hazard", "options": {}, "key": [0, 3], "config": None}  # 3 steps
STEP = {"actions": {"agent_0": 5, "agent_1": 5}, "rewards": {"agent_0": 0.0, "agent_1": 0.0}}
STEPS = [{"episode": 0, "t": t, **STEP} for t in range(3)]
ROLLOUT = [{"episode": 0, "start": START}, *STEPS]


def _view_refuses(capsys, path: Path, line: int, words: str) -> None:
    from dilemmax.cli import main

    assert main(["view", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"dilemmax view: error: {path} line {line}"), err
    assert err[len(f"dilemmax view: error: {path} line {line}")] in ": ", err
    assert words in err, err
    assert not path.with_suffix(".html").exists()


@pytest.mark.parametrize(
    "rows, line, words",
    [
        # a JAX traceback before ("scan got values with different leading axis sizes")
        ([ROLLOUT[0], *({"episode": 0, "t": t, **STEP} for t in range(500))], 5,
         "episode 0 has 500 step lines, more than an episode of moral_hazard has (3)"),
        # ValueError: invalid literal for int() before
        ([{**ROLLOUT[0], "episode": "x"}, *STEPS], 1,
         "episode='x' is not allowed: expected an integer"),
        ([*ROLLOUT, {"episode": 0, "t": 2, **STEP}], 5, "a second line of episode 0's step t=2"),
        ([ROLLOUT[0], STEPS[0], STEPS[2]], 3, "t=2, but episode 0 has no step t=1"),
        ([ROLLOUT[0], {**STEPS[0], "t": "0"}], 2, "t='0' is not allowed: expected an integer"),
        ([ROLLOUT[0], {**STEPS[0], "actions": {"agent_0": 19, "agent_1": 5}}], 2,
         "actions.agent_0=19 at step 0 is not allowed: expected one of its actions 0..18"),
        ([ROLLOUT[0], {**STEPS[0], "actions": {"agent_0": "5", "agent_1": 5}}], 2,
         "expected a mapping of strings to integers"),
        ([ROLLOUT[0], {**STEPS[0], "actions": {"agent_0": 5}}], 2,
         "actions name agents ['agent_0']; moral_hazard has agent_0, agent_1"),
        ([ROLLOUT[0], {"episode": 0, "t": 0}], 2, "a step line without actions"),
        ([{"episode": 0, "start": {**START, "key": [1]}}, *STEPS], 1,
         "start.key=[1] is not allowed: expected 2 integers"),
        ([{"episode": 0, "start": {**START, "env": 7}}, *STEPS], 1,
         "start.env=7 is not allowed: expected a string"),
        ([*ROLLOUT, {"episode": 0, "metrics": [1]}], 5, "metrics=[1] is not allowed"),
    ],
)  # fmt: skip
def test_view_names_the_line_and_field_of_a_rollout_file_from_elsewhere(
    tmp_path, capsys, rows, line, words
):
    _view_refuses(capsys, _lines(tmp_path / "rollout.jsonl", rows), line, words)


def _episode(**fields) -> dict:
    actions = {"agent_0": [5, 17, 9], "agent_1": [5, 17, 9]}
    return {"type": "episode", "id": "main|e0", "part": "main", "episode": 0, "steps": 3,
            "start": START, "actions": actions, **fields}  # fmt: skip


@pytest.mark.parametrize(
    "rows, line, words",
    [
        ([_header(games="moral_hazard-v0"), _episode()], 1,
         "games='moral_hazard-v0' is not allowed: expected a list of strings"),
        ([_header(games=GAMES), _call(step="x"), _episode()], 2,
         "step='x' is not allowed: expected an integer"),
        ([_header(games=GAMES), _episode(actions={"agent_0": [5] * 4, "agent_1": [5] * 4},
                                         steps=4)], 2,
         "actions of 4 steps, more than an episode of moral_hazard has (3)"),
        ([_header(games=GAMES), _episode(steps=2)], 2, "steps=2, but its actions hold 3 steps"),
        ([_header(games=GAMES), _episode(actions={"agent_0": ["5"], "agent_1": [5]})], 2,
         "expected a mapping of strings to lists of integers"),
        ([_header(games=GAMES), _episode(start={**START, "config": "none"})], 2,
         "start.config='none' is not allowed: expected a list, or None"),
    ],
)  # fmt: skip
def test_view_names_the_line_and_field_of_a_transcript_from_elsewhere(
    tmp_path, capsys, rows, line, words
):
    _view_refuses(capsys, _lines(tmp_path / "transcript.jsonl", rows), line, words)


def test_a_hand_written_rollout_file_that_holds_what_it_should_is_read(tmp_path):
    from dilemmax.view.runs import read_run

    run = read_run(_lines(tmp_path / "rollout.jsonl", ROLLOUT))
    assert [e.actions.tolist() for e in run.episodes] == [[[5, 5]] * 3]
