"""``dilemmax experiment`` on a tiny design of this test's own: a planted model beside a scripted
partner on moral_hazard, two parts. The files are written, the planted policy is recovered, a
resume replays every call, --list, combine, shards and merge work, and mistakes are one line."""

from __future__ import annotations

import json
from dataclasses import dataclass

import jax
import numpy as np
import pytest

import dilemmax
from dilemmax import experiments
from dilemmax.cli import main
from dilemmax.envs.option_declaration import setting
from dilemmax.experiments import catalogue, registry
from dilemmax.experiments.design import Design, DesignParams, Part, Plan, Report
from dilemmax.llm.server import LocalChatServer


def planted(body) -> str:
    """Queries at work exactly when it is Agent 1, posts no note, picks D."""
    text = body["messages"][-1]["content"]
    if "(work)" in text:
        return "ACTION QUERY" if "Agent 1 of" in text else "ACTION LOCAL B"
    if "(note)" in text:
        return "NO NOTE"
    return "FINAL D"


@dataclass(frozen=True)
class TinyParams(DesignParams):
    episodes: int = setting(2, "episodes per part")


# Built once: batched play keeps one compiled loop per env, so every run of this test shares them.
TWO, THREE = dilemmax.make("moral_hazard"), dilemmax.make("moral_hazard", num_agents=3)


def plan(params, run) -> Plan:
    partner = {"agent_1": "scripted:teacher"}
    return Plan(
        [
            Part("pair", TWO, seats=partner, episodes=params.episodes, calls_per_episode=2.5),
            Part(
                "trio",
                THREE,
                seats=partner,
                episodes=params.episodes,
                calls_per_episode=2.5,
                keep_steps=True,
            ),
        ],
        {"sizes": [2, 3]},
    )


def analyse(plan, results, params, run, extra) -> Report:
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


def extra(plan, params, run) -> dict:
    return {"probe": len(plan.parts), "resumed": run.resume}


TINY = Design(
    "moral_hazard/tiny",
    "this test, Section 0",
    "a planted model and a teacher",
    TinyParams,
    plan,
    analyse,
    combine,
    extra,
)


TINY_ENTRY = catalogue.Entry(TINY.name, TINY.section, TINY.summary, 10)


@pytest.fixture(autouse=True)
def tiny_registry(monkeypatch):
    monkeypatch.setattr(registry, "designs", lambda: {TINY.name: TINY})
    monkeypatch.setattr(catalogue, "entries", lambda: {TINY.name: TINY_ENTRY})


def command(url, out, *extra_args):
    return ["experiment", TINY.name, "--seats", "openai:tiny", "--base-url", url, "--envs", "2",
            "--no-progress", "--out", str(out), *extra_args]  # fmt: skip


