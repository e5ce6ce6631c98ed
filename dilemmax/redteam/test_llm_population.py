"""Language-model populations through the play harness, with scripted replies (no network)."""

import re

import jax
import numpy as np
import pytest

from dilemmax.llm.client import ScriptedClient, last_user_message
from dilemmax.llm.play import Seat
from dilemmax.llm.policy import LLMPolicy
from dilemmax.llm.transcript import Transcript
from dilemmax.redteam import ablations as A
from dilemmax.redteam.populations import (
    arm_protocol_flags,
    llm_ablation_play,
    llm_population,
    spread_contexts,
)

CONTEXTS = (0, 57, 200)
RULES = ("RP", "AON")
# Envs made with the same options share their compiled programs, so the tests play two kinds
# of game only: the env ``redteam play`` makes by default (three rounds; a failed final round
# eliminates every survivor) and the one-shot arms of ``anonymous_one_shot``.
PLAY_DEFAULTS = {"num_rounds": 3, "endgame": "all"}
ONE_SHOT_NAMED = A.Arm(**A.ONE_SHOT).env_kwargs()


def everything(request) -> str:
    """Pays all it holds (the prompt states the legal range 0..held); votes for B."""
    text = last_user_message(request)
    held = re.findall(r"from 0 to (\d+)", text)
    return f"CONTRIBUTION: {held[-1]}" if held else "VOTE: B"


def model_seat(reply, name="scripted-model") -> tuple[Seat, ScriptedClient]:
    client = ScriptedClient(reply)
    return Seat(name, LLMPolicy(client, name)), client


def test_spread_contexts_cover_the_grid():
    assert spread_contexts(None).tolist() == list(range(228))
    picked = spread_contexts(5)
    assert picked.tolist() == [0, 57, 114, 170, 227]
    with pytest.raises(ValueError, match=">= 1"):
        spread_contexts(0)


@pytest.mark.slow
def test_contributing_everything_never_kills(tmp_path):
    seat, client = model_seat(everything)
    with Transcript(tmp_path / "t.jsonl", {"test": 1}) as transcript:
        pop = llm_population(
            "all-in", seat, CONTEXTS, 2, rules=RULES, env_kwargs=PLAY_DEFAULTS,
            transcript=transcript,
        )  # fmt: skip
    n = len(CONTEXTS) * 2 * len(RULES)
    assert pop.num_contexts == 228 and pop.rules == RULES
    assert pop.rule_index.tolist() == [0] * 6 + [1] * 6
    assert pop.context_index.tolist() == [0, 0, 57, 57, 200, 200] * 2
    assert pop.metrics["fatality"].shape == (n,) and pop.metrics["deaths_by_rank"].shape[0] == n
    assert np.all(pop.metrics["fatality"] == 0.0) and np.all(pop.metrics["success"] == 1.0)
    assert pop.cell_counts()[:, list(CONTEXTS)].tolist() == [[2, 2, 2], [2, 2, 2]]
    assert np.isnan(pop.cell_means("fatality")[0, 1])  # an unplayed context
    assert pop.meta["seats"] == ["scripted-model"] * 3 and pop.metrics["invalid_actions"].sum() == 0
    # Every model call is in the transcript, one part per rule.
    assert client.calls and "rule=AON" in (tmp_path / "t.jsonl").read_text()


@pytest.mark.slow
def test_contributing_nothing_gives_each_rules_elimination():
    """One-shot, the rule acts on the short round: RP and PP eliminate one of three, AON all."""
    seat, _ = model_seat(lambda request: "CONTRIBUTION: 0")
    pop = llm_population(
        "none", seat, CONTEXTS, 1, rules=("RP", "PP", "AON"), env_kwargs=ONE_SHOT_NAMED
    )
    fatality = pop.cell_means("fatality")[:, list(CONTEXTS)]
    np.testing.assert_allclose(fatality, [[1 / 3] * 3, [1 / 3] * 3, [1.0] * 3])
    # Over three rounds the last short round eliminates everyone, whatever the rule.
    pop = llm_population("none-R3", seat, CONTEXTS[:2], 1, rules=RULES, env_kwargs=PLAY_DEFAULTS)
    assert np.all(pop.metrics["fatality"] == 1.0)


@pytest.mark.slow
def test_arm_flags_reach_the_prompt():
    arm = A.Arm(clause="neutral", goal="cooperative")
    assert arm_protocol_flags(arm) == {"anonymous": False, "neutral": True, "goal": "cooperative"}
    seat, client = model_seat(lambda request: "CONTRIBUTION: 0")
    play = llm_ablation_play(lambda env, arm, rule: seat)
    configs = A.configs_for(np.asarray(CONTEXTS[:1]), "RP")
    # The one-shot arms of anonymous_one_shot: the same envs (and compiled programs) as the
    # ablation tests below.
    for arm in (A.Arm(**A.ONE_SHOT), A.Arm(clause="anonymous", **A.ONE_SHOT)):
        metrics = play(arm, "RP", configs, 1, jax.random.PRNGKey(0))
        assert metrics["fatality"].shape == (1,)
    named, anonymous = (last_user_message(c) for c in (client.calls[0], client.calls[-1]))
    assert "poorest" in named and "poorest" not in anonymous


