"""Shared pieces of the language-model tests."""

from __future__ import annotations


def moral_hazard_reply(body) -> str:
    """A planted moral_hazard model for the local server: agent 1 queries, the others answer
    locally with B; every note warns case 2 of C; every final choice is D."""
    text = body["messages"][-1]["content"]
    if "(work)" in text:
        return "ACTION QUERY" if "Agent 1 of" in text else "ACTION LOCAL B"
    if "(note)" in text:
        return "NOTE CASE 2 UNSAFE C"
    return "FINAL D"
