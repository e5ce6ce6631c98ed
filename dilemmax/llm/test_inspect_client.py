"""``inspect:<provider>/<model>`` seats (issue #28), no network: Inspect's OpenAI-compatible
provider pointed at the local test server, and Inspect's mock model. The same scripted replies
give exactly the actions and metrics of an ``openai:`` seat; a 429 is retried and counted; the
seat's options reach the request body; a refused model stops the run."""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util

import jax
import numpy as np
import pytest

import dilemmax
from dilemmax.llm.cli import add_model_arguments, generate_config
from dilemmax.llm.client import ChatRequest, FatalClientError, ScriptedClient
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.inspect_client import DEFAULT, InspectClient
from dilemmax.llm.inspect_messages import chat_messages, chat_request, completion_from_output
from dilemmax.llm.play import BatchedPlay, Seat
from dilemmax.llm.policy import LLMPolicy
from dilemmax.llm.retrying import RetryPolicy
from dilemmax.llm.seats import build_seat
from dilemmax.llm.server import LocalChatServer
from dilemmax.llm.test_resume import reply  # planted moral-hazard replies (query, note, final)

# The optional inspect extra (installed with dev), imported where a test uses it, not when the
# suite is collected (tests/test_collection_imports.py).
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("inspect_ai") is None, reason="needs the inspect extra (inspect_ai)"
)
QUICK_RETRY = RetryPolicy(backoff=0.01, max_backoff=0.02)


def inspect_config(**fields) -> GenerateConfig:
    """InspectClient's defaults (the provider's key variable and sampling) with ``fields``."""
    return dataclasses.replace(DEFAULT, **fields)


SCHEMA = {"type": "object", "properties": {"action": {"type": "string"}}}
REQUEST = ChatRequest(({"role": "system", "content": "rules"}, {"role": "user", "content": "go"}))
FAST = ["--timeout", "5", "--max-attempts", "4"]


def model_args(*argv: str) -> GenerateConfig:
    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    return generate_config(parser.parse_args([*FAST, *argv]))


def play(env, seat, episodes=4):
    runner = BatchedPlay(env, [seat] * env.num_agents, num_envs=4)
    return runner.run(jax.random.key(3), episodes)


@pytest.fixture(scope="module")
def moral_hazard():
    return dilemmax.make("moral_hazard")


@pytest.mark.slow
def test_an_inspect_seat_plays_exactly_as_an_openai_seat(moral_hazard):
    with LocalChatServer(reply) as server:
        args = model_args("--base-url", server.base_url)
        cache: dict = {}
        plain = build_seat("openai:tiny", moral_hazard, args, cache)
        inspect = build_seat("inspect:openai-api/local/tiny", moral_hazard, args, cache)
        ours, theirs = play(moral_hazard, plain), play(moral_hazard, inspect)
    assert ours.metrics.keys() == theirs.metrics.keys()
    for name in ours.metrics:
        np.testing.assert_array_equal(ours.metrics[name], theirs.metrics[name], err_msg=name)
    a, b = ours.stats["openai:tiny"], theirs.stats["inspect:openai-api/local/tiny"]
    assert (a.calls, a.act_calls, a.valid, a.errors) == (b.calls, b.act_calls, b.valid, b.errors)
    assert a.calls > 0 and a.valid == a.act_calls and b.retries == 0
    assert a.prompt_tokens == b.prompt_tokens and a.completion_tokens == b.completion_tokens


