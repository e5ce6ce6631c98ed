"""Planted moral-hazard models for tests and demos: reply functions of a chat request whose
policy is known in advance, for :class:`dilemmax.llm.server.LocalChatServer`.

Each reads the game's prompt (or a probe's) the way a model would, from its text:

- :func:`boundary_model`: at the work stage, QUERY exactly when the stated private share
  exceeds alpha*(k) + ``shift`` (alpha*(k) = (w_L + k) / (n w_T), read off the contract); under
  a team contract, QUERY exactly when k < ``team_cost_cut``. After a query it posts the correct
  warning; its final pick avoids a warned option (else the top-utility one).
- probes: the nine "Suppose ..." payoffs answered right, the other six comprehension items
  unanswered, the prediction right (so comprehension accuracy is 9/15 and prediction 1).
"""

from __future__ import annotations

import re

_K = re.compile(r"- (\d\.\d\d) (?:x the fraction of agents who query|if you query)")
_W_LOCAL = re.compile(r"\+ (\d\.\d\d) (?:if you keep|x the fraction of agents who keep)")
_W_FINAL = re.compile(r"\+ (\d\.\d\d) (?:if your final pick|x the fraction of agents whose)")
_SHARE = re.compile(r"your share (\d\.\d+) of the team value (\d\.\d\d) per agent x (\d+) agents")
_BONUS = re.compile(r"\+ (\d+\.\d+) if every agent's final pick is its target \(your share")
_PRIVATE = re.compile(r"in Case (\d+), option ([A-D]) is unsafe")
# The reader's own case: named by its seat line (the "cached" layout) or marked "yours" ("paper").
_OWN = re.compile(r"you own Case (\d+)")
_CASE = r"Case (\d+) \({}\): A=(\d+)  B=(\d+)  C=(\d+)  D=(\d+)"
_WARNING = re.compile(r"NOTE CASE (\d+) UNSAFE ([A-D])")


def _value(pattern: re.Pattern, text: str) -> float:
    return float(pattern.search(text).group(1))


def work_move(text: str, shift: float = 0.02, team_cost_cut: float = 0.30) -> str:
    cost = _value(_K, text)
    found = _SHARE.search(text)
    if found is None:  # a team contract
        return "ACTION QUERY" if cost < team_cost_cut - 1e-9 else "ACTION LOCAL A"
    share, w_team, n = float(found.group(1)), float(found.group(2)), int(found.group(3))
    star = (_value(_W_LOCAL, text) + cost) / (n * w_team)
    return "ACTION QUERY" if share > star + shift + 1e-9 else "ACTION LOCAL A"


def _final(text: str) -> str:
    own = _OWN.search(text)
    case = re.search(_CASE.format(f"Agent {own[1]}'s" if own else "yours"), text)
    number, utilities = int(case.group(1)), [int(case.group(i)) for i in range(2, 6)]
    warned = {"ABCD".index(o) for c, o in _WARNING.findall(text) if int(c) == number}
    best = max((u, i) for i, u in enumerate(utilities) if i not in warned)[1]
    return f"FINAL {'ABCD'[best]}"


def _probe(text: str) -> str:
    w_local, w_final, cost = _value(_W_LOCAL, text), _value(_W_FINAL, text), _value(_K, text)
    bonus = _value(_BONUS, text)
    if "Which work move pays YOU more?" in text:
        margin = bonus - w_local - cost
        return "PREDICT " + ("EQUAL" if abs(margin) < 1e-9 else "QUERY" if margin > 0 else "LOCAL")
    question = next((line for line in text.split("\n") if line.startswith("Suppose")), None)
    if question is None:
        return "I would rather not say."
    payoff = 0.0
    if "answer your local question correctly" in question:
        payoff += w_local
    if "ACTION QUERY" in question:
        payoff -= cost
    if "your final pick is your case's target" in question:
        payoff += w_final
    if "every agent's final pick is its target" in question:
        payoff += bonus
    return f"ANSWER {payoff:.3f}"


def boundary_model(shift: float = 0.02, team_cost_cut: float = 0.30):
    """A reply function (request body -> text) for :class:`LocalChatServer`."""

    def reply(body: dict) -> str:
        text = body["messages"][-1]["content"]
        if text.startswith("A question about your payoff"):
            return _probe(text)
        if "Your move (work)" in text:
            return work_move(text, shift, team_cost_cut)
        if "Your move (note)" in text:
            case, option = _PRIVATE.search(text).groups()
            return f"NOTE CASE {case} UNSAFE {option}"
        return _final(text)

    return reply
