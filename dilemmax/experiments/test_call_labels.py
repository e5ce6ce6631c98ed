"""What ``play`` and ``experiment`` print cannot be misread: the env's invalid_actions (illegal
actions that reached the env) beside the model seat's unreadable replies (each played as the
game's fallback move, a legal one, which invalid_actions therefore never counts)."""

from __future__ import annotations

from dilemmax.llm.policy import CallStats
from dilemmax.llm.results import format_calls, format_summary, seat_stats, unreadable_replies


def test_invalid_actions_and_unreadable_replies_are_named_apart():
    # A consequence seat whose 4 replies were all unreadable: the env saw 4 legal zeros.
    summary = format_summary({"all": {"invalid_actions": (0.0, 0.0, 0.0)}})
    assert "invalid_actions (illegal actions reaching the env)" in summary
    stats = CallStats(calls=4, act_calls=4, valid=0, recovered=0)
    assert unreadable_replies(stats) == 4
    table = format_calls({"openai:m": stats})
    header, row = table.splitlines()[1:3]
    assert header.split()[5] == "unreadable" and row.split()[5] == "4"
    assert "fallback move (a legal one, so the env's invalid_actions does not count it)" in table


def test_seat_stats_adds_every_results_counts():
    class Result:
        def __init__(self, **stats):
            self.stats = stats

    one, two = CallStats(calls=2, act_calls=2, valid=1), CallStats(calls=3, act_calls=3, valid=3)
    merged = seat_stats([Result(a=one), Result(a=two, b=one)])
    assert merged["a"].calls == 5 and merged["a"].valid == 4 and merged["b"].calls == 2
