"""What a run costs (#45 items 1, 2, 4): the plan before any call against what a real run then
records, ``--plan`` calling nothing, prices files and seat prices, cached prompt tokens read,
recorded, totalled and priced. Every server is the local test server on 127.0.0.1."""

from __future__ import annotations

import faulthandler
import json
import random
from types import SimpleNamespace

import pytest

from dilemmax.cli import main
from dilemmax.envs.seat_spec import parse_seat
from dilemmax.llm import plan
from dilemmax.llm.api import play_session
from dilemmax.llm.client import ChatRequest
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.inspect_messages import completion_from_output
from dilemmax.llm.openai_client import OpenAIClient
from dilemmax.llm.plan import CHARS_RULE, chars_rule, messages_key
from dilemmax.llm.pricing import (
    Price,
    PriceError,
    cost,
    load_prices,
    parse_price,
    price_for,
    seat_price,
)
from dilemmax.llm.results import format_calls
from dilemmax.llm.server import LocalChatServer
from dilemmax.llm.transcript import read_lines

DEFAULT_SAMPLE_STEPS = plan.SAMPLE_STEPS
TIMEOUT = 600  # seconds any test here may take on a loaded 2-core machine before it is dumped


@pytest.fixture(autouse=True)
def deadline():
    faulthandler.dump_traceback_later(TIMEOUT, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


# --------------------------------------------------------------------------- the plan
# Each game shrunk: (env options, max_steps). The open-world games play 2 agents, 4 steps.
GAMES = {
    "moral_hazard": ({}, None),
    "consequence": ({}, None),
    "open_cleanup": ({"num_agents": 2}, 4),
    "open_harvest": ({"num_agents": 2}, 4),
}


def serving(replies):
    """The reply function of a server that answers every prompt as the plan's stand-in did."""
    return lambda body: replies[messages_key(body["messages"])]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("game", "episodes", "sample_steps"),
    [(game, 3, DEFAULT_SAMPLE_STEPS) for game in GAMES]  # short games: every episode rendered
    + [("moral_hazard", 12, 9), ("open_cleanup", 3, 4)],  # 3 of 12 and 1 of 3 rendered
)
def test_the_plan_is_within_ten_percent_of_what_the_run_records(
    game, episodes, sample_steps, tmp_path, monkeypatch
):
    options, max_steps = GAMES[game]
    kwargs = dict(env_options=options, max_steps=max_steps, episodes=episodes, envs=4,
                  default_seat="openai:stand-in")  # fmt: skip
    nowhere = GenerateConfig(base_url="http://127.0.0.1:9/v1")
    # The server answers as the stand-in does on every episode, so the run plays its moves.
    monkeypatch.setattr(plan, "SAMPLE_STEPS", 10**9)
    whole = play_session(game, generate=nowhere, plan=True, **kwargs)
    assert whole.rendered == episodes
    monkeypatch.setattr(plan, "SAMPLE_STEPS", sample_steps)
    planned_plan = play_session(game, generate=nowhere, plan=True, **kwargs)
    (seat,) = planned_plan.seats
    assert planned_plan.episodes == episodes and not seat.exact
    sampled = planned_plan.rendered < episodes
    assert sampled == (sample_steps < DEFAULT_SAMPLE_STEPS)
    with LocalChatServer(serving(whole.replies), count_tokens=chars_rule) as server:
        run = play_session(game, generate=GenerateConfig(base_url=server.base_url),
                           out=tmp_path / "run", **kwargs)  # fmt: skip
    stats = run.calls["openai:stand-in"]
    assert stats.calls == server.answered > 0
    if not sampled:  # every prompt rendered: the run asks exactly what the plan counted
        assert (seat.calls, seat.prompt_tokens) == (stats.calls, stats.prompt_tokens)
        assert seat.completion_tokens == stats.completion_tokens
    planned = seat.prompt_tokens + seat.completion_tokens
    recorded = stats.prompt_tokens + stats.completion_tokens
    assert abs(planned - recorded) <= 0.10 * recorded, (planned, recorded)
    assert abs(seat.calls - stats.calls) <= 0.10 * stats.calls


@pytest.mark.slow
def test_plan_calls_nothing_and_writes_nothing(tmp_path, capsys):
    with LocalChatServer(lambda body: "ACTION QUERY") as server:
        base = ["--seats", "openai:m,price=0.15/0.60", "--base-url", server.base_url, "--plan"]
        assert main(["play", "moral_hazard", *base, "--episodes", "2",
                     "--out", str(tmp_path / "play")]) == 0  # fmt: skip
        played = capsys.readouterr().out
        assert main(["experiment", "moral_hazard/isolation", *base, "--replicates", "1",
                     "--out", str(tmp_path / "iso")]) == 0  # fmt: skip
        designed = capsys.readouterr().out
        assert main(["scenarios", "evaluate", "--game", "moral_hazard", *base, "--episodes",
                     "1", "--out", str(tmp_path / "sc")]) == 0  # fmt: skip
        scored = capsys.readouterr().out
        assert server.received == 0
    assert not any((tmp_path / name).exists() for name in ("play", "iso", "sc"))
    for out in (played, designed, scored):
        assert "plan, before any call" in out and "openai:m,price=0.15/0.60" in out
        assert "chars/4: an estimate" in out and " $0." in out
    assert "cost unknown" not in played


