"""Clients against a local OpenAI-compatible server (no network): retries, fatal errors,
structured output, the concurrency bound; the scripted client."""

from __future__ import annotations

import threading
import time

import pytest

from dilemmax.llm.client import ChatRequest, FatalClientError, ScriptedClient
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.openai_client import OpenAIClient
from dilemmax.llm.retrying import RetryPolicy
from dilemmax.llm.server import LocalChatServer

REQUEST = ChatRequest(({"role": "system", "content": "rules"}, {"role": "user", "content": "go"}))


FAST = RetryPolicy(backoff=0.01, max_backoff=0.02)


def fast_client(server, **options) -> OpenAIClient:
    config = GenerateConfig(base_url=server.base_url, **{"timeout": 0.5, **options})
    return OpenAIClient("tiny", config, FAST)


def test_transient_faults_are_retried_and_counted():
    faults = {0: "429", 1: "500", 2: "malformed", 3: "timeout"}
    with LocalChatServer(lambda body: "FINAL A", faults, timeout_delay=1.5) as server:
        [completion] = fast_client(server).complete([REQUEST])
        assert completion.text == "FINAL A" and completion.error == ""
        assert completion.retries == 4 and server.received == 5
        assert completion.prompt_tokens == 2 and completion.completion_tokens == 2
        assert server.bodies[-1]["messages"][0] == {"role": "system", "content": "rules"}


def test_exhausted_retries_give_an_error_not_an_exception():
    with LocalChatServer(lambda body: "x", {i: "500" for i in range(3)}) as server:
        [completion] = fast_client(server, max_attempts=3).complete([REQUEST])
        assert completion.text == "" and "500" in completion.error
        assert completion.retries == 2 and server.received == 3


@pytest.mark.parametrize("fault, word", [("401", "AuthenticationError"), ("404", "NotFound")])
def test_unfixable_errors_stop_the_run(fault, word):
    with LocalChatServer(lambda body: "x", {0: fault}) as server:
        with pytest.raises(FatalClientError, match=word):
            fast_client(server).complete([REQUEST])
        assert server.received == 1  # not retried


def test_structured_output_is_asked_for_and_dropped_where_unsupported():
    schema = {"type": "object", "properties": {"action": {"type": "string"}}}
    request = ChatRequest(REQUEST.messages, schema)
    with LocalChatServer(lambda body: '{"action": "stay"}') as server:
        fast_client(server).complete([request])
        assert server.bodies[0]["response_format"]["json_schema"]["schema"] == schema
    with LocalChatServer(lambda body: '{"action": "stay"}', structured_output=False) as server:
        client = fast_client(server)
        [first] = client.complete([request])
        [second] = client.complete([request])
        assert first.text == second.text == '{"action": "stay"}'
        assert "response_format" not in server.bodies[-1] and not client.structured_output


def test_concurrency_is_bounded_and_results_keep_their_order():
    def slow_echo(body):
        time.sleep(0.05)
        return body["messages"][-1]["content"]

    requests = [ChatRequest(({"role": "user", "content": f"r{i}"},)) for i in range(12)]
    reported = []
    with LocalChatServer(slow_echo) as server:
        client = fast_client(server, concurrency=3, timeout=5.0)
        out = client.complete(requests, lambda i, c: reported.append((i, c.text)))
    assert [c.text for c in out] == [f"r{i}" for i in range(12)]
    assert sorted(reported) == [(i, f"r{i}") for i in range(12)]
    assert 1 < server.max_in_flight <= 3


def test_hold_blocks_until_released():
    with LocalChatServer(lambda body: "ok", {0: "hold"}) as server:
        client = fast_client(server, timeout=5.0)
        out = []
        thread = threading.Thread(target=lambda: out.append(client.complete([REQUEST])))
        thread.start()
        assert server.held.wait(5.0) and not out
        server.release()
        thread.join(5.0)
        assert out[0][0].text == "ok" and server.answered == 1


def test_scripted_client_serves_lists_in_order():
    client = ScriptedClient(["a", "b"])
    reported = []
    out = client.complete([REQUEST] * 3, lambda i, c: reported.append(i))
    assert [c.text for c in out] == ["a", "b", "a"] and reported == [0, 1, 2]
    assert len(client.calls) == 3


def test_missing_api_key_without_a_server_is_fatal(monkeypatch):
    monkeypatch.delenv("DILEMMAX_TEST_KEY", raising=False)
    with pytest.raises(FatalClientError, match="DILEMMAX_TEST_KEY"):
        OpenAIClient("m", GenerateConfig(api_key_env="DILEMMAX_TEST_KEY"))


def _complete_in_child(client, request, done):
    done.put(client.complete([request])[0].text)