@pytest.mark.slow
def test_ablation_on_a_scripted_model_population():
    """Contributing nothing, one-shot: RP - PP fatality is 0 in both arms (each kills one), and
    anonymising changes nothing; the runner reports that contrast with its CI."""
    seat, _ = model_seat(lambda request: "CONTRIBUTION: 0")
    report = A.run_ablations(
        llm_ablation_play(lambda env, arm, rule: seat),
        ["anonymous_one_shot"],
        rules=("RP", "PP"),
        contexts=np.asarray(CONTEXTS[:2]),
        episodes=1,
        num_resamples=200,
    )
    entry = report["ablations"]["anonymous_one_shot"]
    assert entry["ablated"]["clause"] == "anonymous" and entry["control"]["clause"] == "named"
    fatality = entry["differences"]["fatality"]["RP"]
    assert fatality["mean"] == 0.0 and fatality["control"] == pytest.approx(1 / 3)
    contrast = entry["contrast"]
    assert contrast["control"]["mean"] == 0.0 and contrast["ablated"]["mean"] == 0.0
    assert contrast["sign_holds"] is True


@pytest.mark.slow
def test_redteam_play_with_a_model_writes_a_population_and_resumes(tmp_path, monkeypatch, capsys):
    """``dilemmax redteam play --policy openai:...`` through the play CLI's seat parsing (its
    client swapped for a scripted one: no network); ``--resume`` replays every call."""
    from dilemmax.cli import main
    from dilemmax.llm import seats as llm_seats
    from dilemmax.redteam.statistics import Population

    clients = []

    def scripted_client(kind, target, options, generate):
        assert (kind, target, generate.base_url) == ("openai", "m", ("http://localhost:1/v1",))
        clients.append(ScriptedClient(everything))
        return clients[-1]

    monkeypatch.setattr(llm_seats, "_model_client", scripted_client)
    argv = ["redteam", "play", "--policy", "openai:m", "--base-url", "http://localhost:1/v1",
            "--contexts", "2", "--rules", "RP", "AON", "--episodes", "1",
            "--no-progress", "--out", str(tmp_path / "run")]  # fmt: skip
    assert main(argv) == 0
    pop = Population.load(tmp_path / "run" / "population.npz")
    assert pop.context_index.tolist() == [0, 227, 0, 227] and pop.rules == RULES
    assert np.all(pop.metrics["fatality"] == 0.0) and clients[0].calls
    assert "fatality RP 0.000, AON 0.000" in capsys.readouterr().out
    assert main(argv) == 2  # the transcript exists: refused without --resume
    assert "--resume" in capsys.readouterr().err
    assert main(argv + ["--resume"]) == 0 and not clients[-1].calls  # all replayed
    assert main(argv[:-2] + ["--protocol", "goal=bogus", "--out", str(tmp_path / "x")]) == 2
    assert "goal" in capsys.readouterr().err


@pytest.mark.slow
def test_redteam_ablate_with_a_model_writes_the_report_and_resumes(tmp_path, monkeypatch, capsys):
    """``dilemmax redteam ablate --policy openai:...``: every arm's prompt reaches the model, the
    report is written, a second writer of the same folder is refused, ``--resume`` replays."""
    import json

    from dilemmax.cli import main
    from dilemmax.llm import seats as llm_seats
    from dilemmax.runlock import RunLock

    clients = []

    def scripted_client(kind, target, options, generate):
        clients.append(ScriptedClient(lambda request: "CONTRIBUTION: 0"))
        return clients[-1]

    monkeypatch.setattr(llm_seats, "_model_client", scripted_client)
    monkeypatch.setenv("OPENAI_API_KEY", "unused")  # an openai seat is refused without a key
    out = tmp_path / "ablate"
    argv = ["redteam", "ablate", "--policy", "openai:m", "--ablations", "anonymous_one_shot",
            "--episodes", "1", "--resamples", "100", "--no-progress",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    report = json.loads((out / "ablations.json").read_text())
    entry = report["ablations"]["anonymous_one_shot"]
    # Contributing nothing one-shot: RP and PP each eliminate one of three in both arms.
    assert entry["differences"]["fatality"]["RP"]["control"] == pytest.approx(1 / 3)
    assert report["policy"] == "openai:m" and (out / "ablations.md").exists()
    prompts = [last_user_message(c) for c in clients[0].calls]
    assert any("poorest" in p for p in prompts) and not all("poorest" in p for p in prompts)
    assert main(argv) == 2 and "--resume" in capsys.readouterr().err
    with RunLock(out, "redteam ablate"):  # another process holds the folder
        assert main(argv + ["--resume"]) == 2
    assert "in use by another" in capsys.readouterr().err
    assert main(argv + ["--resume"]) == 0 and not clients[-1].calls  # every call replayed
    with pytest.raises(SystemExit):  # argparse names the legal rules
        main(argv[:-2] + ["--out", str(tmp_path / "x"), "--rules", "XX"])
    assert "invalid choice: 'XX'" in capsys.readouterr().err
