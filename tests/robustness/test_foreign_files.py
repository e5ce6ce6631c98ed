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
