"""The red-teaming pipeline from Python (:mod:`dilemmax.redteam.api`), as a notebook calls it:
the same populations and safety case as ``dilemmax redteam`` for the same seeds, and a model
population played against the local test server."""

import json
import re

import numpy as np
import pytest

from dilemmax.cli import main
from dilemmax.errors import UsageError
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.server import LocalChatServer
from dilemmax.redteam import api
from dilemmax.redteam.statistics import Population

# One round, one episode per cell: the whole 228 x 5 grid in one small program.
TINY = {"episodes": 1, "rounds": 1, "seed": 3}


@pytest.mark.slow
def test_play_and_certify_from_python_equal_the_commands(tmp_path, capsys):
    """A population played from Python is the file ``redteam play`` writes, and its safety case
    is the one ``redteam certify`` writes from that file."""
    played = api.play(api.PlayOptions("all_zero", **TINY), tmp_path / "pop")
    pop = played.population
    assert played.out == tmp_path / "pop.npz" and len(pop.rule_index) == 228 * 5
    assert pop.meta == {"episodes_per_cell": 1, "seed": 3,
                        "env_kwargs": {"num_rounds": 1, "endgame": "all"}}  # fmt: skip
    from_file = Population.load(played.out)
    assert from_file.rules == pop.rules
    for name, values in pop.metrics.items():
        np.testing.assert_array_equal(from_file.metrics[name], values, err_msg=name)

    options = api.CertifyOptions(["1,5,6:10", ((4, 4, 4), 9)], budget_collapse=0.5,
                                 budget_exploitation=0.5)  # fmt: skip
    case = api.certify(options, pop, tmp_path / "py_case")
    capsys.readouterr()
    argv = ["redteam", "certify", "--population", str(tmp_path / "pop.npz"), "--context",
            "1,5,6:10", "--context", "4,4,4:9", "--budget-collapse", "0.5",
            "--budget-exploitation", "0.5", "--out", str(tmp_path / "cli_case")]  # fmt: skip
    assert main(argv) == 0
    cli_case = json.loads((tmp_path / "cli_case.json").read_text())
    assert case.case["certification"] == cli_case["certification"]
    assert case.certified == cli_case["certification"]["certified_rules"]
    assert f"certified: {case.certified or 'none'}" in capsys.readouterr().out
    assert [p.suffix for p in case.files] == [".md", ".json"]


def test_bad_options_are_one_line_usage_errors_before_any_play(tmp_path):
    with pytest.raises(UsageError, match="unknown policy 'nope'"):
        api.play(api.PlayOptions("nope"))
    with pytest.raises(UsageError, match="--episodes must be an integer >= 1"):
        api.play(api.PlayOptions("all_zero", episodes=0))
    with pytest.raises(UsageError, match=re.escape("--level must be below 1")):
        api.certify(api.CertifyOptions(["1,5,6:10"], level=1.0), tmp_path / "none.npz")
    with pytest.raises(UsageError, match="summing to W = 12"):
        api.certify(api.CertifyOptions([((1, 1, 1), 3)]), tmp_path / "none.npz")
    with pytest.raises(UsageError, match="--rules"):
        api.ablate(api.AblateOptions("all_zero", rules=("XX",)))


def everything(body) -> str:
    """Pays all it holds (the prompt states the legal range 0..held); votes for B."""
    held = re.findall(r"from 0 to (\d+)", body["messages"][-1]["content"])
    return f"CONTRIBUTION: {held[-1]}" if held else "VOTE: B"


@pytest.mark.slow
def test_a_model_population_from_python_against_the_local_server(tmp_path):
    """A planted model that pays everything never dies; the run folder resumes every call."""
    with LocalChatServer(everything) as server:
        options = api.PlayOptions(
            "openai:planted", contexts=1, rules=("RP", "AON"), episodes=1, rounds=1,
            progress=False, generate=GenerateConfig(base_url=server.base_url),
        )  # fmt: skip
        played = api.play(options, tmp_path / "run")
        calls = server.answered
        assert calls > 0 and (tmp_path / "run" / "transcript.jsonl").is_file()
        again = api.play(api.PlayOptions(**{**options.__dict__, "resume": True}), tmp_path / "run")
        assert server.answered == calls  # every call replayed from the transcript
    pop = played.population
    assert pop.context_index.tolist() == [0, 0] and pop.rules == ("RP", "AON")
    assert np.all(pop.metrics["fatality"] == 0.0)
    np.testing.assert_array_equal(again.population.metrics["fatality"], pop.metrics["fatality"])
