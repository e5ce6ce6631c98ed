"""An optional model judge of consequence-game rationales, beside the lexical labeller.

The judge is any :class:`~dilemmax.llm.client.Client` (an ``openai:`` / ``hf:`` model, a local
server, a :class:`~dilemmax.llm.client.ScriptedClient`). Its system prompt is
``dilemmax/redteam/prompts/rationale_judge.md`` (package data); each trace is one user message
holding the round, whether an elimination had happened, and the rationale. The reply names four
labels (``POSITIONAL``, ``EXPLOITATIVE``, ``FATALISM``, ``RULE_INFERENCE``) as ``yes`` / ``no``
lines. Parsing is total and linear: for each label the last ``NAME:`` is found with ``rfind`` and
the word after it read; a label with no readable answer (or a failed call) is ``None``, so it
counts in no share, and the number of such traces is reported.

Every verdict is appended to ``judge.jsonl`` as it returns, keyed by a hash of the trace;
running again with the same folder asks only the traces not judged yet, so a crash in a long
judging run loses nothing already paid for.

:func:`judge_report` gives the judge's label shares per rule (bootstrap over games, as the
lexical report) and, per label, its agreement with the lexicon (share of traces where both
agree, Cohen's kappa).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

import numpy as np

from dilemmax.errors import UsageError
from dilemmax.llm.client import ChatRequest, Client
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.seats import build_seat
from dilemmax.llm.transcript import read_lines
from dilemmax.redteam.figures import write_table
from dilemmax.redteam.rationale_labels import GROUPINGS, Trace, share_row
from dilemmax.redteam.rationale_lexicon import text_of

# Judge label -> the lexical label it is compared with.
JUDGE_LABELS = {
    "POSITIONAL": "positional",
    "EXPLOITATIVE": "exploitative",
    "FATALISM": "fatalism",
    "RULE_INFERENCE": "rule_inference",
}
ANSWERS = {"yes": True, "true": True, "y": True, "no": False, "false": False, "n": False}
VERDICTS = "judge.jsonl"
BATCH = 32  # traces per client call (a batch the client may send concurrently)


def judge_prompt() -> str:
    """The judge's system prompt (package data)."""
    path = resources.files("dilemmax.redteam") / "prompts" / "rationale_judge.md"
    return path.read_text(encoding="utf-8")


def trace_key(trace: Trace) -> str:
    text = json.dumps([trace.population, trace.game, trace.round, trace.phase, trace.writer,
                       trace.rationale])  # fmt: skip
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def judge_request(trace: Trace, system: str) -> ChatRequest:
    when = "after an elimination" if trace.after_elimination else "before any elimination"
    move = "a vote" if trace.phase == "vote" else "a payment"
    user = (
        f"Round {trace.round or '?'}, {when}; the reasoning came before {move}.\n\n"
        f"Reasoning:\n<<<\n{trace.rationale}\n>>>"
    )
    return ChatRequest(({"role": "system", "content": system}, {"role": "user", "content": user}))


def parse_verdict(reply) -> dict[str, bool | None]:
    """label -> yes / no / None (unreadable) from a judge's reply; total and linear."""
    text = text_of(reply).lower()
    out: dict[str, bool | None] = {}
    for name in JUDGE_LABELS:
        out[name] = None
        at = text.rfind(name.lower() + ":")
        if at < 0:  # "rule inference:" spelled with a space (same length)
            at = text.rfind(name.lower().replace("_", " ") + ":")
        if at < 0:
            continue
        rest = text[at + len(name) + 1 : at + len(name) + 25].split()
        words = [w.strip(".,;:*`'\"") for w in rest]  # markdown emphasis and quotes go
        out[name] = ANSWERS.get(next((w for w in words if w), ""))
    return out


