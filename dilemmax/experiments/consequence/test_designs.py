"""consequence/grid and consequence/ablations: plans; the grid end to end through ``dilemmax
experiment`` against a planted model on a local server; the ablations' analysis of parts played
by a planted model through the batched harness (each part as the session plays it: its protocol
options, its name as the transcript part, the run's key)."""

import dataclasses
import itertools
import json

import jax
import numpy as np
import pytest

from dilemmax.cli import main
from dilemmax.envs.consequence.generator import context_table
from dilemmax.errors import UsageError
from dilemmax.experiments.cli import parse_design_argv
from dilemmax.experiments.consequence import DESIGNS, ablations, grid
from dilemmax.llm.client import ScriptedClient, last_user_message
from dilemmax.llm.play import BatchedPlay, Seat
from dilemmax.llm.policy import LLMPolicy
from dilemmax.llm.server import LocalChatServer
from dilemmax.llm.transcript import Transcript
from dilemmax.redteam import paper_tables
from dilemmax.redteam.reference import EPSILONS, ReferenceTable, save_reference

EXPLOIT = "By paying nothing I keep my units and someone is eliminated instead of me."
INFER = "A participant was removed, so the rule seems to remove the one holding the fewest units."


def args_for(design, argv):
    """(params, run options) of ``dilemmax experiment <design> <argv>``."""
    return parse_design_argv(design, argv)


def play(plan, reply, out):
    """Every part through BatchedPlay with the model in every seat; the transcript in out."""
    seat = Seat("planted", LLMPolicy(ScriptedClient(reply), "planted"))
    results = []
    with Transcript(out / "transcript.jsonl", {"test": str(out)}) as transcript:
        for part in plan.parts:
            protocol = part.env.text_protocol(**part.protocol_options)
            runner = BatchedPlay(part.env, [seat] * 3, protocol, 8, transcript=transcript)
            key = jax.random.key(0)
            results.append(runner.run(key, part.episodes, part.configs, part.name))
    return results


def held(text: str) -> int:
    return int(text.rsplit("from 0 to ", 1)[1].split(">", 1)[0])


def header(markdown: str) -> list[str]:
    line = next(line for line in markdown.splitlines() if line.startswith("|"))
    return [c.strip() for c in line.strip("|").split("|")]


@pytest.fixture(scope="module")
def reference_file(tmp_path_factory):
    """UR_ref = 0.1 in every cell of the 228-context grid (a hand-built reference)."""
    resources, thresholds = context_table(12, 3)
    ur = np.full((len(EPSILONS), 5, len(thresholds)), 0.1)
    table = ReferenceTable(EPSILONS, ("AON", "RE", "DV", "RP", "PP"), resources, thresholds, 3,
                           {"fatality": ur}, {"RP": 0})  # fmt: skip
    path = tmp_path_factory.mktemp("ref") / "ref.npz"
    save_reference(table, path)
    return str(path)


def test_designs_are_exported_with_the_paper_sizes():
    assert [d.name for d in DESIGNS] == ["consequence/grid", "consequence/ablations"]
    full = grid.plan(*args_for(grid.DESIGN, []))
    assert [p.name for p in full.parts] == [f"rule={r}" for r in ("AON", "RE", "DV", "RP", "PP")]
    assert all(p.episodes == 4 and len(p.config_names) == 228 for p in full.parts)
    assert full.parts[0].config_names[0] == "w=(0,0,12) T=1"
    assert full.calls == 228 * 4 * (9 + 6 + 11 + 6 + 6)
    suite = ablations.plan(*args_for(ablations.DESIGN, []))
    assert len(suite.parts) == 7 * 2 and len(suite.context["contexts"]) == 17
    assert suite.parts[0].name == "R=1,anonymous,competitive,rule/rule=RP"
    assert suite.parts[0].protocol_options["anonymous"] is True
    assert suite.parts[0].env.num_rounds == 1 and suite.parts[0].env.endgame == "rule"
    for argv in (["--rules", "XX"], ["--replicates", "0"], ["--contexts", "0"]):
        with pytest.raises(UsageError):
            grid.plan(*args_for(grid.DESIGN, argv))
    with pytest.raises(UsageError, match="--ablations"):
        ablations.plan(*args_for(ablations.DESIGN, ["--ablations", "nope"]))


class RPExploiter:
    """Under RP pays nothing and writes EXPLOIT in exactly 3 of 5 rationales; under every
    other rule pays all it holds (the group always succeeds in round one). A server's reply."""

    def __init__(self):
        self.rp = itertools.count()

    def __call__(self, body):
        text = body["messages"][-1]["content"]
        if "the poorest participant" in text:
            words = EXPLOIT if next(self.rp) % 5 < 3 else "I keep my units."
            return f"{words}\nCONTRIBUTION: 0"
        return f"Paying everything fills the fund.\nCONTRIBUTION: {held(text)}"


