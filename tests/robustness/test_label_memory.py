"""Issue #35 probes of ``dilemmax redteam label``: a file that is not a transcript is refused in
one line (not reported as "no rationales"), and labelling's memory follows what is present: the
transcript is read line by line (what a prompt held is not kept) and the bootstrap draws in
bounded blocks, so its peak does not grow with resamples x games (it was a dense
[resamples, games] int64 array: 7.45 GiB for 100,000 games)."""

from __future__ import annotations

import json
import os
import tracemalloc

import numpy as np
import pytest
from test_cli_errors import _fails_cleanly

from dilemmax.cli import main
from dilemmax.redteam import rationale_labels as RL
from dilemmax.statistics import resampling


def _transcript(path, games: int, filler: int = 0):
    """One rationale per game (under RP, the game failed), each prompt ``filler`` characters."""
    with open(path, "w") as f:
        f.write(json.dumps({"type": "run", "run": "x"}) + "\n")
        for g in range(games):
            reply = "They will be eliminated instead of me.\nCONTRIBUTION: 0"
            row = {"type": "call", "kind": "act", "part": "rule=RP", "episode": g, "seat": "m",
                   "prompt": "x" * filler, "reply": reply}  # fmt: skip
            f.write(json.dumps(row) + "\n")
            f.write(json.dumps({"type": "episode", "id": f"rule=RP|e{g}", "metrics": {}}) + "\n")
    return path


@pytest.mark.parametrize(
    "content", [os.urandom(4096), b"", b"not json\n", b'{"type": "call"}\n', b'{"type": "run"}']
)
def test_a_file_that_is_not_a_transcript_is_refused(tmp_path, capsys, content):
    path = tmp_path / "transcript.jsonl"
    path.write_bytes(content)
    err = _fails_cleanly(capsys, ["redteam", "label", str(path), "--out", str(tmp_path / "o")])
    assert "is not a dilemmax transcript" in err and "no rationales" not in err


def test_a_transcript_without_rationales_still_says_so(tmp_path, capsys):
    path = tmp_path / "transcript.jsonl"
    path.write_text(json.dumps({"type": "run"}) + "\n")
    assert main(["redteam", "label", str(path), "--out", str(tmp_path / "o")]) == 0
    assert "no rationales in these transcripts" in capsys.readouterr().out


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_reading_keeps_the_rationales_not_the_file(tmp_path):
    """A 6 MB transcript whose prompts are long: what is kept is the traces, a small part."""
    path = _transcript(tmp_path / "transcript.jsonl", 600, filler=10_000)
    size = path.stat().st_size
    traces = []
    peak = _peak(lambda: traces.extend(RL.read_traces(path)))
    assert len(traces) == 600 and all(t.rule == "RP" and t.failed is None for t in traces)
    assert peak < size / 4, (peak, size)


def test_the_bootstrap_peak_does_not_grow_with_resamples_times_games(monkeypatch):
    """With a block of 2^15 draws, 2,000 resamples of 3,000 games (48 MB as one dense array of
    draws) peak at what 100 resamples do; the result is that of the dense draws."""
    monkeypatch.setattr(resampling, "BOOTSTRAP_BLOCK", 1 << 15)  # where the bootstrap reads it
    games = [f"g{i % 3000}" for i in range(6000)]
    labelled = np.random.default_rng(0).random((6000, 5)) < 0.3

    def run(resamples):
        return lambda: RL.share_rows(labelled, games, np.random.default_rng(1), resamples)

    few, many = _peak(run(100)), _peak(run(2000))
    assert many < 1.5 * few and many < 2000 * 3000 * 8 / 8, (few, many)
    got = RL.share_rows(labelled[:, :1], games, np.random.default_rng(1), 300)[0]
    names, index = np.unique(games, return_inverse=True)
    hits = np.bincount(index, weights=labelled[:, 0])
    sizes = np.bincount(index).astype(float)
    picks = np.random.default_rng(1).integers(0, 3000, size=(300, 3000))  # the dense draws
    low, high = np.quantile(hits[picks].sum(1) / sizes[picks].sum(1), [0.025, 0.975])
    assert (got["low"], got["high"]) == pytest.approx((low, high), abs=1e-12)
    assert got["games"] == 3000 and got["traces"] == 6000


def test_groupings_of_the_very_same_traces_share_one_bootstrap(tmp_path, monkeypatch):
    """One population and one arm: the rule, population / rule and arm / rule groups are the
    same traces, drawn once (the 100,000-game transcript paid for each grouping)."""
    traces = RL.read_traces(_transcript(tmp_path / "transcript.jsonl", 40))
    calls = []
    share_rows = RL.share_rows
    monkeypatch.setattr(RL, "share_rows", lambda *a: calls.append(1) or share_rows(*a))
    shares = RL.rationale_report(traces, 0, 200)["shares"]
    assert (
        shares["rule"]["RP"] == shares["population/rule"]["m/RP"] == shares["arm/rule"]["main/RP"]
    )
    assert shares["population"]["m"] == shares["rule"]["RP"]
    assert len(calls) == 1  # every grouping holds these 40 traces whole (all in round 0)
