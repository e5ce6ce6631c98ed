"""Spending limits: ``--max-calls``, ``--token-limit`` and ``--cost-limit`` stop a run at a clean
boundary with every call made recorded and the finished episodes written as partial (exit
status 4); ``--resume`` with a higher limit then gives the run an uncapped command gives."""

from __future__ import annotations

import faulthandler
import json
from pathlib import Path

import pytest

from dilemmax.cli import main
from dilemmax.llm.conftest import moral_hazard_reply as reply
from dilemmax.llm.limits import STOPPED_STATUS, Budget, LimitReached, Limits
from dilemmax.llm.pricing import Price
from dilemmax.llm.server import LocalChatServer
from dilemmax.llm.transcript import read_lines

# Priced so a call's dollars are its tokens / 1000: a cost limit reads as a token limit.
SEAT = "openai:tiny,price=1000/1000"


@pytest.fixture(autouse=True)
def no_hang():
    faulthandler.dump_traceback_later(300, exit=True)  # a hung run ends with its stacks
    yield
    faulthandler.cancel_dump_traceback_later()


def command(url: str, out: Path, *extra: str) -> list[str]:
    return ["play", "moral_hazard", "--seats", SEAT, "--episodes", "3", "--envs", "2",
            "--no-progress", "--base-url", url, "--out", str(out), *extra]  # fmt: skip


def calls_in(out: Path) -> dict[str, dict]:
    """key -> the recorded call, less its latency (which no two runs share)."""
    rows, _ = read_lines(out / "transcript.jsonl")
    return {
        r["key"]: {k: v for k, v in r.items() if k != "latency_s"}
        for r in rows
        if r["type"] == "call"
    }


def batch_of(key: str) -> str:
    """The batch a call was sent in: its part, step and wave (env slots 0-1 are wave 0)."""
    part, episode, _, step, *_ = key.split("|")
    return f"{part}|{step}|{int(episode[1:]) // 2}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uncapped run: its calls, results and the size of each batch it sent."""
    out = tmp_path_factory.mktemp("reference")
    with LocalChatServer(reply) as server:
        assert main(command(server.base_url, out)) == 0
        assert server.answered == 15
    calls = calls_in(out)
    batches: dict[str, int] = {}
    for key in calls:
        batches[batch_of(key)] = batches.get(batch_of(key), 0) + 1
    return calls, json.loads((out / "results.json").read_text()), batches


def eleventh_call_limit(calls: dict[str, dict]) -> int:
    """A token limit that lets the second wave's first batch send one of its two calls: the first
    10 calls' tokens plus 1.5 times the largest of them, so one more call of about that size fits
    and a second does not."""
    sizes = [c["prompt_tokens"] + c["completion_tokens"] for c in calls.values()]
    return sum(sizes[:10]) + int(1.5 * max(sizes[:10]))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flag", "high"),
    [("--max-calls", "100"), ("--token-limit", "1000000"), ("--cost-limit", "1000")],
)  # fmt: skip
def test_a_limit_stops_cleanly_and_resuming_higher_equals_the_uncapped_run(
    reference, tmp_path, capsys, flag, high
):
    """Each limit falls inside the second wave's first batch (10 calls made, its 2 to go): the
    first wave's two episodes finish."""
    want_calls, want, batches = reference
    tokens = eleventh_call_limit(want_calls)  # the seat's price makes a token $0.001
    low = {"--max-calls": "11", "--token-limit": str(tokens), "--cost-limit": str(tokens / 1000)}
    low = low[flag]
    out = tmp_path / "run"
    with LocalChatServer(reply) as server:
        assert main(command(server.base_url, out, flag, low)) == STOPPED_STATUS
        stopped_after = server.answered
        partial = json.loads((out / "results.json").read_text())
        recorded = calls_in(out)
        # Every call the server answered is in the transcript, and the limit fell mid-batch:
        # some batch of the uncapped run was cut short.
        assert len(recorded) == stopped_after == 11
        cut = {b: sum(batch_of(k) == b for k in recorded) for b in {batch_of(k) for k in recorded}}
        assert any(n < batches[b] for b, n in cut.items())
        assert partial["partial"] is True
        assert partial["stopped_by"] == flag[2:].replace("-", "_")
        assert partial["spent"]["calls"] == partial["calls"][SEAT]["calls"] == stopped_after
        spent = {"--max-calls": partial["spent"]["calls"],
                 "--token-limit": partial["spent"]["tokens"],
                 "--cost-limit": partial["spent"]["cost"]}[flag]  # fmt: skip
        assert spent <= float(low)  # never past the limit (no call outgrew the largest before)
        assert partial["episodes"] == want["episodes"][:2]
        line = capsys.readouterr().err.strip().splitlines()[-1]
        assert f"stopped by {flag} " in line and "--resume and a higher" in line

        assert main(command(server.base_url, out, flag, high, "--resume")) == 0
        assert server.answered == 15  # each call made once over both invocations
    assert calls_in(out) == want_calls
    got = json.loads((out / "results.json").read_text())
    assert "partial" not in got
    assert got["summary"] == want["summary"] and got["episodes"] == want["episodes"]
    # The calls table too, but for what a resume always changes: replays and latency.
    resumed, uncapped = dict(got["calls"][SEAT]), dict(want["calls"][SEAT])
    assert resumed.pop("replayed") == stopped_after and uncapped.pop("replayed") == 0
    resumed.pop("mean_latency_s"), uncapped.pop("mean_latency_s")
    assert resumed == uncapped


