"""Per-seat endpoints and options (issue #24) and replicas of one model (issue #25): every option
is checked before any call, reaches the request body, and seats that differ only in their
protocol options share one client. No network: the servers are LocalChatServers on 127.0.0.1."""

from __future__ import annotations

import argparse

import pytest

import dilemmax
from dilemmax.envs.text import Prompt
from dilemmax.errors import UsageError
from dilemmax.llm.cli import add_model_arguments, generate_config
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.seats import build_seat, check_specs
from dilemmax.llm.server import LocalChatServer

SCHEMA = {"type": "object", "properties": {"action": {"type": "string"}}}
PROMPT = Prompt("rules", "your move", json_schema=SCHEMA)


def model_args(*argv: str) -> GenerateConfig:
    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    return generate_config(parser.parse_args(["--timeout", "5", *argv]))


class RoleGame:
    """A game whose text protocol takes a role, as OpenSocialJax's do (building one of those
    costs seconds of pool generation; only its protocol's signature matters here)."""

    def text_protocol(self, role=None, reveal=False, **others):
        if others or role not in (None, "cooperator", "defector") or reveal not in (True, False):
            raise ValueError(f"role must be None, 'cooperator' or 'defector', got {role!r}")
        return object()


@pytest.fixture(scope="module")
def harvest():
    return RoleGame()


def test_each_seats_options_reach_its_own_server_and_the_flags_fill_the_rest(harvest):
    with LocalChatServer(lambda body: "a") as first, LocalChatServer(lambda body: "b") as second:
        own = (
            f"openai:qwen,base_url={second.base_url},temperature=1.0,top_p=0.95,top_k=20,"
            "presence_penalty=1.5,max_tokens=3000,seed=7,reasoning_effort=low,output=json_object"
        )
        args = model_args("--base-url", first.base_url, "--temperature", "0.2")
        cache: dict = {}
        plain = build_seat("openai:glm", harvest, args, cache=cache)
        tuned = build_seat(own, harvest, args, cache=cache)
        text = build_seat("openai:claude,output=text", harvest, args, cache=cache)
        assert [c.text for c in plain.policy.ask([PROMPT])] == ["a"]
        assert [c.text for c in tuned.policy.ask([PROMPT])] == ["b"]
        text.policy.ask([PROMPT])
    [glm, claude] = first.bodies
    [qwen] = second.bodies
    assert glm["model"] == "glm" and glm["temperature"] == 0.2 and glm["max_tokens"] == 512
    assert glm["response_format"]["json_schema"]["schema"] == SCHEMA
    assert "top_k" not in glm and "reasoning_effort" not in glm and "seed" not in glm
    assert claude["model"] == "claude" and "response_format" not in claude
    expected = {"temperature": 1.0, "top_p": 0.95, "top_k": 20, "presence_penalty": 1.5,
                "max_tokens": 3000, "seed": 7, "reasoning_effort": "low"}  # fmt: skip
    assert {k: qwen[k] for k in expected} == expected
    assert qwen["response_format"] == {"type": "json_object"}


def test_seats_differing_only_in_role_share_one_client(harvest):
    args = model_args("--base-url", "http://127.0.0.1:9/v1")
    cache: dict = {}
    cooperator = build_seat("openai:luna,role=cooperator", harvest, args, cache=cache)
    defector = build_seat("openai:luna,role=defector", harvest, args, cache=cache)
    other = build_seat("openai:luna,role=defector,temperature=0.5", harvest, args, cache=cache)
    assert cooperator.policy is defector.policy is not other.policy
    assert cooperator.protocol_options == {"role": "cooperator"}
    assert defector.protocol_options == {"role": "defector"} and defector.name.endswith("defector")
    assert build_seat("openai:luna", harvest, args, cache=cache).protocol_options == {}
    informed = build_seat("openai:luna,reveal=true,role=defector", harvest, args, cache=cache)
    assert informed.protocol_options == {"role": "defector", "reveal": True}
    assert informed.policy is defector.policy


