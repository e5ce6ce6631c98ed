"""Play sessions: per-seat protocol instances that travel with a rotated seat, and shards of a run
played against two servers whose merge is the whole run (metrics, episodes, call keys)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import dilemmax
from dilemmax.cli import main
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.server import LocalChatServer
from dilemmax.llm.session import Part, play_parts
from dilemmax.llm.session_options import SessionOptions, Shard
from dilemmax.llm.transcript import read_lines


def planted(body) -> str:
    """Stays local at work (option B), posts no note, picks D: a policy known in advance."""
    text = body["messages"][-1]["content"]
    if "(work)" in text or "| WORK" in text:
        return "ACTION LOCAL B"
    if "(note)" in text or "| NOTE" in text:
        return "NO NOTE"
    return "FINAL D"


def calls_in(out: Path) -> list[dict]:
    rows, _ = read_lines(out / "transcript.jsonl")
    return [r for r in rows if r["type"] == "call"]


def session_args(url: str, out: Path | None, **overrides) -> SessionOptions:
    settings = dict(default_seat="openai:tiny", envs=2, out=out, progress=False)
    return SessionOptions(generate=GenerateConfig(base_url=url), **{**settings, **overrides})


@pytest.mark.slow
def test_a_seat_protocol_option_is_that_seats_and_moves_with_it_on_rotation(tmp_path):
    env = dilemmax.make("moral_hazard")
    part = Part("p", env, episodes=1, rotate=True, seat_protocol_options={"agent_1": {"brief": 1}})
    with LocalChatServer(planted) as server:
        session = play_parts([part], session_args(server.base_url, tmp_path / "run"), {"t": 1})
    brief = {}
    for call in calls_in(tmp_path / "run"):
        if call["kind"] == "act":
            brief.setdefault((call["part"], call["agent"]), set()).add("| WORK" in call["prompt"]
                or "| FINAL" in call["prompt"] or "| NOTE" in call["prompt"])  # fmt: skip
    # rot0: agent_1 holds the brief seat; rot1: the seats turned, and its options went with it.
    assert brief == {("p/rot0", "agent_0"): {False}, ("p/rot0", "agent_1"): {True},
                     ("p/rot1", "agent_0"): {True}, ("p/rot1", "agent_1"): {False}}  # fmt: skip
    [result] = session.results
    assert [e["part"] for e in result.episodes] == ["p/rot0", "p/rot1"]
    assert result.metrics["local_reward"].shape == (2,)


PLAY = ["play", "moral_hazard", "--seat", "agent_0=openai:tiny", "--seats", "scripted:teacher",
        "--rotate", "--episodes", "3", "--envs", "2", "--no-progress"]  # fmt: skip


@pytest.mark.slow
def test_two_shards_on_two_servers_merge_into_the_whole_run(tmp_path, capsys):
    with LocalChatServer(planted) as whole_server:
        assert main(PLAY + ["--base-url", whole_server.base_url, "--out", str(tmp_path / "w")]) == 0
        whole_calls = whole_server.answered
        with LocalChatServer(planted) as one, LocalChatServer(planted) as two:
            for i, server in enumerate((one, two)):
                argv = PLAY + ["--base-url", server.base_url, "--shard", f"{i}/2"]
                assert main(argv + ["--out", str(tmp_path / f"s{i}")]) == 0
            answered = [one.answered, two.answered]
        merged = tmp_path / "m"
        assert main(["play", "merge", str(tmp_path / "s1"), str(tmp_path / "s0"),
                     "--out", str(merged)]) == 0  # fmt: skip
        # The merged folder is the whole run: resuming the unsharded command there asks nothing.
        argv = PLAY + ["--base-url", whole_server.base_url, "--out", str(merged), "--resume"]
        assert main(argv) == 0 and whole_server.answered == whole_calls
    # Each server answered its shard's calls, and together the whole run's.
    assert answered == [len(calls_in(tmp_path / f"s{i}")) for i in (0, 1)]
    assert sum(answered) == whole_calls and min(answered) > 0
    got = json.loads((merged / "results.json").read_text())
    want = json.loads((tmp_path / "w" / "results.json").read_text())
    assert got["summary"] == want["summary"] and got["episodes"] == want["episodes"]
    counts = ("calls", "format_validity", "prompt_tokens", "completion_tokens")
    seat = "openai:tiny"
    assert {c: got["calls"][seat][c] for c in counts} == {c: want["calls"][seat][c] for c in counts}
    # Rotation 0 episodes 0, 2 and rotation 1 episode 1 are shard 0's: their env slots (so their
    # call keys) and prompts are those of the whole run.
    whole = {c["key"]: c["prompt_hash"] for c in calls_in(tmp_path / "w")}
    assert {c["key"]: c["prompt_hash"] for c in calls_in(merged)} == whole
    shard0 = {
        e["id"] for e in json.loads((tmp_path / "s0" / "results.json").read_text())["episodes"]
    }
    assert shard0 == {"main/rot0|e0", "main/rot0|e2", "main/rot1|e1"}
    summary = got["summary"]["all"]  # the planted model never queries; the teacher always does
    assert summary["query_by_agent[openai:tiny]"][0] == 0.0
    assert summary["query_by_agent[scripted:teacher]"][0] == 1.0
    capsys.readouterr()

    # A merge that is not the N shards of one run is refused in one line, naming what is wrong.
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "shard.json").write_text('{"format": "dilemmax-shard", "version": 1}')
    cases = [
        ([tmp_path / "s0", tmp_path / "s0"], "both shard 0/2"),
        ([tmp_path / "s0"], "shard(s) 1/2 not given"),
        ([tmp_path / "s0", tmp_path / "w"], "w/shard.json: no shard record"),
        ([tmp_path / "s0", tmp_path / "odd"], "odd/shard.json: a shard of `dilemmax None`"),
    ]
    for dirs, message in cases:
        assert main(["play", "merge", *map(str, dirs), "--out", str(tmp_path / "x")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("dilemmax play: error:") and "\n" not in err and message in err, err
    assert not (tmp_path / "x").exists()
    record = json.loads((tmp_path / "s1" / "shard.json").read_text())
    record["identity"]["seed"] = 1
    (tmp_path / "odd" / "shard.json").write_text(json.dumps(record))
    assert main(["play", "merge", str(tmp_path / "s0"), str(tmp_path / "odd"), "--out",
                 str(tmp_path / "x")]) == 2  # fmt: skip
    assert "shard of another run than" in (err := capsys.readouterr().err)
    assert "(their seed differ; only --shard, --out and the server options may)" in err


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra, message",
    [
        (["--shard", "2/2"], "need 0 <= i < N"),
        (["--shard", "a/b"], "expected i/N"),
        (["--shard", "0/2"], "--shard needs --out"),
        (["--shard", "0/2", "--out", "{out}", "--protocol", "memory_rounds=2"], "recall earlier"),
    ],
)
def test_shard_mistakes_are_one_line(extra, message, tmp_path, capsys):
    extra = [x.format(out=tmp_path / "o") for x in extra]
    argv = ["play", "moral_hazard", "--seats", "openai:tiny", "--base-url", "http://127.0.0.1:9/v1"]
    assert main(argv + ["--no-progress", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dilemmax play: error:") and "\n" not in err and message in err, err
    assert not (tmp_path / "o").exists()  # a refused start leaves no folder behind


def test_shard_parse():
    assert Shard.parse(None) == Shard(0, 1) and not Shard.parse(None).sharded
    assert Shard.parse("3/4") == Shard(3, 4) and str(Shard(3, 4)) == "3/4"


@pytest.mark.slow
def test_a_trained_seat_is_checked_against_each_parts_env(tmp_path):
    from dilemmax.errors import UsageError
    from dilemmax.llm.test_cli import fake_trained_run

    run = fake_trained_run(tmp_path / "trained")  # trained on two-agent moral_hazard
    parts = [Part("pair", dilemmax.make("moral_hazard")),
             Part("trio", dilemmax.make("moral_hazard", num_agents=3))]  # fmt: skip
    args = session_args("http://127.0.0.1:9/v1", None, default_seat=f"trained:{run}")
    with pytest.raises(UsageError, match="cannot load trained seat"):
        play_parts(parts, args, {})