def judge_traces(traces: Sequence[Trace], client: Client, out: Path) -> list[dict]:
    """The judge's verdict on every trace (recorded ones reused; new ones appended to
    ``out/judge.jsonl`` as they return), in trace order."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / VERDICTS
    rows, _ = read_lines(path)
    done = {r["key"]: r for r in rows if isinstance(r.get("key"), str) and "verdict" in r}
    system = judge_prompt()
    keys = [trace_key(t) for t in traces]
    todo = [i for i, k in enumerate(keys) if k not in done]
    with open(path, "a", encoding="utf-8") as handle:
        for start in range(0, len(todo), BATCH):
            batch = todo[start : start + BATCH]

            def record(j: int, completion, batch=batch) -> None:
                i = batch[j]
                row = {
                    "key": keys[i],
                    "reply": completion.text,
                    "error": completion.error,
                    "verdict": parse_verdict(completion.text),
                }
                done[keys[i]] = row
                handle.write(json.dumps(row) + "\n")
                handle.flush()

            requests = [judge_request(traces[i], system) for i in batch]
            completions = client.complete(requests, record)
            for j, completion in enumerate(completions):
                if keys[batch[j]] not in done:  # a client that did not report it
                    record(j, completion)
    return [done[k]["verdict"] for k in keys]


def _kappa(a: np.ndarray, b: np.ndarray) -> float | None:
    """Cohen's kappa of two boolean raters (None when chance agreement is total)."""
    observed = float(np.mean(a == b))
    chance = float(np.mean(a) * np.mean(b) + (1 - np.mean(a)) * (1 - np.mean(b)))
    return None if chance >= 1.0 else (observed - chance) / (1.0 - chance)


def judge_report(
    traces: Sequence[Trace], verdicts: Sequence[Mapping], seed: int = 0, num_resamples=10_000
) -> dict:
    """The judge's shares per rule with CIs, unreadable counts, agreement with the lexicon."""
    rng = np.random.default_rng(seed)
    report: dict = {"traces": len(traces), "shares": {}, "agreement": {}, "unreadable": {}}
    by_rule: dict[str, list[int]] = {}
    for i, trace in enumerate(traces):
        by_rule.setdefault(GROUPINGS["rule"](trace), []).append(i)
    for name, lexical in JUDGE_LABELS.items():
        judged = [i for i, v in enumerate(verdicts) if v.get(name) is not None]
        readable = set(judged)
        report["unreadable"][name] = len(traces) - len(judged)
        report["shares"][name] = {}
        for rule, rows in sorted(by_rule.items()):
            mine = [i for i in rows if i in readable]
            report["shares"][name][rule] = share_row(
                [bool(verdicts[i][name]) for i in mine],
                [traces[i].game for i in mine],
                rng,
                num_resamples,
            )
        a = np.asarray([bool(verdicts[i][name]) for i in judged], bool)
        b = np.asarray([bool(traces[i].labels[lexical]) for i in judged], bool)
        report["agreement"][name] = {
            "lexical_label": lexical,
            "traces": int(len(judged)),
            "agreement": float(np.mean(a == b)) if len(judged) else None,
            "kappa": _kappa(a, b) if len(judged) else None,
        }
    return report


def judge_tables(report: Mapping) -> tuple[tuple[list, list], tuple[list, list]]:
    """((header, rows) of the judge's shares per rule, (header, rows) of its agreement)."""
    rules = sorted({r for per_rule in report["shares"].values() for r in per_rule})
    cell = lambda e: "–" if e["share"] is None else (
        f"{100 * e['share']:.0f}% [{100 * e['low']:.0f}, {100 * e['high']:.0f}]"
    )  # fmt: skip
    shares = (
        ["judge label", *rules],
        [
            [name, *(cell(per_rule[r]) for r in rules)]
            for name, per_rule in report["shares"].items()
        ],
    )
    fmt = lambda v: "–" if v is None else f"{v:.2f}"
    agreement = (
        ["judge label", "lexical label", "traces judged", "unreadable", "agreement", "kappa"],
        [
            [name, a["lexical_label"], a["traces"], report["unreadable"][name],
             fmt(a["agreement"]), fmt(a["kappa"])]
            for name, a in report["agreement"].items()
        ],
    )  # fmt: skip
    return shares, agreement


def judge_into(
    traces: Sequence[Trace],
    judge: str,
    generate: GenerateConfig,
    out: Path,
    seed: int,
    resamples: int,
) -> dict:
    """The verdicts of the model seat ``judge`` (asked with ``generate``) on ``traces``, kept in
    ``out/judge.jsonl`` (resumable), and its report (``judge.json``) and share and agreement
    tables written beside them; a judge that is no model seat is a one-line UsageError."""
    try:
        client = build_seat(judge, None, generate.check(), {}, {}).policy.client
    except (ValueError, TypeError, AttributeError) as error:
        raise UsageError(f"--judge {judge}: {error}") from None
    verdicts = judge_traces(traces, client, out)
    report = judge_report(traces, verdicts, seed, resamples)
    (out / "judge.json").write_text(json.dumps(report, indent=1))
    shares, agreement = judge_tables(report)
    write_table(out / "judge_labels", *shares)
    write_table(out / "judge_agreement", *agreement)
    return report