def test_inspects_mock_model_gives_the_same_actions(moral_hazard):
    """``mockllm/model`` with the planted policy as its outputs: the episodes' metrics equal
    those of the scripted client with the same policy."""
    from inspect_ai.model import ModelOutput, ModelUsage  # the optional inspect extra

    def mock(messages, tools, tool_choice, config):
        request = chat_request(messages)
        text = reply({"messages": [dict(m) for m in request.messages]})
        output = ModelOutput.from_content(model="mockllm/model", content=text)
        # Counted as the scripted client counts (words); without usage the mock model would
        # fetch a tokenizer from the network.
        words = sum(len(m["content"].split()) for m in request.messages)
        output.usage = ModelUsage(input_tokens=words, output_tokens=len(text.split()))
        return output

    client = InspectClient("mockllm/model", model_args={"custom_outputs": mock})
    scripted = ScriptedClient(lambda request: reply({"messages": list(request.messages)}))
    mocked = play(moral_hazard, Seat("inspect", LLMPolicy(client, "inspect")))
    planted = play(moral_hazard, Seat("scripted", LLMPolicy(scripted, "scripted")))
    for name in planted.metrics:
        np.testing.assert_array_equal(mocked.metrics[name], planted.metrics[name], err_msg=name)
    a, b = mocked.stats["inspect"], planted.stats["scripted"]
    assert (a.calls, a.valid, a.prompt_tokens) == (b.calls, b.valid, b.prompt_tokens)
    assert a.valid > 0 and a.completion_tokens == b.completion_tokens


def test_a_rate_limit_is_retried_and_counted_and_the_options_reach_the_body():

    faults = {0: "retry_after", 1: "429", 2: "500"}
    with LocalChatServer(lambda body: "ACTION QUERY", faults, retry_after="0.3") as server:
        config = inspect_config(
            base_url=server.base_url, temperature=1.0, top_p=0.95, top_k=20,
            presence_penalty=1.5, max_tokens=300, seed=7, reasoning_effort="low",
            output="json_object", timeout=5,
        )  # fmt: skip
        client = InspectClient("openai-api/local/qwen", config, QUICK_RETRY)
        [completion] = client.complete([ChatRequest(REQUEST.messages, SCHEMA)])
        assert completion.text == "ACTION QUERY" and completion.error == ""
        assert completion.retries == 3 and server.received == 4
        assert server.arrivals[1] - server.arrivals[0] >= 0.3  # the Retry-After was honoured
        assert completion.prompt_tokens == 2 and completion.completion_tokens == 2
    body = server.bodies[-1]
    expected = {"model": "qwen", "temperature": 1.0, "top_p": 0.95, "top_k": 20,
                "presence_penalty": 1.5, "max_tokens": 300, "seed": 7, "reasoning_effort": "low",
                "response_format": {"type": "json_object"}}  # fmt: skip
    assert {k: body.get(k) for k in expected} == expected
    assert body["messages"] == [dict(m) for m in REQUEST.messages]


def test_exhausted_retries_are_an_error_and_a_refused_model_stops_the_run():

    with LocalChatServer(lambda body: "x", {i: "500" for i in range(3)}) as server:
        config = inspect_config(base_url=server.base_url, max_attempts=3)
        client = InspectClient("openai-api/local/m", config, QUICK_RETRY)
        [completion] = client.complete([REQUEST])
        assert completion.text == "" and "500" in completion.error and completion.retries == 2
    with LocalChatServer(lambda body: "x", {0: "404"}) as server:
        client = InspectClient("openai-api/local/missing", inspect_config(base_url=server.base_url))
        with pytest.raises(FatalClientError, match="refused model .*NotFound"):
            client.complete([REQUEST])
        assert server.received == 1
    with pytest.raises(FatalClientError, match="Inspect cannot build model 'nosuch/m'"):
        InspectClient("nosuch/m")


def test_a_schema_the_server_refuses_drops_to_text_and_usage_counts_reasoning():
    from inspect_ai.model import ModelOutput, ModelUsage  # the optional inspect extra

    with LocalChatServer(lambda body: '{"action": "up"}', structured_output=False) as server:
        client = InspectClient("openai-api/local/m", inspect_config(base_url=server.base_url))
        [first] = client.complete([ChatRequest(REQUEST.messages, SCHEMA)])
        assert first.text == '{"action": "up"}' and client.output == "text"
        assert "response_format" not in server.bodies[-1]
    output = ModelOutput.from_content(model="m", content="ACTION QUERY")
    output.usage = ModelUsage(input_tokens=11, output_tokens=40, total_tokens=51,
                              reasoning_tokens=32)  # fmt: skip
    completion = completion_from_output(output, latency_s=0.5, retries=1)
    assert (completion.text, completion.prompt_tokens, completion.completion_tokens) == (
        "ACTION QUERY", 11, 40,
    )  # fmt: skip
    assert completion.reasoning_tokens == 32 and completion.retries == 1
    assert chat_request(chat_messages(REQUEST)) == REQUEST


