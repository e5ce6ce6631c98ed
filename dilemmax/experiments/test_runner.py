"""``dilemmax experiment`` on a tiny design of this test's own: a planted model beside a scripted
partner on moral_hazard, two parts. The files are written, the planted policy is recovered, a
resume replays every call, --list, combine, shards and merge work, and mistakes are one line."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

import dilemmax
from dilemmax.cli import main
from dilemmax.experiments import registry
from dilemmax.experiments.design import Design, Part, Plan, Report
from dilemmax.llm.server import LocalChatServer


def planted(body) -> str:
    """Queries at work exactly when it is Agent 1, posts no note, picks D."""
    text = body["messages"][-1]["content"]
    if "(work)" in text:
        return "ACTION QUERY" if "Agent 1 of" in text else "ACTION LOCAL B"
    if "(note)" in text:
        return "NO NOTE"
    return "FINAL D"


def add_arguments(parser) -> None:
    parser.add_argument("--episodes", type=int, default=2, help="episodes per part")


# Built once: batched play keeps one compiled loop per env, so every run of this test shares them.
TWO, THREE = dilemmax.make("moral_hazard"), dilemmax.make("moral_hazard", num_agents=3)


def plan(args) -> Plan:
    partner = {"agent_1": "scripted:teacher"}
    return Plan(
        [
            Part("pair", TWO, seats=partner, episodes=args.episodes, calls_per_episode=2.5),
            Part(
                "trio",
                THREE,
                seats=partner,
                episodes=args.episodes,
                calls_per_episode=2.5,
                keep_steps=True,
            ),
        ],
        {"sizes": [2, 3]},
    )


def analyse(plan, results, args, extra) -> Report:
    query = {
        part.name: np.asarray(r.metrics["query_by_agent"]).mean(axis=0).tolist()
        for part, r in zip(plan.parts, results, strict=True)
    }
    table = "| part | model query |\n| --- | --- |\n" + "".join(
        f"| {name} | {q[0]:.2f} |\n" for name, q in query.items()
    )
    trio = results[1]  # kept its steps: the played steps, the act replies, an infos digest
    steps = {
        "played": trio.valid.sum(axis=1).tolist(),
        "replies": [[(r["step"], r["agent"], r["valid"]) for r in e] for e in trio.replies],
        "infos": float(sum(np.asarray(x, np.float64).sum() for x in jax.tree.leaves(trio.infos))),
    }
    assert results[0].valid is None and not results[0].replies
    return Report(
        {
            "query": query,
            "episodes": [len(r.episodes) for r in results],
            "extra": extra,
            "steps": steps,
        },
        {"queries": table},
        {"bars": lambda path: _bars(path, query)},
    )


def _bars(path, query) -> None:
    from matplotlib import pyplot

    pyplot.bar(list(query), [q[0] for q in query.values()])
    pyplot.savefig(path)


def combine(runs) -> Report:
    rows = [(run["options"]["seed"], run["results"]["query"]["pair"][0]) for run in runs]
    return Report({"rows": rows}, {"by_seed": "\n".join(f"{s} {q}" for s, q in rows)})


def extra(plan, args, out, resume) -> dict:
    return {"probe": len(plan.parts), "resumed": resume}


TINY = Design(
    "moral_hazard/tiny",
    "this test, Section 0",
    "a planted model and a teacher",
    add_arguments,
    plan,
    analyse,
    combine,
    extra,
)


@pytest.fixture(autouse=True)
def tiny_registry(monkeypatch):
    monkeypatch.setattr(registry, "designs", lambda: {TINY.name: TINY})


def command(url, out, *extra_args):
    return ["experiment", TINY.name, "--seats", "openai:tiny", "--base-url", url, "--envs", "2",
            "--no-progress", "--out", str(out), *extra_args]  # fmt: skip


def test_run_resume_list_combine_shards_and_mistakes(tmp_path, capsys):
    run = tmp_path / "run"
    with LocalChatServer(planted) as server:
        assert main(command(server.base_url, run)) == 0
        asked = server.answered
        results = json.loads((run / "results.json").read_text())
        assert main(command(server.base_url, run, "--resume")) == 0
        assert server.answered == asked  # every call replayed from the transcript
        for i in (0, 1, 2):  # shard 1 plays no trio episode (episodes 0, 3 | 1 | 2 of 4)
            assert main(command(server.base_url, tmp_path / f"s{i}", "--shard", f"{i}/3")) == 0
        assert server.answered == 2 * asked  # the shards together asked the run's calls once
    assert {p.name for p in run.iterdir()} >= {"results.json", "queries.md", "bars.png"}
    assert (run / "bars.png").read_bytes()[:4] == b"\x89PNG"
    assert results["design"] == TINY.name and results["section"] == "this test, Section 0"
    assert results["calls"] == 2 * 2.5 * 2
    assert results["seats"] == {"by_agent": {}, "default": "openai:tiny", "models": ["openai:tiny"]}
    assert results["options"]["episodes"] == 2 and results["tables"] == ["queries"]
    # The planted model queries only as Agent 1 (agent_0), never as Agent 3; the teacher does.
    assert results["results"]["query"] == {"pair": [1.0, 1.0], "trio": [1.0, 1.0, 0.0]}
    assert results["results"]["episodes"] == [2, 2]
    steps = results["results"]["steps"]  # work, note, final; agent_2 never queried: no note
    assert steps["played"] == [3, 3] and steps["infos"] > 0
    replies = [[0, "agent_0", True], [0, "agent_2", True], [1, "agent_0", True],
               [2, "agent_0", True], [2, "agent_2", True]]  # fmt: skip
    assert steps["replies"] == [replies, replies]
    assert results["results"]["extra"] == {"probe": 2, "resumed": False}
    resumed = json.loads((run / "results.json").read_text())
    assert resumed["results"]["query"] == results["results"]["query"]

    shard_dirs = [str(tmp_path / f"s{i}") for i in (2, 0, 1)]
    assert main(["experiment", "merge", *shard_dirs, "--out", str(tmp_path / "merged")]) == 0
    merged = json.loads((tmp_path / "merged" / "results.json").read_text())
    assert merged["results"] == results["results"]
    assert not (tmp_path / "s0" / "results.json").exists()  # a shard is analysed only merged

    capsys.readouterr()
    assert main(["experiment", "--list"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(TINY.name) and "10 calls" in line and "this test, Section 0" in line

    out = tmp_path / "combined"
    assert main(["experiment", "combine", TINY.name, str(run), str(tmp_path / "merged"),
                 "--out", str(out)]) == 0  # fmt: skip
    combined = json.loads((out / "results.json").read_text())
    assert combined["results"]["rows"] == [[0, 1.0], [0, 1.0]]
    assert (out / "by_seed.md").is_file()

    capsys.readouterr()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "results.json").write_text("{not json")
    (tmp_path / "edited").mkdir()
    edited = {**results, "results": {"query": {}}}  # a hand-edited run: no "pair" row
    (tmp_path / "edited" / "results.json").write_text(json.dumps(edited))
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "results.json").write_text('{"summary": {}}')
    x = str(tmp_path / "x")
    cases = [
        (["combine", TINY.name, str(tmp_path / "broken"), "--out", x], "broken/results.json"),
        (["combine", TINY.name, str(tmp_path / "foreign"), "--out", x], "not the results of"),
        (["combine", TINY.name, str(out), "--out", x], "combined from several runs"),
        (
            ["combine", TINY.name, str(run), str(tmp_path / "edited"), "--out", x],
            "edited/results.json: its results do not read as moral_hazard/tiny's (KeyError",
        ),
        (["combine", "moral_hazard/nope", str(run), "--out", x], "no experiment design"),
        (["merge", str(tmp_path / "s0"), "--out", x], "shard(s) 1/3, 2/3 not given"),
        ([TINY.name, "--seats", "scripted:teacher"], "needs --out"),
        ([TINY.name, "--seats", "bogus:x", "--out", x], "unknown seat kind"),
        ([TINY.name, "--seats", "scripted:teacher", "--out", x, "--episodes", "0"], ">= 1"),
    ]
    for argv, message in cases:
        assert main(["experiment", *argv]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("dilemmax experiment: error:") and "\n" not in err, err
        assert message in err, err
    assert not (tmp_path / "x").exists()


def test_list_goes_on_past_a_design_it_cannot_plan(monkeypatch, capsys):
    from dataclasses import replace

    from dilemmax.errors import UsageError

    def needs_seats(args):
        raise UsageError("the arena needs a model in every seat")

    def broken(args):
        raise KeyError("oops")

    needy = replace(TINY, name="moral_hazard/needy", plan=needs_seats)
    bad = replace(TINY, name="moral_hazard/bad", plan=broken)
    known = {d.name: d for d in (needy, TINY)}
    monkeypatch.setattr(registry, "designs", lambda: known)
    assert main(["experiment", "--list"]) == 0
    needy_line, tiny_line = capsys.readouterr().out.strip().split("\n")
    assert "calls depend on the options (the arena needs a model" in needy_line
    assert "10 calls" in tiny_line
    known[bad.name] = bad
    assert main(["experiment", "--list"]) == 1
    assert "cannot be planned: KeyError" in capsys.readouterr().out.strip().split("\n")[-1]