def test_experiment_list_shows_prompt_tokens_beside_calls(capsys):
    assert main(["experiment", "--list"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "open_harvest/schelling" in x]
    # 6 conditions x 3 seeds x 5 agents x (5 trials x 400 steps + 4 rewrites) = 180,360 calls,
    # at open_harvest's 3,635 prompt tokens per call: 655,608,600.
    assert "180,360 calls" in line and "~655.6M prompt tokens" in line


def test_a_run_prints_its_plan_and_a_seat_without_price_says_cost_unknown(tmp_path, capsys):
    with LocalChatServer(lambda body: "ACTION QUERY") as server:
        generate = GenerateConfig(base_url=server.base_url)
        run = play_session("moral_hazard", default_seat="openai:m", episodes=1,
                           generate=generate, out=tmp_path / "r")  # fmt: skip
    out = capsys.readouterr().out
    assert out.index("plan, before any call") >= 0 and "cost unknown for openai:m" in out
    results = json.loads((tmp_path / "r" / "results.json").read_text())
    assert results["calls"]["openai:m"]["cost_usd"] is None
    assert run.calls["openai:m"].calls > 0


# --------------------------------------------------------------------------- prices
def test_prices_file_json_and_yaml(tmp_path):
    rates = {
        "gpt-x": {"input": 3, "cached_input": 0.3, "output": 15},
        "local": {"input": 0, "output": 0},
    }
    (tmp_path / "p.json").write_text(json.dumps(rates))
    (tmp_path / "p.yaml").write_text(
        "gpt-x:\n  input: 3\n  cached_input: 0.3\n  output: 15\nlocal: {input: 0, output: 0}\n"
    )
    for name in ("p.json", "p.yaml"):
        prices = load_prices(tmp_path / name)
        assert prices == {"gpt-x": Price(3.0, 0.3, 15.0), "local": Price(0.0, 0.0, 0.0)}
    # A model is found by its full name, or by the name after its provider.
    assert price_for("openai:gpt-x", prices) == price_for("inspect:openai/gpt-x", prices)
    assert price_for("openai:other", prices) is None
    assert seat_price("openai:gpt-x,price=1/0.5/2", prices) == Price(1.0, 0.5, 2.0)
    assert seat_price("openai:gpt-x,temperature=0.5", prices) == Price(3.0, 0.3, 15.0)
    assert seat_price("scripted:teacher", {"teacher": Price(1, 1, 1)}) is None
    assert parse_price("0.15/0.60") == Price(0.15, 0.15, 0.60)  # no cached rate: no discount
    # 1,000 prompt tokens of which 400 cached, 100 completion tokens, at $3 / $0.30 / $15:
    # (600 x 3 + 400 x 0.3 + 100 x 15) / 1e6 = 0.00342
    assert cost(Price(3, 0.3, 15), 1000, 400, 100) == pytest.approx(0.00342)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ('{"m": {"input": "1", "output": 2}}', "model 'm', field 'input': expected a number"),
        ('{"m": {"input": 1}}', "model 'm': field 'output' is missing"),
        ('{"m": {"input": 1, "output": 2, "x": 3}}', "model 'm': unknown field 'x'"),
        ('{"m": {"input": -1, "output": 2}}', "field 'input': expected a finite number >= 0"),
        ('{"m": {"input": true, "output": 2}}', "field 'input': expected a number"),
        ('{"m": [1, 2]}', "model 'm': expected a mapping"),
        ("[1, 2]", "expected a mapping of model name to prices"),
        ('{"m": {"input": 1e999, "output": 2}}', "expected a finite number"),
        ("{not json", "not valid JSON"),
    ],
)
def test_a_bad_prices_file_is_one_line_naming_file_model_and_field(tmp_path, content, words):
    path = tmp_path / "prices.json"
    path.write_text(content)
    with pytest.raises(PriceError) as error:
        load_prices(path)
    assert str(path) in str(error.value) and words in str(error.value)
    assert "\n" not in str(error.value)


def test_prices_files_fuzzed_raise_only_price_errors(tmp_path):
    rng = random.Random(0)
    atoms = [0, 1.5, -2, "x", None, True, [], {}, {"input": 1}, 1e308, "", "input"]
    path = tmp_path / "fuzz.json"
    for _ in range(300):
        value = {rng.choice(["m", "", "input"]): {rng.choice(["input", "output", "cached_input",
                 "z"]): rng.choice(atoms) for _ in range(rng.randrange(4))}}  # fmt: skip
        text = json.dumps(value) if rng.random() < 0.8 else json.dumps(value)[: rng.randrange(20)]
        path.write_text(text)
        try:
            prices = load_prices(path)
        except PriceError as error:
            assert "\n" not in str(error)
        else:
            assert all(isinstance(p, Price) for p in prices.values())