def test_a_cost_limit_without_a_price_is_refused_before_any_call(tmp_path, capsys):
    with LocalChatServer(reply) as server:
        argv = command(server.base_url, tmp_path / "run", "--cost-limit", "1")
        argv[argv.index(SEAT)] = "openai:tiny"
        assert main(argv) == 2
        assert server.answered == 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--cost-limit: no price for openai:tiny" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("given", [["--max-calls", "0"], ["--cost-limit", "-1"],
                                   ["--token-limit", "0"]])  # fmt: skip
def test_a_limit_out_of_range_is_one_line(tmp_path, capsys, given):
    assert main(command("http://127.0.0.1:9/v1", tmp_path / "run", *given)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and given[0] in err


def test_the_budget_plans_a_batch_at_the_largest_call_seen():
    budget = Budget(Limits(token_limit=1000))
    assert budget.allowance(5) == 1  # no size known yet: one call goes alone
    budget.add("s", 300, 50)
    assert budget.allowance(5) == 1  # 650 left, calls of 350: one fits
    budget.add("s", 200, 10)
    assert budget.allowance(5) == 1  # 440 left, still 350 at most
    budget.add("s", 100, 0)
    with pytest.raises(LimitReached) as stop:
        budget.allowance(5)  # 340 left: no call of 350 fits
    assert stop.value.limit == "token_limit" and stop.value.spent["tokens"] == 660

    calls = Budget(Limits(max_calls=3))
    assert calls.allowance(5) == 3
    for _ in range(3):
        calls.add("s", 10, 10)
    with pytest.raises(LimitReached):
        calls.allowance(1)

    # Dollars at the seat's price; calls answered from the cache are not in a transcript's
    # spending.
    priced = Budget(Limits(cost_limit=1.0), lambda seat: Price(2.0, 1.0, 4.0))
    priced.add_recorded([
        {"seat": "s", "prompt_tokens": 100_000, "cached_tokens": 50_000, "completion_tokens": 0},
        {"seat": "s", "prompt_tokens": 900_000, "completion_tokens": 900_000, "cached": True},
    ])  # fmt: skip
    assert priced.spent() == {"calls": 1, "tokens": 100_000, "cost": pytest.approx(0.15)}
    assert priced.allowance(10) == 5  # 0.85 left, calls of 0.15


@pytest.mark.slow
def test_an_experiment_stopped_by_a_limit_writes_its_calls_as_partial_and_resumes(tmp_path):
    out = tmp_path / "run"
    argv = ["experiment", "moral_hazard/grid", "--seats", "openai:tiny", "--replicates", "1",
            "--episodes", "1", "--no-random", "--conditions", "k=0.10", "--envs", "2",
            "--no-progress", "--out", str(out)]  # fmt: skip
    with LocalChatServer(reply) as server:
        argv += ["--base-url", server.base_url]
        assert main([*argv, "--max-calls", "3"]) == STOPPED_STATUS
        partial = json.loads((out / "results.json").read_text())
        assert partial["partial"] is True and partial["stopped_by"] == "max_calls"
        assert partial["calls"] == partial["spent"]["calls"] == server.answered == 3
        assert partial["results"] == {} and not list(out.glob("*.md"))  # nothing analysed
        assert main([*argv, "--max-calls", "1000", "--resume"]) == 0
    done = json.loads((out / "results.json").read_text())
    assert "partial" not in done and done["calls"] == server.answered > 3