@pytest.mark.slow
def test_dilemmax_play_with_an_inspect_seat_writes_retries_and_resumes(tmp_path, capsys):
    """Through the command: the transcript, the summary's retries and a resume that replays
    every call (no request reaches the server again)."""
    import json

    from dilemmax.cli import main

    out = tmp_path / "run"
    with LocalChatServer(reply, {2: "429"}) as server:
        argv = ["play", "moral_hazard", "--seats", "inspect:openai-api/local/tiny",
                "--base-url", server.base_url, "--episodes", "2", "--envs", "2",
                "--no-progress", "--out", str(out)]  # fmt: skip
        assert main(argv) == 0
        received = server.received
        assert main([*argv, "--resume"]) == 0 and server.received == received
    calls = json.loads((out / "results.json").read_text())["calls"]["inspect:openai-api/local/tiny"]
    assert calls["retries"] == 1 and calls["replayed"] == calls["calls"] == received - 1
    assert "inspect:openai-api/local/tiny" in capsys.readouterr().out


# --------------------------------------------------------------------------- a real server
LOOPBACK = ("127.0.0.1", "::1", "localhost")


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """A machine without internet: every connection or name lookup but 127.0.0.1's raises (and
    is listed in the yielded list), and tiktoken's cache is an empty folder, so a test fails if
    anything but the model's own local endpoint is reached."""
    import socket

    tried: list = []

    def refused(where):
        tried.append(where)
        return OSError(f"network blocked in this test: {where}")

    real_connect, real_lookup = socket.socket.connect, socket.getaddrinfo
    real_create = socket.create_connection

    def connect(sock, address):
        if isinstance(address, tuple) and str(address[0]) not in LOOPBACK:
            raise refused(address)
        return real_connect(sock, address)

    def getaddrinfo(host, *args, **kwargs):
        if host is not None and str(host) not in LOOPBACK:
            raise refused(host)
        return real_lookup(host, *args, **kwargs)

    def create_connection(address, *args, **kwargs):
        if str(address[0]) not in LOOPBACK:
            raise refused(address)
        return real_create(address, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket, "create_connection", create_connection)
    (tmp_path / "tiktoken").mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken"))
    return tried


def test_the_guard_refuses_the_network(offline):
    import socket

    with pytest.raises(OSError, match="network blocked"):
        socket.create_connection(("example.org", 443), timeout=1)
    assert offline == [("example.org", 443)]