def test_bad_prices_from_the_command_line_are_one_line(tmp_path, capsys):
    (tmp_path / "p.json").write_text('{"m": {"input": 1}}')
    argv = ["play", "moral_hazard", "--seats", "openai:m", "--base-url", "http://127.0.0.1:9/v1"]
    assert main([*argv, "--prices", str(tmp_path / "p.json"), "--plan"]) == 2
    assert main(["play", "moral_hazard", "--seats", "openai:m,price=abc", "--plan",
                 "--base-url", "http://127.0.0.1:9/v1"]) == 2  # fmt: skip
    errors = capsys.readouterr().err.strip().splitlines()
    assert "field 'output' is missing" in errors[0] and "price: expected input/output" in errors[1]
    assert parse_seat("openai:m,price=1/2").options["price"] == "1/2"


# --------------------------------------------------------------------------- cached tokens
def test_cached_tokens_are_read_recorded_totalled_and_priced(tmp_path, capsys):
    # The server counts chars/4 and reports 3 cached prompt tokens on every call.
    with LocalChatServer(lambda body: "ACTION QUERY", count_tokens=chars_rule,
                         cached_tokens=lambda body: 3) as server:  # fmt: skip
        client = OpenAIClient("m", GenerateConfig(base_url=server.base_url))
        request = ChatRequest(({"role": "user", "content": "x" * 40},))
        (completion,) = client.complete([request])
        assert (completion.prompt_tokens, completion.cached_tokens) == (10, 3)
        price = "price=2/0.5/8"
        run = play_session("moral_hazard", default_seat=f"openai:m,{price}", episodes=1,
                           generate=GenerateConfig(base_url=server.base_url),
                           out=tmp_path / "r")  # fmt: skip
    seat = f"openai:m,{price}"
    stats = run.calls[seat]
    assert stats.calls > 0 and stats.cached_tokens == 3 * stats.calls
    lines = read_lines(tmp_path / "r" / "transcript.jsonl")[0]
    calls = [r for r in lines if r["type"] == "call"]
    assert [r["cached_tokens"] for r in calls] == [3] * stats.calls
    assert sum(r["prompt_tokens"] for r in calls) == stats.prompt_tokens
    results = json.loads((tmp_path / "r" / "results.json").read_text())["calls"][seat]
    assert results["cached_tokens"] == 3 * stats.calls
    fresh = stats.prompt_tokens - stats.cached_tokens
    dollars = (fresh * 2 + stats.cached_tokens * 0.5 + stats.completion_tokens * 8) / 1e6
    assert results["cost_usd"] == pytest.approx(dollars)
    (totals,) = [r["seats"][seat] for r in lines if r["type"] == "totals"]
    assert totals["calls"] == stats.calls and totals["cached_tokens"] == 3 * stats.calls
    assert totals["cost_usd"] == pytest.approx(dollars)
    table = format_calls(run.calls, run.prices)
    assert f"{stats.prompt_tokens}/{stats.cached_tokens}/{stats.completion_tokens}" in table
    assert f"${dollars:,.4f}" in table


def test_a_cached_count_above_the_prompt_is_not_believed():
    with LocalChatServer(lambda body: "A", count_tokens=chars_rule,
                         cached_tokens=lambda body: 10_000) as server:  # fmt: skip
        client = OpenAIClient("m", GenerateConfig(base_url=server.base_url))
        (completion,) = client.complete([ChatRequest(({"role": "user", "content": "abcd"},))])
    assert (completion.prompt_tokens, completion.cached_tokens) == (1, 0)


def test_inspect_cache_reads_and_writes_are_prompt_tokens():
    # Inspect's input_tokens are those billed at the full rate, beside its cache reads and
    # writes (Anthropic's cache_read_input_tokens and cache_creation_input_tokens).
    usage = SimpleNamespace(input_tokens=10, output_tokens=4, input_tokens_cache_read=30,
                            input_tokens_cache_write=5, reasoning_tokens=None)  # fmt: skip
    completion = completion_from_output(SimpleNamespace(completion="ok", usage=usage))
    assert (completion.prompt_tokens, completion.cached_tokens) == (45, 30)
    assert (completion.cache_write_tokens, completion.completion_tokens) == (5, 4)
    bare = completion_from_output(SimpleNamespace(completion="ok", usage=SimpleNamespace(
        input_tokens=7, output_tokens=1)))  # fmt: skip
    assert (bare.prompt_tokens, bare.cached_tokens, bare.cache_write_tokens) == (7, 0, 0)


def test_the_chars_rule_rounds_up():
    assert [chars_rule("x" * n) for n in (0, 1, 4, 5, 8)] == [0, 1, 1, 2, 2]
    assert CHARS_RULE.exact is False