@pytest.mark.slow
def test_grid_recovers_the_planted_exploiter(tmp_path, reference_file):
    """End to end: ``dilemmax experiment consequence/grid`` against a local server."""
    out = tmp_path / "run"
    with LocalChatServer(RPExploiter()) as server:
        argv = ["experiment", "consequence/grid", "--seats", "openai:planted", "--base-url",
                server.base_url, "--contexts", "5", "--replicates", "1", "--rules", "AON", "RP",
                "PP", "--reference", reference_file, "--resamples", "200", "--out", str(out),
                "--no-progress"]  # fmt: skip
        assert main(argv) == 0
        assert server.answered == 5 * (3 + 6 + 3)  # AON and PP succeed at once; RP: 3 + 2 + 1
    run = json.loads((out / "results.json").read_text())
    results = run["results"]
    gap = results["gap"]["populations"]["openai:planted"]
    assert gap["outcomes"]["fatality"]["RP"]["mean"] == 1.0
    assert gap["outcomes"]["fatality"]["AON"]["mean"] == 0.0
    assert gap["outcomes"]["fatality"]["PP"]["mean"] == 0.0
    assert gap["iag"]["0.1"]["RP"]["mean"] == pytest.approx(0.9)
    table2 = (out / "table2.md").read_text()
    assert header(table2) == ["Population", "AON", "RP", "PP"]  # the rules played, paper order
    assert "| openai:planted | -10 [-10, -10] | +90 [+90, +90] | -10 [-10, -10] |" in table2
    table3 = (out / "table3.md").read_text()
    assert header(table3) == ["Population", "Outcome", "AON", "RP", "PP"]
    assert "| openai:planted | survivors | 3.00 [3.00, 3.00] | 0.00 [0.00, 0.00] |" in table3
    shares = results["rationales"]["shares"]["rule"]
    assert shares["RP"]["exploitative"]["share"] == pytest.approx(0.6)  # 18 of 30
    assert shares["AON"]["exploitative"]["share"] == 0.0 == shares["PP"]["exploitative"]["share"]
    assert (out / "rationales" / "traces.csv").is_file()
    assert (out / "rationale_labels.md").is_file()
    for name in ("fatality", "iag", "stakes_fatality"):
        assert (out / f"{name}.png").stat().st_size > 0
    combined = grid.combine([run, run])
    assert header(combined.tables["table2"])[0] == "Population"
    assert "population_x_rule" in combined.results


class NamedTargeter:
    """Pays nothing when the rule names its bearer; anonymous and one-shot it pays all; anonymous
    and repeated it pays nothing in round one, then writes INFER and pays all."""

    def __call__(self, request):
        text = last_user_message(request)
        if "poorest participant" in text or "richest participant" in text:
            return "I keep my units.\nCONTRIBUTION: 0"
        if "at most 1 round." in text or "It is round 1 of" not in text:
            note = INFER if " was eliminated after round" in text else "I pay all."
            return f"{note}\nCONTRIBUTION: {held(text)}"
        return "I keep my units.\nCONTRIBUTION: 0"


@pytest.mark.slow
def test_ablations_table4_and_rule_inference(tmp_path):
    params, run = args_for(ablations.DESIGN, ["--contexts", "2", "--replicates", "1", "--ablations",
                                       "anonymous_one_shot", "anonymous_repeated",
                                       "--resamples", "200"])  # fmt: skip
    plan = ablations.plan(params, run)
    assert len(plan.parts) == 4 * 2
    results = play(plan, NamedTargeter(), tmp_path)
    report = ablations.analyse(plan, results, params, dataclasses.replace(run, out=tmp_path), {})
    table4 = report.tables["table4"]
    assert header(table4) == list(paper_tables.TABLE4_HEADER)
    one_shot = next(line for line in table4.splitlines() if "one-shot" in line)
    assert "| RP | targeted elimination | 1.00 | 0.00 | -1.00 [-1.00, -1.00] |" in one_shot
    assert one_shot.endswith("| +0.00 [+0.00, +0.00] | +0.00 [+0.00, +0.00] | yes |")
    inference = report.results["rationales"]["rule_inference_after_first_elimination"]["arm/rule"]
    anonymous = inference["R=3,anonymous,competitive,all/RP"]
    assert anonymous["traces"] > 0 and anonymous["share"] == 1.0
    assert inference["R=3,named,competitive,all/RP"]["share"] == 0.0
    draw = report.figures["table4"]
    draw(tmp_path / "table4.png")
    assert (tmp_path / "table4.png").stat().st_size > 0
