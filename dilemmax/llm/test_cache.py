"""The response cache across runs (``--cache DIR``): a second identical run makes no call; models,
generation options and sample indexes are kept apart; two processes writing one folder at once
leave only whole entries; an entry that cannot be read is a miss."""

from __future__ import annotations

import faulthandler
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dilemmax.cli import main
from dilemmax.llm.cache import ResponseCache, RunCache, digest
from dilemmax.llm.client import ChatRequest, Completion
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.conftest import moral_hazard_reply as reply
from dilemmax.llm.seats import reply_identity
from dilemmax.llm.server import LocalChatServer
from dilemmax.llm.transcript import line_problem, read_lines

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_hang():
    faulthandler.dump_traceback_later(300, exit=True)  # a hung run ends with its stacks
    yield
    faulthandler.cancel_dump_traceback_later()


def play(url: str, out: Path, cache: Path, *extra: str) -> dict:
    argv = ["play", "moral_hazard", "--seats", "openai:tiny", "--episodes", "3", "--envs", "2",
            "--no-progress", "--base-url", url, "--out", str(out), "--cache", str(cache),
            *extra]  # fmt: skip
    assert main(argv) == 0
    return json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_a_second_identical_run_makes_no_call_and_other_options_or_models_miss(tmp_path, capsys):
    cache = tmp_path / "cache"
    with LocalChatServer(reply) as server:
        first = play(server.base_url, tmp_path / "a", cache)
        assert server.answered == 15
        capsys.readouterr()
        second = play(server.base_url, tmp_path / "b", cache)
        assert server.answered == 15  # every reply came from the cache
        assert "response cache: openai:tiny 15 hit(s), 0 miss(es)" in capsys.readouterr().out
        play(server.base_url, tmp_path / "c", cache, "--temperature", "0.5")
        assert server.answered == 30  # another generation option: nothing shared
        other = ["--seats", "openai:other"]
        play(server.base_url, tmp_path / "d", cache, *other)
        assert server.answered == 45  # another model: nothing shared
    assert first["summary"] == second["summary"] and first["episodes"] == second["episodes"]
    assert first["calls"]["openai:tiny"]["cache_misses"] == 15
    assert first["calls"]["openai:tiny"]["cache_hits"] == 0
    hits = second["calls"]["openai:tiny"]
    assert (hits["cache_hits"], hits["cache_misses"], hits["calls"]) == (15, 0, 15)
    assert hits["prompt_tokens"] == 0  # nothing spent
    rows, _ = read_lines(tmp_path / "b" / "transcript.jsonl")
    calls = [r for r in rows if r["type"] == "call"]
    assert all(c["cached"] is True and c["prompt_tokens"] == 0 for c in calls)
    before = {r["key"]: r for r in read_lines(tmp_path / "a" / "transcript.jsonl")[0]
              if r["type"] == "call"}  # fmt: skip
    for call in calls:  # the reply and the usage it first had, kept apart
        assert call["reply"] == before[call["key"]]["reply"]
        assert call["cached_usage"]["prompt_tokens"] == before[call["key"]]["prompt_tokens"] > 0


def request(text: str) -> ChatRequest:
    return ChatRequest(({"role": "user", "content": text},), {"type": "object"})


def test_the_key_holds_model_options_and_sample_index_and_nothing_of_transport(tmp_path):
    base = reply_identity("openai:m", GenerateConfig(base_url="http://a/v1"))
    same = [
        reply_identity("openai:m,role=cooperator,timeout=5", GenerateConfig(base_url="http://a/v1")),
        reply_identity("openai:m", GenerateConfig(base_url="http://a/v1", concurrency=2,
                                                  api_key_env="OTHER", max_attempts=1)),
    ]  # fmt: skip
    assert all(identity == base for identity in same)
    differ = [
        reply_identity("openai:n", GenerateConfig(base_url="http://a/v1")),
        reply_identity("inspect:openai/m", GenerateConfig(base_url="http://a/v1")),
        reply_identity("openai:m", GenerateConfig(base_url="http://b/v1")),
        reply_identity("openai:m,temperature=0.7", GenerateConfig(base_url="http://a/v1")),
        reply_identity("openai:m", GenerateConfig(base_url="http://a/v1", max_tokens=7)),
        reply_identity("openai:m", GenerateConfig(base_url="http://a/v1", output="text")),
        reply_identity("openai:m", GenerateConfig(base_url="http://a/v1", seed=3)),
    ]
    assert len({json.dumps(d, sort_keys=True, default=str) for d in [base, *differ]}) == 8
    ask = request("hello")
    assert digest(base, ask, (0, 0, 0)) != digest(base, request("hello!"), (0, 0, 0))
    assert digest(base, ask, (0, 0, 0)) != digest(base, ChatRequest(ask.messages), (0, 0, 0))

    def keys(seed: int, episodes: list[int]) -> list[str]:
        run = RunCache(tmp_path, seed, lambda seat: base)
        return [run.key("openai:m", ask, e) for e in episodes]

    # The same request asked twice in an episode, or in two episodes, draws two samples; a run
    # asked in the same order (a rerun, a resume, a shard playing the same episodes) finds them.
    first = keys(0, [0, 0, 1])
    assert len(set(first)) == 3 and keys(0, [0, 0, 1]) == first
    assert keys(0, [1, 0]) == [first[2], first[0]]  # per episode, not per run
    assert not set(keys(1, [0, 0, 1])) & set(first)  # another --seed: other samples


def test_a_transcripts_cache_fields_are_checked_on_resume():
    assert (
        line_problem({"type": "call", "cached": True, "cached_usage": {"prompt_tokens": 3}}) is None
    )
    assert "cached='yes'" in line_problem({"type": "call", "cached": "yes"})


WRITER = """
import sys
from dilemmax.llm.cache import ResponseCache
from dilemmax.llm.client import Completion
cache = ResponseCache(sys.argv[1])
for round in range(20):
    for i in range(10):
        cache.put(f"{i:02d}" + "0" * 62, Completion(f"reply {i} " * 500, prompt_tokens=i))
"""


@pytest.mark.slow
def test_two_processes_writing_one_folder_leave_whole_entries_and_bad_ones_miss(tmp_path):
    folder = tmp_path / "cache"
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(folder)], cwd=ROOT) for _ in range(2)
    ]
    assert [w.wait(120) for w in writers] == [0, 0]
    cache = ResponseCache(folder)
    for i in range(10):
        got = cache.get(f"{i:02d}" + "0" * 62)
        assert got == Completion(f"reply {i} " * 500, prompt_tokens=i)
    assert not list(folder.rglob(".tmp-*"))  # every temporary file was moved into place
    key = "ab" + "1" * 62
    cache.put(key, Completion("fine"))
    path = cache.path(key)
    for damaged in (b'{"key": "ab', b"\xff\xfe", b"[]", path.read_bytes().replace(b"ab1", b"cd1")):
        path.write_bytes(damaged)
        assert cache.get(key) is None
    cache.put("cd" + "2" * 62, Completion("", error="timed out"))  # failed calls are not kept
    assert cache.get("cd" + "2" * 62) is None