def test_a_client_used_before_a_fork_still_works_in_the_child():
    """The parent's event loop thread does not exist in a forked child: the child starts its
    own loop, session and semaphores instead of waiting on the parent's forever."""
    import multiprocessing
    import warnings

    with LocalChatServer(lambda body: "ok") as server:
        client = fast_client(server, timeout=5.0)
        assert client.complete([REQUEST])[0].text == "ok"
        context = multiprocessing.get_context("fork")
        done = context.Queue()
        with warnings.catch_warnings():  # JAX warns that forking a threaded process is risky
            warnings.simplefilter("ignore")
            child = context.Process(target=_complete_in_child, args=(client, REQUEST, done))
            child.start()
        child.join(30)
        assert child.exitcode == 0 and done.get(timeout=5) == "ok"
        assert client.complete([REQUEST])[0].text == "ok"  # the parent's loop still serves


def test_proxies_from_the_environment_apply_as_the_openai_package_applies_them(monkeypatch):
    from dilemmax.llm.chat_http import ChatTransport

    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")
    transport = ChatTransport(["https://api.example/v1", "http://127.0.0.1:8000/v1"], "k", 5.0)
    assert transport.proxies == ("http://proxy.example:3128", None)
    assert transport.urls[0] == "https://api.example/v1/chat/completions"


def test_reasoning_tokens_come_from_the_servers_usage():
    response = {
        "choices": [{"message": {"role": "assistant", "content": "ACTION QUERY"}}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 250,
                  "completion_tokens_details": {"reasoning_tokens": 240}},
    }  # fmt: skip
    completion = OpenAIClient._completion(response, 0.2, 1)
    assert (completion.text, completion.prompt_tokens, completion.completion_tokens) == (
        "ACTION QUERY", 30, 250,
    )  # fmt: skip
    assert completion.reasoning_tokens == 240 and completion.retries == 1
    assert OpenAIClient._completion({"choices": []}, 0.0, 0).reasoning_tokens == 0


def test_a_call_keeps_its_slot_until_the_harness_has_recorded_it():
    """With one call in flight, the next request leaves only after ``on_result`` returned: a
    crash loses only calls still in flight, never an answered one not yet written."""
    requests = [ChatRequest(({"role": "user", "content": f"r{i}"},)) for i in range(5)]
    seen = []

    def record(index, completion):
        time.sleep(0.05)  # a slow transcript write: the next request must still wait for it
        seen.append(server.received)

    with LocalChatServer(lambda body: "ok") as server:
        fast_client(server, concurrency=1).complete(requests, record)
    assert seen == [1, 2, 3, 4, 5]


def test_a_refused_schema_is_one_counted_retry_and_says_what_the_server_said():
    """A 400 to ``response_format``: the same call is asked again in plain text (one retry,
    counted), carries the server's refusal, and the seat stays in text; a request with no schema
    names no output mode."""
    schema = {"type": "object", "properties": {"action": {"type": "string"}}}
    request = ChatRequest(REQUEST.messages, schema)
    with LocalChatServer(lambda body: '{"action": "stay"}', structured_output=False) as server:
        client = fast_client(server)
        [first] = client.complete([request])
        [second, plain] = client.complete([request, REQUEST])
    assert (first.retries, first.output, server.received) == (1, "text", 4)
    assert first.output_refused == (
        "BadRequestError 400: Error code: 400 - response_format is not supported"
    )
    assert (second.retries, second.output, second.output_refused) == (0, "text", "")
    assert (plain.output, client.requested_output, client.output) == ("", "json_schema", "text")


def test_a_field_the_server_does_not_know_is_one_failed_attempt_with_its_words():
    """``transformers serve`` answers an unknown field (top_k) with 422 and FastAPI's
    ``{"detail": ...}``: not retried, and the recorded error holds the detail."""
    with LocalChatServer(lambda body: "x", refused_fields=("top_k",)) as server:
        [completion] = fast_client(server, top_k=5).complete([REQUEST])
        [plain] = fast_client(server).complete([REQUEST])
    assert completion.text == "" and completion.retries == 0 and server.received == 2
    assert completion.error == (
        "APIStatusError 422: Error code: 422 - Unexpected fields in the request: {'top_k'}"
    )
    assert plain.text == "x" and plain.error == ""


def test_a_400_that_text_does_not_mend_leaves_the_output_mode_alone():
    """A structured request refused, and its plain-text retry refused too: the 400 was not about
    structured output, so the call fails (two attempts) and the seat keeps its mode."""
    schema = {"type": "object", "properties": {"action": {"type": "string"}}}
    request = ChatRequest(REQUEST.messages, schema)
    with LocalChatServer(lambda body: '{"action": "stay"}', {0: "400", 1: "400"}) as server:
        client = fast_client(server)
        [failed] = client.complete([request])
        [answered] = client.complete([request])
    assert failed.error.endswith("400: Error code: 400 - the prompt is too long (injected)")
    assert (failed.retries, failed.output, failed.output_refused) == (1, "json_schema", "")
    assert (answered.text, answered.output, client.output) == (
        '{"action": "stay"}', "json_schema", "json_schema",
    )  # fmt: skip
    assert "response_format" in server.bodies[-1]
