"""Hostile-but-fair probes of language-model play (issue #30): client and sampling options,
a misbehaving server (429 with Retry-After, no choices, lone surrogates), resuming and output
paths. Every mistake is one line on stderr and exit 2 before any model call; every answered
call is kept. No network: the server is dilemmax.llm.server on 127.0.0.1."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli_errors import _fails_cleanly  # the one-line, exit-2 check of every CLI probe

from dilemmax.cli import main
from dilemmax.envs.options import OptionError
from dilemmax.llm import sampling
from dilemmax.llm.client import ChatRequest
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.openai_client import OpenAIClient
from dilemmax.llm.retrying import RetryPolicy, parse_retry_after
from dilemmax.llm.server import LocalChatServer
from dilemmax.llm.test_resume import reply  # the same planted moral-hazard replies
from dilemmax.llm.transcript import Transcript, TranscriptError, _json_line, read_lines

ROOT = Path(__file__).resolve().parents[2]
REQUEST = ChatRequest(({"role": "user", "content": "go"},))
MH = ["play", "moral_hazard", "--no-progress", "--episodes", "1", "--envs", "2"]


@pytest.fixture(scope="module")
def server():
    with LocalChatServer(reply) as running:
        yield running


def _play(server, out: Path | None = None, *extra: str) -> list[str]:
    argv = [*MH, "--seats", "openai:tiny", "--base-url", server.base_url, *extra]
    return argv + (["--out", str(out)] if out is not None else [])


# --------------------------------------------------------------------------- client options
BAD_OPTIONS = [
    (["--timeout", "-1"], "--timeout=-1.0"),
    (["--timeout", "nan"], "--timeout=nan"),
    (["--timeout", "inf"], "--timeout=inf"),
    (["--max-attempts", "0"], "--max-attempts=0"),
    (["--concurrency", "0"], "--concurrency=0"),
    (["--max-tokens", "-5"], "--max-tokens=-5"),
    (["--temperature", "-3"], "--temperature=-3.0"),
    (["--temperature", "nan"], "--temperature=nan"),
    (["--temperature", "2.5"], "0..2"),
    (["--top-p", "1.5"], "--top-p=1.5"),
    (["--model-seed", "-1"], "--model-seed=-1"),
    (["--model-seed", "99999999999999999999"], "--model-seed=99999999999999999999"),
    (["--seed", "99999999999999999999"], "--seed=99999999999999999999"),
    (["--seed", "-1"], "--seed=-1"),
    (["--timeout", "1e300"], "> 0 and <= 86400"),
    (["--base-url", "localhost:8000"], "--base-url 'localhost:8000'"),
]
BAD_SEATS = [
    ("openai:tiny,temperature=abc", "temperature='abc'"),
    ("openai:tiny,temperature=nan", "temperature='nan'"),
    ("openai:tiny,max_tokens=0", "max_tokens='0'"),
    ("openai:tiny,max_tokens=1.5", "an integer >= 1"),
    ("openai:tiny,top_p=-0.1", "top_p='-0.1'"),
    ("openai:tiny,seed=1e30", "seed='1e30'"),
    ("openai:tiny,bogus=1", "bogus"),
    ("hf:/no/model,max_new_tokens=-1", "max_new_tokens='-1'"),
    ("hf:/no/model,batch_size=0", "batch_size='0'"),
    ("trained:/no/run,seed=abc", "seed='abc'"),
    ("trained:/no/run,sed=3", "['sed'] are not known"),
    ("trained:/no/run,greedy=false", "greedy takes no value"),
    ("scripted:teacher,fast=1", "scripted seats take: none"),
]


def test_bad_client_options_are_refused_before_any_call_or_folder(server, capsys, tmp_path):
    out = tmp_path / "run"
    for extra, words in BAD_OPTIONS:
        err = _fails_cleanly(capsys, _play(server, out, *extra))
        assert words in err and "expected" in err, (extra, err)
    for spec, words in BAD_SEATS:
        argv = _play(server, out, "--seat", f"agent_0={spec}")
        err = _fails_cleanly(capsys, argv)
        assert words in err and spec in err, (spec, err)
    assert server.received == 0 and not out.exists()


def test_the_ranges_are_openais():
    for bad in (-0.01, 2.01, math.nan):
        with pytest.raises(OptionError, match="0..2"):
            OpenAIClient("m", GenerateConfig(base_url="http://127.0.0.1:9/v1", temperature=bad))
    with pytest.raises(OptionError, match="max_tokens"):
        OpenAIClient("m", GenerateConfig(base_url="http://127.0.0.1:9/v1", max_tokens=0))
    for good in (0.0, 2.0):
        config = GenerateConfig(base_url="http://127.0.0.1:9/v1", temperature=good, top_p=1.0)
        OpenAIClient("m", config)


@settings(max_examples=50, deadline=None)
@given(
    st.one_of(st.text(max_size=30), st.floats(), st.integers(-(2**1100), 2**1100), st.booleans()),
    st.sampled_from(sorted({**sampling.OPENAI, **sampling.CLIENT})),
)
def test_option_check_is_total(value, name):
    allowed = {**sampling.OPENAI, **sampling.CLIENT}[name]
    try:
        number = sampling.check_option(value, allowed, name)
    except OptionError as error:
        assert str(error).startswith(f"{name}=") and "expected" in str(error)
        return
    assert allowed.admits(number) and (allowed.kind == "int" or math.isfinite(number))
    assert isinstance(number, int) if allowed.kind == "int" else isinstance(number, float)


@pytest.mark.slow
def test_a_seat_option_mistake_is_one_line_in_a_real_process(server, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    argv = _play(server, tmp_path / "run", "--seat", "agent_0=openai:m,temperature=abc")
    done = subprocess.run(
        [sys.executable, "-m", "dilemmax.cli", *argv], env=env, capture_output=True, text=True
    )
    err = done.stderr.strip()
    assert done.returncode == 2 and "Traceback" not in err and err.count("\n") == 0, err
    assert "temperature='abc'" in err


# --------------------------------------------------------------------------- a misbehaving server
def _client(server, max_retry_after: float = 60.0, **options) -> OpenAIClient:
    config = GenerateConfig(base_url=server.base_url, **{"timeout": 2.0, **options})
    return OpenAIClient("tiny", config, RetryPolicy(0.01, 0.02, max_retry_after))


def test_retry_after_is_honoured_up_to_its_cap():
    with LocalChatServer(lambda body: "FINAL A", {0: "retry_after"}, retry_after="1") as server:
        [completion] = _client(server).complete([REQUEST])
        assert completion.text == "FINAL A" and completion.retries == 1
        assert server.arrivals[1] - server.arrivals[0] >= 1.0  # never sooner than asked
    with LocalChatServer(lambda body: "FINAL A", {0: "retry_after"}, retry_after="30") as server:
        [completion] = _client(server, max_retry_after=0.2).complete([REQUEST])
        assert completion.text == "FINAL A"
        assert 0.2 <= server.arrivals[1] - server.arrivals[0] < 2.0  # capped


def test_retry_after_reads_seconds_and_http_dates():
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    later = (now + timedelta(seconds=7)).strftime("%a, %d %b %Y %H:%M:%S GMT")
    assert parse_retry_after(later, now) == 7.0
    assert parse_retry_after("Thu, 01 Jan 2026 11:00:00 GMT", now) == 0.0  # already past
    assert parse_retry_after(" 3 ") == 3.0 and parse_retry_after("-4") == 0.0
    assert parse_retry_after("soon") is None and parse_retry_after("inf") is None


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=60))
def test_retry_after_parser_is_total(text):
    seconds = parse_retry_after(text)
    assert seconds is None or (math.isfinite(seconds) and seconds >= 0)


def test_a_reply_without_choices_is_retried_and_named():
    with LocalChatServer(lambda body: "FINAL A", {0: "no_choices"}) as server:
        [completion] = _client(server).complete([REQUEST])
        assert completion.text == "FINAL A" and completion.retries == 1
    with LocalChatServer(lambda body: "x", {0: "no_choices", 1: "no_choices"}) as server:
        [completion] = _client(server, max_attempts=2).complete([REQUEST])
        assert "no choices" in completion.error and completion.retries == 1


@pytest.mark.parametrize("usage", [{"prompt_tokens": "abc"}, {"completion_tokens": -1.5}, None])
@pytest.mark.parametrize("content", ["FINAL A", None, ["FINAL A"]])
def test_odd_usage_or_content_never_loses_the_call(usage, content):
    message = SimpleNamespace(content=content)
    usage = None if usage is None else SimpleNamespace(**usage)
    response = SimpleNamespace(choices=[SimpleNamespace(message=message)], usage=usage)
    completion = OpenAIClient._completion(response, 0.1, 0)
    assert completion.text == ("FINAL A" if content == "FINAL A" else "")
    assert completion.prompt_tokens == completion.completion_tokens == 0


@pytest.mark.slow
def test_play_names_a_call_that_got_no_choices(capsys, tmp_path):
    with LocalChatServer(reply, {0: "no_choices"}) as server:
        argv = _play(server, tmp_path / "run", "--max-attempts", "1")
        err = _fails_cleanly(capsys, argv)
    assert "no choices" in err and "after 1 attempt)" in err and "retries" not in err


# --------------------------------------------------------------------------- the transcript
@pytest.mark.slow
def test_replies_with_lone_surrogates_are_all_kept_and_resume_reads_them_back(capsys, tmp_path):
    out = tmp_path / "run"
    faults = {i: "surrogate" for i in range(0, 40, 3)}
    with LocalChatServer(reply, faults) as server:
        assert main(_play(server, out)) == 0
        answered = server.answered
    calls = [r for r in read_lines(out / "transcript.jsonl")[0] if r["type"] == "call"]
    assert len(calls) == answered and sum("\ud800" in r["reply"] for r in calls) >= 2
    first = json.loads((out / "results.json").read_text())
    with LocalChatServer(lambda body: pytest.fail("a recorded call was asked again")) as server:
        assert main(_play(server, out, "--resume")) == 0
        assert server.received == 0
    again = [r for r in read_lines(out / "transcript.jsonl")[0] if r["type"] == "call"]
    resumed = json.loads((out / "results.json").read_text())
    assert again == calls and resumed["episodes"] == first["episodes"]
    assert resumed["calls"]["openai:tiny"]["replayed"] == len(calls)


SURROGATES = st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(st.characters(), SURROGATES), max_size=30).map("".join))
def test_every_reply_text_is_written_and_read_back_identically(text):
    # A high surrogate right before a low one reads back as the pair's one character (JSON
    # has no way to say otherwise); a server's decoded JSON never holds that.
    if any(
        "\ud800" <= a <= "\udbff" and "\udc00" <= b <= "\udfff"
        for a, b in zip(text, text[1:], strict=False)
    ):
        return
    row = {"type": "call", "reply": text, "fields": {text: [text]}}
    line = _json_line(row)
    line.encode("utf-8")  # always encodable
    assert line.endswith("\n") and line.count("\n") == 1 and json.loads(line) == row


@pytest.mark.slow
def test_resume_with_nothing_to_resume_is_refused(server, capsys, tmp_path):
    missing = tmp_path / "missing"
    err = _fails_cleanly(capsys, _play(server, missing, "--resume"))
    assert "--resume" in err and str(missing) in err and "no transcript.jsonl" in err
    assert not missing.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no transcript.jsonl" in _fails_cleanly(capsys, _play(server, empty, "--resume"))
    with pytest.raises(TranscriptError, match="no .* to continue"):
        Transcript(empty / "transcript.jsonl", {}, resume=True)
    assert server.received == 0


@pytest.mark.slow
@pytest.mark.parametrize("first", [b"\x00\xff garbage\n", b'{"type": "call", "key": "k"}\n', b"\n"])
def test_a_damaged_first_line_is_named_as_damaged(server, capsys, tmp_path, first):
    out = tmp_path / "run"
    out.mkdir()
    (out / "transcript.jsonl").write_bytes(first + b'{"type": "call", "key": "x"}\n')
    err = _fails_cleanly(capsys, _play(server, out, "--resume"))
    assert "line 1 is damaged" in err and str(out / "transcript.jsonl") in err
    assert "another run" not in err and server.received == 0


# --------------------------------------------------------------------------- output paths
@pytest.mark.slow
def test_unusable_output_paths_are_refused_before_any_call(server, capsys, tmp_path):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for extra, words in [
        (["--out", str(a_file)], "--out"),
        (["--out", "/proc/x"], "--out /proc/x cannot be written"),
        (["--json", "/proc/x/r.json"], "--json /proc/x/r.json cannot be written"),
        (["--json", str(tmp_path)], "is a folder"),
    ]:
        err = _fails_cleanly(capsys, _play(server, None, *extra))
        assert words in err, (extra, err)
    assert a_file.read_text() == "x" and server.received == 0


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=200))
def test_a_transcript_of_random_bytes_resumes_or_is_refused_by_name(tmp_path, data):
    path = tmp_path / "transcript.jsonl"
    path.write_bytes(data)
    try:
        with Transcript(path, {"probe": 1}, resume=True):
            pass
    except TranscriptError as error:
        assert str(path) in str(error)


def test_an_hf_folder_that_is_not_a_model_is_refused_before_the_run_folder(capsys, tmp_path):
    out, model = tmp_path / "run", tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    err = _fails_cleanly(capsys, [*MH, "--seats", f"hf:{model}", "--out", str(out)])
    assert str(model) in err and "model_type" in err and not out.exists()


def test_a_failed_start_leaves_no_folder_behind(server, capsys, tmp_path):
    out = tmp_path / "run"
    argv = _play(server, out, "--seat", "agent_0=trained:/no/such/run")
    assert "cannot load trained seat" in _fails_cleanly(capsys, argv)
    assert not out.exists()  # so the corrected command needs no --resume
    out.mkdir()
    _fails_cleanly(capsys, argv)
    assert out.is_dir() and not (out / "transcript.jsonl").exists()  # the user's folder stays


# --------------------------------------------------------------------------- a real server's API
# (issue #35) What a server with a narrower API than OpenAI's does to a run: a field it does not
# know (422, as `transformers serve` answers top_k), no structured output (400), structured
# output taken and ignored. The grid game's prompts carry a JSON schema; moral hazard's do not.
HARVEST = ["play", "open_harvest", "--set", "num_agents=2", "--max-steps", "2", "--episodes",
           "2", "--envs", "2", "--no-progress"]  # fmt: skip
JSON_MOVE = '{"reason": "apples ahead", "action": "move_up"}'


def _harvest(server, out: Path, *extra: str) -> list[str]:
    return [*HARVEST, "--seats", "openai:tiny", "--base-url", server.base_url, "--out", str(out),
            *extra]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("seat", ["openai:tiny", "inspect:openai-api/local/tiny"])
def test_a_seat_option_the_server_refuses_says_to_rerun_not_to_resume(capsys, tmp_path, seat):
    out = tmp_path / "run"
    with LocalChatServer(reply, refused_fields=("top_k",)) as server:
        argv = [*MH, "--seats", f"{seat},top_k=5", "--base-url", server.base_url]
        err = _fails_cleanly(capsys, [*argv, "--out", str(out)])
    assert "422" in err and "Unexpected fields in the request: {'top_k'}" in err
    assert "after 1 attempt)" in err and "run the same command again" in err
    assert "--resume" not in err and not out.exists()  # nothing was recorded: nothing to resume


@pytest.mark.slow
def test_a_run_that_recorded_calls_still_says_resume(capsys, tmp_path):
    out = tmp_path / "run"
    with LocalChatServer(reply, {3: "500"}) as server:
        err = _fails_cleanly(capsys, _play(server, out, "--max-attempts", "1", "--envs", "1"))
        assert "--resume continues from here" in err
        assert main(_play(server, out, "--envs", "1", "--resume")) == 0


@pytest.mark.slow
def test_a_server_without_structured_output_is_recorded_per_seat(capsys, tmp_path):
    """The fallback to plain text: one printed line, one seat event in the transcript, the
    refusal and the mode on each call, the retry counted, and results.json naming the mode asked
    for, the mode in effect and the call it switched at; a resume reads it all back."""
    out = tmp_path / "run"
    with LocalChatServer(lambda body: JSON_MOVE, structured_output=False) as server:
        assert main(_harvest(server, out)) == 0
        received = server.received
        err = capsys.readouterr().err
        assert main(_harvest(server, out, "--resume")) == 0 and server.received == received
    assert err.count("the server refused json_schema output") == 1
    assert "response_format is not supported" in err
    rows = read_lines(out / "transcript.jsonl")[0]
    calls = [r for r in rows if r["type"] == "call"]
    refused = [r for r in calls if r.get("output_refused")]
    [event] = [r for r in rows if r["type"] == "seat"]
    assert {r["output"] for r in calls} == {"text"} and len(calls) == 8 and refused
    assert sum(r["retries"] for r in calls) == len(refused) == received - len(calls)
    assert event["event"] == "output_fallback" and event["seat"] == "openai:tiny"
    assert (event["requested"], event["in_effect"]) == ("json_schema", "text")
    assert event["call"] == refused[0]["key"] and "400" in event["error"]
    seat = json.loads((out / "results.json").read_text())["calls"]["openai:tiny"]
    assert (seat["output_requested"], seat["output_in_effect"]) == ("json_schema", "text")
    assert seat["output_switched"]["call"] == calls[0]["key"] == "main|e0|n0|t0|agent_0|act0"
    assert seat["output_switched"]["error"] == refused[0]["output_refused"]
    assert seat["retries"] == len(refused) and seat["json_mode_calls"] == 0
    assert "json_schema>text" in capsys.readouterr().out  # the resumed run's table


@pytest.mark.slow
def test_a_server_that_ignores_the_response_format_shows_in_the_json_count(capsys, tmp_path):
    with LocalChatServer(lambda body: "I go up: move_up") as server:
        assert main(_harvest(server, tmp_path / "run")) == 0
        assert all("response_format" in body for body in server.bodies)
    seat = json.loads((tmp_path / "run" / "results.json").read_text())["calls"]["openai:tiny"]
    assert (seat["json_mode_calls"], seat["json_valid"], seat["json_valid_rate"]) == (8, 0, 0.0)
    assert seat["output_in_effect"] == "json_schema" and seat["output_switched"] is None
    calls_table = capsys.readouterr().out.split("model calls:")[1]  # after the plan printed first
    [row] = [line for line in calls_table.splitlines() if "openai:tiny  " in line]
    assert row.split()[-2:] == ["json_schema", "0/8"]


# A call line as transcripts wrote it before output modes (and reasoning and cached tokens) were
# recorded.
OLD_CALL = {
    "type": "call", "key": "main|e0|n0|t0|agent_0|act0", "part": "main", "seat": "openai:tiny",
    "agent": "agent_0", "env": 0, "episode": 0, "step": 0, "kind": "act", "prompt_hash": "h",
    "system": "s", "prompt": "p", "reply": JSON_MOVE, "action": 1, "valid": True,
    "recovered": False, "parse_error": "", "fields": {}, "error": "", "prompt_tokens": 7,
    "completion_tokens": 3, "latency_s": 0.01, "retries": 0,
}  # fmt: skip
NEW_FIELDS = ("output", "output_refused", "reasoning_tokens", "cached_tokens")


@pytest.mark.slow
def test_a_transcript_written_before_output_modes_resumes(capsys, tmp_path):
    from dilemmax.llm.model_seats import _completion_from_row

    old = _completion_from_row(OLD_CALL)
    assert (old.text, old.prompt_tokens, old.output, old.output_refused) == (JSON_MOVE, 7, "", "")
    out = tmp_path / "run"
    with LocalChatServer(lambda body: JSON_MOVE) as server:
        assert main(_harvest(server, out)) == 0
    fresh = json.loads((out / "results.json").read_text())
    assert fresh["calls"]["openai:tiny"]["json_valid"] == 8  # every reply a JSON object
    rows = read_lines(out / "transcript.jsonl")[0]
    assert all(r.get("output") == "json_schema" for r in rows if r["type"] == "call")
    old_rows = [{k: v for k, v in r.items() if k not in NEW_FIELDS} for r in rows]
    assert {k for r in old_rows if r["type"] == "call" for k in r} == set(OLD_CALL)
    (out / "transcript.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old_rows))
    with LocalChatServer(lambda body: pytest.fail("a recorded call was asked again")) as server:
        assert main(_harvest(server, out, "--resume")) == 0 and server.received == 0
    resumed = json.loads((out / "results.json").read_text())
    seat = resumed["calls"]["openai:tiny"]
    assert resumed["episodes"] == fresh["episodes"] and seat["replayed"] == 8
    assert seat["output_requested"] == "json_schema" and seat["output_in_effect"] is None
    assert seat["json_mode_calls"] == 0 and seat["output_switched"] is None  # not recorded then
