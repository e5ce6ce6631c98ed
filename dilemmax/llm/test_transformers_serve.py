"""Token accounting against the real ``transformers serve`` (#45 item 4's evidence), not the
local test server: a tiny model built here is served by a ``transformers serve`` subprocess on
127.0.0.1, and a short ``dilemmax play moral_hazard`` seats it as ``openai:<model folder>``.

What the server reports (transformers 5.x, ``transformers/cli/serving/chat_completion.py``): a
non-streaming reply's ``usage`` holds ``prompt_tokens`` (the chat-templated prompt's length),
``completion_tokens`` and ``total_tokens``, and no ``prompt_tokens_details``: it has no prompt
cache to report. So each call line must hold the server's two counts and 0 cached tokens, and
results.json and the transcript's totals line their sums.

Skipped only where ``transformers serve`` cannot start: transformers or its serving extras
(fastapi, uvicorn, pydantic, openai: ``pip install transformers[serving]``) are missing.
"""

from __future__ import annotations

import faulthandler
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from dilemmax.cli import main
from dilemmax.llm.api import play_session
from dilemmax.llm.client import ChatRequest
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.openai_client import OpenAIClient
from dilemmax.llm.server import LocalChatServer
from dilemmax.llm.tiny import build_tiny_model
from dilemmax.llm.transcript import read_lines

# transformers (the optional llm extra) is imported where the tests use it, not when the suite is
# collected (tests/test_collection_imports.py).
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="needs the llm extra (transformers)"
)

TIMEOUT = 300  # seconds the whole file may take on a loaded 2-core machine before it is dumped
STARTUP = 180  # seconds the server may take to import torch, load the model and listen
SERVER_LIFETIME = TIMEOUT + 60  # the server exits by itself after this, whatever happens here
MAX_TOKENS = 6  # a random model's reply, cut short: bounded completion tokens and time
PRICE = "price=2/0.5/8"  # dollars per million prompt / cached prompt / completion tokens

# `transformers serve`, run by this interpreter, with a watchdog thread: the server exits when
# the test process (its first argument) is gone, as after the deadline's os._exit, which skips
# every finalizer, or when its lifetime (its second argument) ends.
SERVE = """
import os, sys, threading, time
parent, end = int(sys.argv.pop(1)), time.monotonic() + float(sys.argv.pop(1))
def watch():
    while os.getppid() == parent and time.monotonic() < end:
        time.sleep(0.5)
    os._exit(3)
threading.Thread(target=watch, daemon=True).start()
from transformers.cli.transformers import main
sys.argv[0] = "transformers"
main()
"""
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1"}
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1, no proxy


def test_the_usage_transformers_serve_answers_with_reads_as_no_cached_tokens():
    """The same ``usage`` shape from the local server (the fast tier's check): prompt and
    completion counts read as given, and no ``prompt_tokens_details`` as 0 cached tokens."""
    words = lambda text: len(text.split())
    messages = ({"role": "system", "content": "a b c"}, {"role": "user", "content": "d"})
    request = ChatRequest(messages)
    with LocalChatServer(lambda body: "FINAL A now", count_tokens=words) as server:
        [completion] = OpenAIClient("tiny", GenerateConfig(base_url=server.base_url)).complete(
            [request]
        )
    assert (completion.prompt_tokens, completion.completion_tokens) == (4, 3)
    assert completion.cached_tokens == 0


@pytest.fixture(scope="module")
def deadline():  # the server's tests: a hung server ends the worker with its stacks
    faulthandler.dump_traceback_later(TIMEOUT, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    """A one-layer Llama-style model (hidden 32) with the tiny tokenizer and chat template."""
    out = tmp_path_factory.mktemp("served_model")
    return build_tiny_model(out, vocab_size=512, hidden_size=32, num_layers=1)


@pytest.fixture(scope="module")
def served(deadline, tiny_model, tmp_path_factory):
    """The base URL (``http://127.0.0.1:<port>/v1``) of ``transformers serve`` serving the tiny
    model; the server is stopped when the module's tests end."""
    from transformers.utils.import_utils import is_serve_available

    if not is_serve_available():
        pytest.skip("transformers serve needs fastapi, uvicorn, pydantic and openai (not here)")
    port = free_port()
    log_path = tmp_path_factory.mktemp("serve_log") / "serve.log"
    argv = [sys.executable, "-c", SERVE, str(os.getpid()), str(SERVER_LIFETIME),
            "serve", str(tiny_model), "--host", "127.0.0.1", "--port", str(port),
            "--device", "cpu", "--log-level", "warning"]  # fmt: skip
    with open(log_path, "w") as log:
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                  env={**os.environ, **OFFLINE})  # fmt: skip
    try:
        wait_until_healthy(server, f"http://127.0.0.1:{port}", log_path)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=15)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_healthy(server: subprocess.Popen, root: str, log_path: Path) -> None:
    """Returns once ``GET /health`` answers; fails with the server's log if it exits first or
    does not answer within :data:`STARTUP` seconds."""
    end = time.monotonic() + STARTUP
    while time.monotonic() < end:
        if server.poll() is not None:
            pytest.fail(f"transformers serve exited ({server.returncode}): {log_tail(log_path)}")
        try:
            with DIRECT.open(f"{root}/health", timeout=5) as reply:
                if reply.status == 200:
                    return
        except OSError:  # not listening yet
            time.sleep(0.5)
    pytest.fail(f"transformers serve did not answer within {STARTUP}s: {log_tail(log_path)}")