def test_an_inspect_mock_seat_plays_offline(offline, tmp_path, capsys):
    """The issue's command on a machine without internet: Inspect's mock model would count its
    tokens with tiktoken (downloading o200k_base); its usage is given as unknown instead."""
    import json

    from dilemmax.cli import main

    out = tmp_path / "run"
    argv = ["play", "moral_hazard", "--seat", "agent_0=inspect:mockllm/model", "--seat",
            "agent_1=scripted:teacher", "--episodes", "2", "--envs", "2", "--no-progress",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0 and offline == []
    table = capsys.readouterr().out.split("model calls:")[1]  # after the plan, the calls
    [row] = [line for line in table.splitlines() if "mockllm/model  " in line]
    assert " unknown " in row  # the tokens column
    calls = json.loads((out / "results.json").read_text())["calls"]["inspect:mockllm/model"]
    assert calls["calls"] > 0 and calls["errors"] == 0
    assert calls["prompt_tokens"] == calls["completion_tokens"] == 0  # unknown, not counted


def test_inspects_mock_model_keeps_the_usage_it_is_given(offline):
    from inspect_ai.model import ModelOutput, ModelUsage  # the optional inspect extra

    counted = ModelOutput.from_content(model="mockllm/model", content="ACTION QUERY")
    counted.usage = ModelUsage(input_tokens=5, output_tokens=2, total_tokens=7)
    uncounted = ModelOutput.from_content(model="mockllm/model", content="ACTION NOTE")
    client = InspectClient("mockllm/model", model_args={"custom_outputs": [counted, uncounted]})
    first, second = client.complete([REQUEST]), client.complete([REQUEST])
    assert (first[0].text, first[0].prompt_tokens, first[0].completion_tokens) == (
        "ACTION QUERY", 5, 2,
    )  # fmt: skip
    assert (second[0].text, second[0].prompt_tokens, second[0].error) == ("ACTION NOTE", 0, "")
    assert offline == []


def test_a_422_through_an_inspect_seat_shows_the_servers_words(offline):
    with LocalChatServer(lambda body: "x", refused_fields=("top_k",)) as server:
        client = InspectClient(
            "openai-api/local/m", inspect_config(base_url=server.base_url, top_k=5)
        )
        [completion] = client.complete([REQUEST])
    assert completion.retries == 0 and server.received == 1 and offline == []
    assert completion.error == (
        "UnprocessableEntityError 422: Error code: 422 - Unexpected fields in the request: "
        "{'top_k'}"
    )


def test_inspects_openai_provider_at_a_local_server_names_the_seat_that_works(offline, monkeypatch):
    """``inspect:openai/<model>`` is OpenAI's Responses API: without OPENAI_API_KEY, and against a
    server that streams /v1/responses unasked, the error says so and names openai-api / vllm."""
    with LocalChatServer(lambda body: "ACTION QUERY") as server:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        with pytest.raises(FatalClientError) as no_key:
            InspectClient("openai/tiny", inspect_config(base_url=server.base_url))
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        client = InspectClient("openai/tiny", inspect_config(base_url=server.base_url))
        with pytest.raises(FatalClientError) as streamed:
            client.complete([REQUEST])
        assert server.received >= 1  # it did reach the server
    for error in (no_key, streamed):
        message = str(error.value)
        assert "\n" not in message and ("OpenAI's own API" in message or "Responses" in message)
        assert "inspect:openai-api/<name>/tiny or inspect:vllm/tiny" in message
    assert "Unable to initialise OpenAI client" in str(no_key.value)
    assert "AssertionError" in str(streamed.value)
    assert "streams /v1/responses" in str(streamed.value)
    assert offline == []


def test_a_cached_request_goes_to_inspects_own_cache_keyed_by_its_sample(offline, tmp_path,
                                                                          monkeypatch):  # fmt: skip
    """--cache on an inspect: seat: what dilemmax's cache missed is asked through Inspect's
    cache (INSPECT_CACHE_DIR), one entry per dilemmax key (so per sample index)."""
    from inspect_ai.model import ModelOutput  # the optional inspect extra

    monkeypatch.setenv("INSPECT_CACHE_DIR", str(tmp_path))
    asked = []

    def mock(messages, tools, tool_choice, config):
        asked.append(1)
        return ModelOutput.from_content(model="mockllm/model", content=f"reply {len(asked)}")

    client = InspectClient("mockllm/model", model_args={"custom_outputs": mock})
    keyed = [dataclasses.replace(REQUEST, cache_key=k) for k in ("sample0", "sample0", "sample1")]
    texts = [client.complete([request])[0].text for request in keyed]
    assert texts == ["reply 1", "reply 1", "reply 2"] and len(asked) == 2
    assert client.complete([REQUEST])[0].text == "reply 3"  # no key: Inspect's cache is off
    assert list((tmp_path / "generate").rglob("*")) and offline == []