BAD_SPECS = [
    ("openai:m,output=xml", "output='xml'", "json_schema, json_object, text"),
    ("openai:m,reasoning_effort=huge", "reasoning_effort='huge'", "one of none"),
    ("openai:m,base_url=ftp://x", "base_url='ftp://x'", "http://host:port/v1"),
    ("openai:m,base_url=http://a/v1|http://a/v1", "base_url=", "each once"),
    ("openai:m,base_url=http://a/v1|", "base_url=", "joined by |"),
    ("openai:m,api_key_env=1BAD", "api_key_env='1BAD'", "environment variable"),
    ("openai:m,top_k=0", "top_k='0'", "an integer >= 1"),
    ("openai:m,presence_penalty=3", "presence_penalty='3'", "-2..2"),
    ("openai:m,temperature=0.1,temperature=0.2", "temperature twice", ""),
    ("openai:m,role=villain", "role=villain is refused", "role"),
    ("inspect:gpt-4o", "inspect:<provider>/<model>", ""),
    ("inspect:openai/m,reasoning_tokens=0", "reasoning_tokens='0'", ">= 1"),
    ("openai:m,reasoning_tokens=10", "['reasoning_tokens'] are not known", ""),
    ("hf:/no/model,role=cooperator,role=defector", "role twice", ""),
]


@pytest.mark.parametrize("spec, named, allowed", BAD_SPECS)
def test_a_bad_seat_option_is_one_line_naming_it(spec, named, allowed, harvest):
    args = model_args("--base-url", "http://127.0.0.1:9/v1")
    with pytest.raises(UsageError) as error:
        check_specs(harvest, {"agent_0": spec}, None, args)
    message = str(error.value)
    assert named in message and allowed in message and "\n" not in message


def test_a_role_on_a_game_without_roles_and_a_missing_key_are_refused_before_any_call(
    monkeypatch,
):
    moral_hazard = dilemmax.make("moral_hazard")
    args = model_args("--base-url", "http://127.0.0.1:9/v1")
    with pytest.raises(UsageError, match="role=cooperator is refused by the game"):
        check_specs(moral_hazard, {"agent_0": "openai:m,role=cooperator"}, None, args)
    monkeypatch.delenv("DILEMMAX_SEAT_KEY", raising=False)
    with pytest.raises(UsageError, match="DILEMMAX_SEAT_KEY"):
        check_specs(moral_hazard, {}, "openai:m,api_key_env=DILEMMAX_SEAT_KEY", model_args())
    with pytest.raises(UsageError, match="--base-url 'http://a/v1,http://b/v1'"):
        check_specs(
            moral_hazard, {}, "openai:m", model_args("--base-url", "http://a/v1,http://b/v1")
        )


def test_replicas_of_one_model_share_the_calls_by_outstanding_requests(harvest):
    """Two servers of one model behind one seat: equal servers get half the calls each; a slow
    one, whose calls stay outstanding longer, gets fewer."""
    import time

    def slow(body):
        time.sleep(0.3)
        return "slow"

    prompts = [Prompt("rules", f"turn {i}") for i in range(40)]
    with LocalChatServer(lambda body: "a") as a, LocalChatServer(lambda body: "b") as b:
        args = model_args("--concurrency", "8")
        seat = build_seat(f"openai:m,base_url={a.base_url}|{b.base_url}", harvest, args)
        replies = [c.text for c in seat.policy.ask(prompts)]
        assert a.answered + b.answered == 40 and 12 <= a.answered <= 28
        assert sorted(set(replies)) == ["a", "b"] and replies.count("a") == a.answered
    with LocalChatServer(slow) as a, LocalChatServer(lambda body: "fast") as b:
        seat = build_seat(f"openai:m,base_url={a.base_url}|{b.base_url}", harvest, args)
        seat.policy.ask(prompts)
        assert a.answered + b.answered == 40 and 2 * a.answered <= b.answered


def test_an_inspect_seat_naming_a_missing_key_is_refused_before_any_call(monkeypatch):
    monkeypatch.delenv("DILEMMAX_SEAT_KEY", raising=False)
    spec = "inspect:anthropic/claude,api_key_env=DILEMMAX_SEAT_KEY"
    with pytest.raises(UsageError, match="DILEMMAX_SEAT_KEY"):
        check_specs(RoleGame(), {}, spec, model_args())
    check_specs(RoleGame(), {}, "inspect:anthropic/claude", model_args())  # the provider's own