def log_tail(path: Path) -> str:
    return path.read_text(errors="replace")[-2000:]


def post_chat(base_url: str, body: dict) -> dict:
    request = urllib.request.Request(
        f"{base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with DIRECT.open(request, timeout=120) as reply:
        return json.loads(reply.read())


def call_messages(call: dict) -> list[dict]:
    """The messages a call line's request sent (``ChatRequest.from_prompt``)."""
    system = [{"role": "system", "content": call["system"]}] if call.get("system") else []
    return [*system, {"role": "user", "content": call["prompt"]}]


def templated_length(tokenizer, messages: list[dict]) -> int:
    """The prompt's tokens as ``transformers serve`` counts them: the chat template applied,
    with the assistant's opening, tokenized."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return len(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)


@pytest.mark.slow
def test_a_run_against_transformers_serve_records_the_usage_it_reports(
    tiny_model, served, tmp_path, capsys
):
    from transformers import AutoTokenizer

    seat = f"openai:{tiny_model},base_url={served},{PRICE}"
    out = tmp_path / "run"
    argv = ["play", "moral_hazard", "--seats", seat, "--episodes", "1", "--envs", "1",
            "--max-tokens", str(MAX_TOKENS), "--timeout", "120", "--max-attempts", "2",
            "--out", str(out), "--no-progress"]  # fmt: skip
    # The random model's replies are unreadable: each is played as the game's fallback move
    # and the run goes on; a failed call would stop it (exit status != 0).
    assert main(argv) == 0
    printed = capsys.readouterr().out
    lines = read_lines(out / "transcript.jsonl")[0]
    calls = [r for r in lines if r["type"] == "call"]
    assert calls and not any(r.get("error") for r in calls)

    # One call asked again, as the run asked it (greedy: the same reply): the server's usage is
    # what the call line recorded. transformers serve reports no prompt_tokens_details.
    first = calls[0]
    usage = post_chat(served, {"model": str(tiny_model), "messages": call_messages(first),
                               "max_tokens": MAX_TOKENS, "temperature": 0.0})["usage"]  # fmt: skip
    assert usage["prompt_tokens"] > 0 and "prompt_tokens_details" not in usage
    assert (first["prompt_tokens"], first["completion_tokens"], first["cached_tokens"]) == (
        usage["prompt_tokens"], usage["completion_tokens"], 0)  # fmt: skip

    # Every call: the prompt's templated length (what the server counts), a reply within
    # max_tokens, nothing cached.
    tokenizer = AutoTokenizer.from_pretrained(tiny_model, local_files_only=True)
    for call in calls:
        assert call["prompt_tokens"] == templated_length(tokenizer, call_messages(call))
        assert 1 <= call["completion_tokens"] <= MAX_TOKENS
        assert call["cached_tokens"] == 0

    # results.json and the transcript's totals line: the sums over the call lines, priced.
    prompt = sum(r["prompt_tokens"] for r in calls)
    completion = sum(r["completion_tokens"] for r in calls)
    dollars = (prompt * 2 + completion * 8) / 1e6
    results = json.loads((out / "results.json").read_text())["calls"][seat]
    (totals,) = [r["seats"][seat] for r in lines if r["type"] == "totals"]
    for spent in (results, totals):
        assert (spent["calls"], spent["prompt_tokens"], spent["completion_tokens"]) == (
            len(calls), prompt, completion)  # fmt: skip
        assert spent["cached_tokens"] == 0 and spent["cost_usd"] == pytest.approx(dollars)
    assert f"{prompt}/0/{completion}" in printed

    # The plan counted with the served model's own tokenizer, its folder being the seat's model.
    # Per call it is within 10% of what the server counted; its call count is the stand-in's
    # (random legal moves), not the random model's (each reply unreadable, the fallback move).
    generate = GenerateConfig(max_tokens=MAX_TOKENS)
    (planned,) = play_session(
        "moral_hazard", default_seat=seat, episodes=1, envs=1, generate=generate, plan=True
    ).seats
    assert planned.exact and "plan, before any call" in printed
    per_call = planned.prompt_tokens / planned.calls
    assert abs(per_call - prompt / len(calls)) <= 0.10 * prompt / len(calls), (per_call, prompt)
