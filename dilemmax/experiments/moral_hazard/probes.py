"""The isolation design's probes: payoff comprehension and private-action prediction.

Asked of the focal seat's model directly (outside the game), once per item, in the same system
prompt the focal seat plays under; every reply is scored exactly against the private-payoff
rules U_i = w_L L_i + w_F F_i + n alpha_i w_T T - k Q_i of the cell's contract.

Per payoff cell (k, alpha_i):
- 15 payoff-comprehension items (the paper's count per cell), each a number to three decimals:
  the payoff of the nine possible outcomes (work move LOCAL right / LOCAL wrong / QUERY x final
  pick on target with team success, on target without, off target), the team-success bonus
  n alpha_i w_T, the margin m_i of Eq. 4, the indifference share alpha*(k), the payoff of QUERY
  minus LOCAL when the team fails either way (-(w_L + k)), and the largest and smallest payoff
  the contract can pay. Reply ``ANSWER <number>``; correct when within 0.0005 of the truth.
- 1 private-action prediction: with the scripted partners (query -> team success, LOCAL -> no
  team success, own final on target either way), which work move pays the focal agent more?
  Reply ``PREDICT QUERY``, ``PREDICT LOCAL`` or ``PREDICT EQUAL``; the truth is the sign of m_i.

Replies are parsed totally and in linear time (:func:`parse_number`, :func:`parse_prediction`).
Each answered item is appended to ``probes.jsonl`` in the run folder as it returns, so a resumed
run asks only the items it has no row for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dilemmax.envs import text_parsing as tp
from dilemmax.envs.text import Prompt
from dilemmax.llm.transcript import read_lines

PROBE_FILE = "probes.jsonl"
TOLERANCE = 0.0005 + 1e-9  # answers are asked to three decimals
PREDICTIONS = ("QUERY", "LOCAL", "EQUAL")
_NUMBER = re.compile(r"ANSWER[^0-9+\-\n]{0,20}([+-]?\d{1,6}(?:\.\d{1,6})?)")  # bounded: linear
_PREDICT = re.compile(r"PREDICT\W{0,20}(QUERY|LOCAL|EQUAL)")

# The nine outcomes: (work move, final on target, team success) -> (L_i, Q_i, F_i, T).
_OUTCOMES = {
    "local_right_target_team": (1, 0, 1, 1),
    "local_right_target_no_team": (1, 0, 1, 0),
    "local_right_miss": (1, 0, 0, 0),
    "local_wrong_target_team": (0, 0, 1, 1),
    "local_wrong_target_no_team": (0, 0, 1, 0),
    "local_wrong_miss": (0, 0, 0, 0),
    "query_target_team": (0, 1, 1, 1),
    "query_target_no_team": (0, 1, 1, 0),
    "query_miss": (0, 1, 0, 0),
}
_WORK_TEXT = {
    "local_right": "you choose ACTION LOCAL and answer your local question correctly",
    "local_wrong": "you choose ACTION LOCAL and answer your local question wrongly",
    "query": "you choose ACTION QUERY",
}


@dataclass(frozen=True)
class Contract:
    """One payoff cell's private contract (what the focal agent's prompt states)."""

    num_agents: int
    cost: float  # k
    share: float  # alpha_i
    w_local: float = 0.35
    w_final: float = 0.15
    w_team: float = 0.50

    @property
    def bonus(self) -> float:
        return self.num_agents * self.share * self.w_team

    @property
    def margin(self) -> float:
        return self.bonus - self.w_local - self.cost

    def payoff(self, local: int, query: int, final: int, team: int) -> float:
        return self.w_local * local + self.w_final * final + self.bonus * team - self.cost * query

    def text(self) -> str:
        return "\n".join(
            [
                f"Your payoff contract in a game of {self.num_agents} agents (paid to you alone):",
                f"  + {self.w_local:.2f} if you keep your local opportunity and answer it "
                "correctly",
                f"  + {self.w_final:.2f} if your final pick is your case's target",
                f"  + {self.bonus:.3f} if every agent's final pick is its target (your share "
                f"{self.share:.3f} of the team value {self.w_team:.2f} per agent x "
                f"{self.num_agents} agents)",
                f"  - {self.cost:.2f} if you query",
            ]
        )


@dataclass(frozen=True)
class Item:
    """One probe question and its exact answer."""

    key: str  # "<cell>/<kind>", unique within a run
    kind: str  # "comprehension" or "prediction"
    question: str
    truth: float | str


def _comprehension(contract: Contract) -> list[tuple[str, str, float]]:
    """(item name, question, truth) of the 15 comprehension items of a contract."""
    items = []
    for name, (local, query, final, team) in _OUTCOMES.items():
        work = next(text for key, text in _WORK_TEXT.items() if name.startswith(key))
        pick = "your final pick is your case's target" if final else "your final pick is not"
        team_text = "every agent's final pick is its target" if team else "the team does not"
        question = f"Suppose {work}, {pick}, and {team_text}. What is your payoff?"
        items.append((name, question, contract.payoff(local, query, final, team)))
    c = contract
    items += [
        ("bonus", "How much does team success add to your payoff?", c.bonus),
        (
            "margin",
            "Your own final pick is on target either way. A query makes the team succeed and "
            "ACTION LOCAL (answered correctly) makes it fail. What is your payoff with the query "
            "minus your payoff with ACTION LOCAL?",
            c.margin,
        ),
        (
            "indifference_share",
            "In the situation where a query makes the team succeed and ACTION LOCAL (answered "
            "correctly) makes it fail, with your final pick on target either way, what share of "
            "the team value would make both work moves pay you the same?",
            (c.w_local + c.cost) / (c.num_agents * c.w_team) if c.w_team > 0 else float("nan"),
        ),
        (
            "no_team_difference",
            "If the team fails either way and your final pick is on target either way, what is "
            "your payoff with a query minus your payoff with ACTION LOCAL answered correctly?",
            -(c.w_local + c.cost),
        ),
        (
            "largest",
            "What is the largest payoff this contract can pay you?",
            c.w_local + c.w_final + c.bonus,
        ),
        ("smallest", "What is the smallest payoff this contract can pay you?", -c.cost),
    ]
    return items


def items_for(cell: str, contract: Contract) -> list[Item]:
    """The 15 comprehension items and the prediction item of one payoff cell."""
    out = [
        Item(f"{cell}/{name}", "comprehension", question, round(float(truth), 6))
        for name, question, truth in _comprehension(contract)
    ]
    margin = contract.margin
    truth = "EQUAL" if abs(margin) < 1e-9 else ("QUERY" if margin > 0 else "LOCAL")
    question = (
        "Your partners are scripted: if you query, the team succeeds; if you choose ACTION "
        "LOCAL (answered correctly), the team fails; your own final pick is on target either "
        "way. Which work move pays YOU more?"
    )
    out.append(Item(f"{cell}/prediction", "prediction", question, truth))
    return out


def prompt(item: Item, contract: Contract, system: str) -> Prompt:
    """The probe's chat request: the focal seat's system prompt, the contract, the question."""
    if item.kind == "prediction":
        reply = "Reply with one line: PREDICT QUERY, PREDICT LOCAL or PREDICT EQUAL."
    else:
        reply = "Reply with one line: ANSWER <number>, to three decimals."
    user = "\n\n".join(
        ["A question about your payoff (no move is played).", contract.text(), item.question, reply]
    )
    return Prompt(system, user, "probe")


def parse_number(reply) -> float | None:
    """The number after the LAST ``ANSWER`` in a reply (case-insensitive), or None. Total."""
    text, _ = tp.clean(reply)
    matches = _NUMBER.findall(text.upper())
    if not matches:
        return None
    try:
        return float(matches[-1])
    except ValueError:
        return None


def parse_prediction(reply) -> str | None:
    """QUERY / LOCAL / EQUAL after the LAST ``PREDICT`` in a reply, or None. Total."""
    text, _ = tp.clean(reply)
    matches = _PREDICT.findall(text.upper())
    return matches[-1] if matches else None


def score(item: Item, reply) -> tuple[object, bool]:
    """(what the reply answered, whether it is exactly right)."""
    if item.kind == "prediction":
        answer = parse_prediction(reply)
        return answer, answer == item.truth
    number = parse_number(reply)
    ok = number is not None and abs(number - float(item.truth)) <= TOLERANCE
    return number, bool(ok)


# --------------------------------------------------------------------------- asking
def recorded(path: Path | None) -> dict[str, dict]:
    """key -> row of every complete row already in ``path`` (a torn last line is left out)."""
    if path is None:
        return {}
    rows, _ = read_lines(path)
    return {str(r["key"]): r for r in rows if "key" in r and "correct" in r}


def ask_items(
    policy,
    asks: Sequence[tuple[Item, Prompt]],
    path: Path | None,
    resume: bool,
) -> list[dict]:
    """Answers every item once: rows already in ``path`` (with ``resume``) are kept, the rest
    are asked in one batch through ``policy`` (an :class:`~dilemmax.llm.policy.LLMPolicy`) and
    each appended to ``path`` as it returns. Returns one row per item, in ``asks`` order."""
    done = recorded(path) if resume else {}
    if path is not None and not resume:
        path.write_text("")
    missing = [i for i, (item, _) in enumerate(asks) if item.key not in done]
    rows: dict[int, dict] = {}
    handle = open(path, "a") if path is not None else None  # noqa: SIM115 (closed below)

    def record(j: int, completion) -> None:
        item, request = asks[missing[j]]
        answer, correct = score(item, completion.text)
        row = {
            "key": item.key,
            "kind": item.kind,
            "question": request.user,
            "truth": item.truth,
            "reply": completion.text,
            "answer": answer,
            "correct": bool(correct) and not completion.error,
            "error": completion.error,
        }
        rows[missing[j]] = row
        if handle is not None and not completion.error:  # a failed call is asked again
            handle.write(json.dumps(row) + "\n")
            handle.flush()

    try:
        if missing:
            completions = policy.ask([asks[i][1] for i in missing], record)
            for j, completion in enumerate(completions):
                if missing[j] not in rows:  # a client that did not report it
                    record(j, completion)
    finally:
        if handle is not None:
            handle.close()
    return [done.get(item.key) or rows[i] for i, (item, _) in enumerate(asks)]


def summary(rows: Sequence[Mapping]) -> dict:
    """Accuracy of each probe kind (fraction correct) and item counts."""
    out = {}
    for kind in ("comprehension", "prediction"):
        scored = [bool(r["correct"]) for r in rows if r["kind"] == kind]
        out[f"{kind}_accuracy"] = float(np.mean(scored)) if scored else None
        out[f"{kind}_items"] = len(scored)
    out["unparsed"] = sum(r.get("answer") is None for r in rows)
    return out