@pytest.mark.slow
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
        seed1 = tmp_path / "seed1"  # another run of the design, for combine
        assert main(command(server.base_url, seed1, "--seed", "1")) == 0
    assert {p.name for p in run.iterdir()} >= {"results.json", "queries.md", "bars.png"}
    assert (run / "bars.png").read_bytes()[:4] == b"\x89PNG"
    assert results["design"] == TINY.name and results["section"] == "this test, Section 0"
    assert results["calls_planned"] == 2 * 2.5 * 2  # the design's own estimate
    # Made: the model queries as Agent 1 (work, note, final) and not as Agent 3 (work, final):
    # 3 per pair episode, 3 + 2 per trio episode, two episodes each.
    assert results["calls"] == 2 * 3 + 2 * 5 == asked
    assert results["seat_calls"]["openai:tiny"]["calls"] == 16
    assert results["seat_calls"]["openai:tiny"]["format_validity"] == 1.0
    assert results["seat_calls"]["openai:tiny"]["unreadable"] == 0
    assert isinstance(results["run"], str) and results["run"]
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
    from_python = experiments.merge(shard_dirs, tmp_path / "merged_py")  # the same from Python
    assert from_python.results["results"] == results["results"]
    assert from_python.out == tmp_path / "merged_py" and from_python.tables == {
        name: (tmp_path / "merged" / f"{name}.md").read_text() for name in from_python.tables
    }
    assert not (tmp_path / "s0" / "results.json").exists()  # a shard is analysed only merged

    capsys.readouterr()
    assert main(["experiment", "--list"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(TINY.name) and "10 calls" in line and "this test, Section 0" in line

    out = tmp_path / "combined"
    # The merged shards are this same run (one run key): combined with it, it would count twice.
    assert main(["experiment", "combine", TINY.name, str(run), str(tmp_path / "merged"),
                 "--out", str(out)]) == 2  # fmt: skip
    assert "hold the same run" in capsys.readouterr().err
    assert main(["experiment", "combine", TINY.name, str(run), str(seed1), "--out", str(out)]) == 0
    combined = json.loads((out / "results.json").read_text())
    assert combined["results"]["rows"] == [[0, 1.0], [1, 1.0]]
    assert (out / "by_seed.md").is_file()
    # Combining again into the combine's own folder is its rerun: allowed.
    assert main(["experiment", "combine", TINY.name, str(run), str(seed1), "--out", str(out)]) == 0

    capsys.readouterr()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "results.json").write_text("{not json")
    (tmp_path / "edited").mkdir()
    edited = {**results, "run": "edited", "results": {"query": {}}}  # by hand: no "pair" row
    (tmp_path / "edited" / "results.json").write_text(json.dumps(edited))
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "results.json").write_text('{"summary": {}}')
    x = str(tmp_path / "x")
    cases = [
        (["combine", TINY.name, str(tmp_path / "broken"), "--out", x], "broken/results.json"),
        (["combine", TINY.name, str(tmp_path / "foreign"), "--out", x], "not the results of"),
        (["combine", TINY.name, str(out), "--out", x], "combined from several runs"),
        (["combine", TINY.name, str(run), str(run), "--out", x], "is given twice"),
        (["combine", TINY.name, str(run), str(seed1), "--out", str(run)], "one of the runs"),
        (
            ["combine", TINY.name, str(run), str(seed1), "--out", str(tmp_path / "merged")],
            "holds the results of another command (`experiment merge`)",
        ),
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


def test_list_reads_the_catalogue_only(monkeypatch, capsys):
    """--list names every catalogued design with its calls, without building any design."""
    entries = {
        "moral_hazard/needy": catalogue.Entry("moral_hazard/needy", "S", "needs seats", 30060,
                                              "needs a model in every seat"),
        TINY.name: TINY_ENTRY,
    }  # fmt: skip
    monkeypatch.setattr(catalogue, "entries", lambda: entries)
    monkeypatch.setattr(registry, "designs", lambda: pytest.fail("--list built the designs"))
    assert main(["experiment", "--list"]) == 0
    needy_line, tiny_line = capsys.readouterr().out.strip().split("\n")
    # 30,060 calls at moral_hazard's 522 prompt tokens a call: 15,691,320 tokens.
    assert (
        "30,060 calls,     ~15.7M prompt tokens (needs a model in every seat)  S: needs "
        "seats" in needy_line
    )
    assert "10 calls" in tiny_line


def test_merge_checks_every_shard_file_first_and_a_refused_merge_leaves_out_unused(
    tmp_path, capsys
):
    """A steps file cut short and an option the command line would refuse are one-line errors
    naming the file; neither leaves --out looking used, so the corrected merge goes through."""
    with LocalChatServer(planted) as server:
        for i in (0, 1):
            assert main(command(server.base_url, tmp_path / f"s{i}", "--shard", f"{i}/2")) == 0
    shards = [str(tmp_path / "s0"), str(tmp_path / "s1")]
    out = tmp_path / "merged"
    steps = tmp_path / "s0" / "steps_1.npz"  # the trio part keeps its steps
    whole = steps.read_bytes()
    record = tmp_path / "s0" / "shard.json"
    kept = record.read_text()
    edited = json.loads(kept)
    edited["options"]["episodes"] = "x"
    damages = [
        (lambda: steps.write_bytes(whole[: len(whole) // 2]), "s0/steps_1.npz: not a readable"),
        (lambda: record.write_text(json.dumps(edited)), "recorded option --episodes: 'x'"),
    ]
    for damage, message in damages:
        damage()
        capsys.readouterr()
        assert main(["experiment", "merge", *shards, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("dilemmax experiment: error:") and "\n" not in err, err
        assert message in err, err
        assert not out.exists()  # nothing written: the corrected merge may use --out
        steps.write_bytes(whole)
        record.write_text(kept)
    out.mkdir()  # a folder the user made: kept, and left as it was
    edited["options"]["episodes"] = 2.5
    record.write_text(json.dumps(edited))
    assert main(["experiment", "merge", *shards, "--out", str(out)]) == 2
    assert "recorded option --episodes: '2.5'" in capsys.readouterr().err
    assert list(out.iterdir()) == []
    record.write_text(kept)
    assert main(["experiment", "merge", *shards, "--out", str(out)]) == 0
    merged = json.loads((out / "results.json").read_text())
    assert merged["results"]["episodes"] == [2, 2] and merged["calls"] == 16


def test_a_failed_analysis_of_a_merge_takes_back_what_the_merge_wrote(
    tmp_path, monkeypatch, capsys
):
    with LocalChatServer(planted) as server:
        for i in (0, 1):
            assert main(command(server.base_url, tmp_path / f"s{i}", "--shard", f"{i}/2")) == 0
    shards = [str(tmp_path / "s0"), str(tmp_path / "s1")]
    out = tmp_path / "merged"

    def broken(*args):
        raise RuntimeError("a bug in the analysis")

    from dataclasses import replace

    monkeypatch.setattr(registry, "designs", lambda: {TINY.name: replace(TINY, analyse=broken)})
    with pytest.raises(RuntimeError, match="a bug"):
        main(["experiment", "merge", *shards, "--out", str(out)])
    assert not out.exists()
    monkeypatch.setattr(registry, "designs", lambda: {TINY.name: TINY})
    assert main(["experiment", "merge", *shards, "--out", str(out)]) == 0
