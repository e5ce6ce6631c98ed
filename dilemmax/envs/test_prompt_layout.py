"""Prompts laid out for prefix caching (issue #45 item 6): on a short rendered episode of each
game (the grid games' trials of 32 steps), the "cached" layout reaches the shared-prefix goals
(same seat >= 0.75, across seats at one step >= 0.5) where the paper's order shares almost
nothing across seats; both layouts render the same states with the same stand-in replies
(:mod:`dilemmax.envs.text_sample`). The grid games' full seeds are measured by
benchmarks/llm_cost.py."""

from __future__ import annotations

import jax
import pytest

from dilemmax.envs.consequence.env import ConsequenceEnv
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.open_cleanup.env import OpenCleanupEnv
from dilemmax.envs.open_harvest.env import OpenHarvestEnv
from dilemmax.envs.text import Prompt
from dilemmax.envs.text_sample import Call, common_prefix, prefix_shares, render_calls

GAMES = {  # small sizes: one episode each; the grid games' two trials long enough that a
    # seat's trial events pass the first window of them (the "cached" layout's events line)
    "consequence": lambda: ConsequenceEnv(),
    "moral_hazard": lambda: MoralHazardEnv(2),
    "open_cleanup": lambda: OpenCleanupEnv(
        num_layouts=16, num_rules=64, trial_steps=32, num_trials=2
    ),  # fmt: skip
    "open_harvest": lambda: OpenHarvestEnv(
        num_layouts=8, num_rules=64, trial_steps=32, num_trials=2
    ),  # fmt: skip
}


def test_the_measure_on_hand_built_calls():
    assert common_prefix("abcdef", "abcxyz") == 3 and common_prefix("ab", "abc") == 2
    assert common_prefix("", "a") == 0 and common_prefix("same", "same") == 4
    calls = [
        Call("a", 0, "act", "RULES|A|t0", ""),
        Call("b", 0, "act", "RULES|B|t0", ""),  # shares "RULES|" (6 of 10) with a's
        Call("a", 1, "act", "RULES|A|t1x", ""),  # shares "RULES|A|t" (9 of 11) with its last
        Call("b", 1, "reflect", "RULES|B|r", ""),  # no cross-seat pair: a reflection
    ]
    shares = prefix_shares(calls)
    assert shares["same_seat"] == pytest.approx((9 / 11 + 8 / 9) / 2)
    assert shares["cross_seat"] == pytest.approx(6 / 10)
    assert Prompt("S", "U").system + Prompt("S", "U").user == "SU"


@pytest.mark.slow
@pytest.mark.parametrize("game", sorted(GAMES))
def test_cached_layout_reaches_the_shared_prefix_goals(game):
    env = GAMES[game]()
    layouts = {
        layout: {a: env.text_protocol(layout=layout) for a in env.agents}
        for layout in ("paper", "cached")
    }
    # Three replicates of one configuration, as the designs play them (a consequence game can
    # end after one round).
    config = jax.tree.map(lambda x: x[None], env.sample_config(jax.random.key(3)))
    calls = render_calls(env, layouts, episodes=3 if env.max_steps < 6 else 1, configs=config)
    assert len(calls["paper"]) == len(calls["cached"]) > 2 * env.num_agents
    cached_calls = calls["cached"]
    paper, cached = prefix_shares(calls["paper"]), prefix_shares(cached_calls)
    assert cached["same_seat"] >= 0.75, cached
    assert cached["cross_seat"] >= 0.5, cached
    # consequence: a seat's consecutive prompts already shared the rules and the round's
    # opening in the paper's order; the gain there is across seats
    assert cached["same_seat"] >= paper["same_seat"] - 0.01, (paper, cached)
    assert paper["cross_seat"] < 0.05  # the seat is named in the first line
    if game.startswith("open_"):  # the events line moved on once at least
        assert any("Earlier events this trial (from event 15 on): " in c.text for c in cached_calls)
