"""The paper's explore share, read totally from what agents reported."""

from __future__ import annotations

import pytest

from dilemmax.envs.open_cleanup.metrics import reported_explore_share


def test_share_of_reported_steps_per_trial():
    modes = ["explore", " Explore ", "exploit", "EXPLOIT", "explore", None, 3, "wander", "exploit"]
    trials = [0, 0, 0, 0, 1, 1, 1, 1, 1]
    out = reported_explore_share(modes, trials, num_trials=3)
    assert out["explore_share"] == pytest.approx([0.5, 0.5, 0.0])
    assert out["reported"] == [4, 2, 0]
    assert out["unreported"] == [0, 3, 0]


def test_bad_trials_are_skipped_and_nothing_raises():
    modes = ["explore"] * 5 + [object()]
    trials = [-1, 5, "0", True, 0.0, 0]
    out = reported_explore_share(modes, trials, num_trials=2)
    assert out == {"explore_share": [0.0, 0.0], "reported": [0, 0], "unreported": [1, 0]}
    assert reported_explore_share([], [])["reported"] == [0] * 5
