"""Label the rationales of consequence-game runs and report the label shares (Appendix 12).

A run played with ``ask_rationale`` (``dilemmax redteam play --protocol ask_rationale=true``,
``dilemmax play consequence --protocol ask_rationale=true``, ``dilemmax experiment
consequence/...``) keeps every reply in its ``transcript.jsonl``. :func:`read_traces` turns each
``act`` call whose reply holds reasoning beside its move into a :class:`Trace`: who wrote it
(population = the seat's name unless given), under which rule and prompt arm, in which round and
phase, whether an elimination had already happened (read from the prompt the model saw), the
game's outcome (the transcript's episode line), and the labels of
:mod:`dilemmax.redteam.rationale_lexicon`.

:func:`rationale_report` gives, with 95% bootstrap CIs over games (a game's traces are resampled
together, so correlated traces within a game do not narrow the interval):

* the share of traces carrying each label per rule, per population, per round, per population
  and rule, and per prompt arm and rule (ablation runs);
* rule inference as the paper quantifies it: among post-first-elimination traces, the share
  classified as inferring (rule-target x inference / elimination terms), and the games with at
  least one inferring trace (RP: 85 / 131 traces, 43 / 44 games). The paper reads it in the
  anonymous arms, where the prompt hides the bearer; under a named rule a trace that restates
  the rule counts too, so read those rows as an upper reference, per arm (``arm/rule``);
* round-one traces of failing games (the fatalism and positional shares Section 13 quotes:
  RE 49% fatalism, PP 55% positional).

Reading is total: rows that are not calls, calls without a reply, prompts that do not parse are
skipped or read as unknown; nothing a model wrote can raise here. A file whose first line is not
a run header (``{"type": "run", ...}``, what every dilemmax transcript starts with) is not a
transcript and is refused (UsageError), so a wrong file is never reported as "no rationales".

Memory: the transcript is read line by line, and what is kept is what is present: the labelled
traces (each its rationale's text and a few fields) and one outcome per game. The bootstrap
(:func:`dilemmax.statistics.cluster_share_ci`) draws its resamples in blocks of at most
``BOOTSTRAP_BLOCK`` game indices (or one resample, when a group has more games than that), so
its arrays never grow with resamples x games: labelling 100,000 games takes about the traces'
own size plus ~50 MB, whatever ``--resamples`` is.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

import dilemmax
from dilemmax.envs.consequence import constants as C
from dilemmax.envs.consequence.rendering import participant_label
from dilemmax.envs.consequence.text import CLAUSES, ConsequenceText
from dilemmax.envs.text import Prompt
from dilemmax.errors import UsageError
from dilemmax.redteam.figures import write_table
from dilemmax.redteam.rationale_lexicon import LABELS, label_rationale, text_of
from dilemmax.statistics import NUM_RESAMPLES, cluster_share_ci

TRANSCRIPT = "transcript.jsonl"
UNKNOWN = "?"


@dataclass(frozen=True)
class Trace:
    """One rationale and what it was written in.

    Attributes:
        population: who wrote it (the seat's name, or the name the caller gave the run).
        part: the transcript part (``rule=RP``, ``R=1,anonymous,competitive,rule/rule=RP``).
        arm: the part without its ``rule=`` component ("" when the part is only the rule).
        rule: AON / RE / DV / RP / PP, or ``"?"`` when neither the part nor the prompt says.
        game: the episode's id (``part|e<episode>``), the unit the bootstrap resamples.
        round: 1-based round the move was asked in (0 if the prompt does not say).
        phase: ``contribute`` or ``vote``.
        after_elimination: an elimination had happened before this prompt.
        writer: the writer's participant letter ("" if unknown).
        failed: the game ended short of the threshold (None without its episode line).
        rationale: the reply without its move line.
        labels: label -> carried (every label of ``LABELS``).
    """

    population: str
    part: str
    arm: str
    rule: str
    game: str
    round: int
    phase: str
    after_elimination: bool
    writer: str
    failed: bool | None
    rationale: str
    labels: Mapping[str, bool] = field(default_factory=dict)


# ---------------------------------------------------------------------------- the prompt
def _between(text: str, start: str, end: str) -> str | None:
    """The text after the first ``start`` up to the next ``end`` (None if absent); linear."""
    i = text.find(start)
    if i < 0:
        return None
    i += len(start)
    j = text.find(end, i)
    return text[i:j] if j >= 0 else None


def _small_int(text: str | None) -> int:
    text = (text or "").strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 4 else 0


def prompt_facts(prompt: str) -> dict:
    """round, phase, writer, participants and whether someone was already eliminated, from a
    consequence prompt's own sentences (every field has a default when a sentence is missing)."""
    prompt = text_of(prompt)
    vote = "it is time to vote." in prompt
    round_text = (
        _between(prompt, "Round ", " of ") if vote else _between(prompt, "It is round ", " of ")
    )
    # "paper" layout: "You are participant A in a group of 3 participants ..."; "cached": "You
    # are one of the 3 participants (A, B, C) of a group." and later "You are participant A."
    writer = _between(prompt, "You are participant ", " in a group")
    writer = (writer or _between(prompt, "You are participant ", ".\n") or "").strip()
    group = _small_int(
        _between(prompt, "in a group of ", " participants")
        or _between(prompt, "You are one of the ", " participants")
    )
    lines = prompt.split("\n")
    gone = any(
        line.startswith("- ") and line.endswith(".") and " after round " in line
        and (" was eliminated" in line or " was out of the game" in line)
        for line in lines
    )  # fmt: skip
    return {
        "round": _small_int(round_text),
        "phase": "vote" if vote else "contribute",
        "writer": writer if len(writer) <= 4 else "",
        "participants": group,
        "after_elimination": gone,
    }


class _RuleClauses:
    """Which rule a prompt states, from its rule sentence (each rule's sentence under every
    clause variant and endgame), for runs whose part does not name the rule."""

    def __init__(self):
        self._by_rounds: dict[int, list[tuple[str, str]]] = {}

    def rule_of(self, prompt: str, rounds: int) -> str:
        if rounds not in self._by_rounds:
            self._by_rounds[rounds] = self._sentences(rounds)
        found = {rule for sentence, rule in self._by_rounds[rounds] if sentence in prompt}
        return found.pop() if len(found) == 1 else UNKNOWN

    @staticmethod
    def _sentences(rounds: int) -> list[tuple[str, str]]:
        out = []
        for endgame in ("all", "rule"):
            env = dilemmax.make("consequence", num_rounds=max(rounds, 1), endgame=endgame)
            for clause in CLAUSES:
                protocol = ConsequenceText(env, clause=clause)
                for rule, name in enumerate(C.RULE_NAMES):
                    out.append(("4. " + protocol.rule_clause(rule, max(rounds, 1)), name))
        return out


def _prompt_rounds(prompt: str) -> int:
    return _small_int(_between(prompt, "There are at most ", " round"))


def split_part(part: str) -> tuple[str, str]:
    """(arm, rule) of a part name: its ``rule=XX`` component and the rest, joined by ``/``."""
    pieces = part.split("/")
    rule = ""
    for piece in pieces:
        if piece.startswith("rule=") and piece[5:].upper() in C.RULE_NAMES:
            rule = piece[5:].upper()
    arm = "/".join(p for p in pieces if not p.startswith("rule="))
    return arm, rule


# ---------------------------------------------------------------------------- the transcript
def _rationale(protocol, reply: str, vote: bool, participants: int) -> str:
    """The reply without its move line (the protocol's own parse; total)."""
    context = {"vote": vote, "held": 10**9 - 1, "alive": (True,) * max(participants, 1)}
    parsed = protocol.parse_reply(reply, Prompt("", "", "act", (), context))
    return parsed.rationale.strip()


def _failed(row: Mapping) -> bool | None:
    metrics = row.get("metrics")
    if not isinstance(metrics, Mapping):
        return None
    for name, failed_when in (("success", 0.0), ("fatality", None)):
        value = metrics.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value == failed_when if failed_when is not None else value > 0
    return None


def transcripts_in(run: str | Path) -> list[Path]:
    """The transcripts of a run folder (its ``transcript.jsonl``, or else every
    ``transcript.jsonl`` below it: shard folders), or the file itself; UsageError naming the
    path when there is none."""
    path = Path(run)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise UsageError(f"{run}: no such run folder or transcript")
    if (path / TRANSCRIPT).is_file():
        return [path / TRANSCRIPT]
    files = sorted(p for p in path.rglob(TRANSCRIPT) if p.is_file())
    if not files:
        raise UsageError(f"{run}: holds no {TRANSCRIPT} (a play / redteam / experiment run)")
    return files


def read_traces(run: str | Path, population: str | None = None) -> list[Trace]:
    """Every rationale of a run folder (or transcript file), labelled; see the module docstring.

    Args:
        population: the name every trace of this run goes under (default: the call's seat).
    """
    env = dilemmax.make("consequence")
    protocol = ConsequenceText(env)
    clauses = _RuleClauses()
    traces = []
    for path in transcripts_in(run):
        found, outcome = [], {}
        for row in transcript_rows(path):
            if row.get("type") == "episode":
                outcome[str(row.get("id"))] = _failed(row)
            trace = _trace(row, population, protocol, clauses)
            if trace is not None:
                found.append(trace)
        # An episode's line follows its calls: outcomes are filled in once the file is read.
        traces += [dataclasses.replace(t, failed=outcome.get(t.game)) for t in found]
    return traces


def transcript_rows(path: Path) -> Iterator[dict]:
    """The JSON-object lines of transcript ``path``, read one line at a time (a last line
    without its newline is a write that did not finish and is left out; a line that is not a
    JSON object is skipped). UsageError when the first line is not a run header: the file is
    not a dilemmax transcript."""
    with open(path, "rb") as handle:
        first = handle.readline(1 << 20)
        if not _is_run_header(first):
            raise UsageError(
                f"{path} is not a dilemmax transcript: its first line is not a run header "
                '({"type": "run", ...})'
            )
        for raw in handle:
            if not raw.endswith(b"\n") or not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except ValueError:
                continue
            if isinstance(row, dict):
                yield row


def _is_run_header(line: bytes) -> bool:
    try:
        head = json.loads(line)
    except ValueError:
        return False
    return line.endswith(b"\n") and isinstance(head, dict) and head.get("type") == "run"


def _trace(row, population, protocol, clauses) -> Trace | None:
    if row.get("type") != "call" or row.get("kind") != "act" or row.get("error"):
        return None
    prompt, reply = text_of(row.get("prompt")), text_of(row.get("reply"))
    facts = prompt_facts(prompt)
    rationale = _rationale(protocol, reply, facts["phase"] == "vote", facts["participants"])
    if not rationale:
        return None
    part = str(row.get("part", ""))[:200]
    arm, rule = split_part(part)
    if not rule:
        rule = clauses.rule_of(prompt, _prompt_rounds(prompt))
    episode = row.get("episode")
    game = f"{part}|e{episode}" if isinstance(episode, int) else f"{part}|{row.get('key', '')}"
    letters = [participant_label(i) for i in range(max(facts["participants"], 0))]
    others = [x for x in letters if x != facts["writer"]]
    return Trace(
        population=population or str(row.get("seat", UNKNOWN))[:200],
        part=part,
        arm=arm,
        rule=rule,
        game=game,
        round=facts["round"],
        phase=facts["phase"],
        after_elimination=facts["after_elimination"],
        writer=facts["writer"],
        failed=None,
        rationale=rationale,
        labels=label_rationale(rationale, others),
    )


# ---------------------------------------------------------------------------- shares
def share_row(
    labelled: np.ndarray,
    games: Sequence[str],
    rng: np.random.Generator,
    num_resamples: int = NUM_RESAMPLES,
) -> dict:
    """Share of ``labelled`` (bool[N]) with a 95% percentile bootstrap CI over games, as a report
    row (:func:`dilemmax.statistics.cluster_share_ci`)."""
    return share_rows(np.asarray(labelled, bool)[:, None], games, rng, num_resamples)[0]


def share_rows(
    labelled: np.ndarray,
    games: Sequence[str],
    rng: np.random.Generator,
    num_resamples: int = NUM_RESAMPLES,
) -> list[dict]:
    """:func:`share_row` of each column of ``labelled`` (bool[N, L]: L labels of N traces), every
    column on the same resamples of the games (one set of draws serves all L labels)."""
    labelled = np.asarray(labelled, bool).reshape(len(games), -1)
    if labelled.shape[0] == 0:
        empty = {"share": None, "low": None, "high": None, "count": 0, "traces": 0, "games": 0}
        return [dict(empty) for _ in range(labelled.shape[1])]
    ci = cluster_share_ci(labelled, games, rng, num_resamples)
    num_games = len(set(map(str, games)))
    return [
        {
            "share": float(ci.mean[j]),
            "low": float(ci.low[j]),
            "high": float(ci.high[j]),
            "count": int(column.sum()),
            "traces": int(column.size),
            "games": num_games,
        }
        for j, column in enumerate(labelled.T)
    ]


def _groups(traces: Sequence[Trace], key) -> dict[str, list[Trace]]:
    out: dict[str, list[Trace]] = {}
    for trace in traces:
        out.setdefault(key(trace), []).append(trace)
    return dict(sorted(out.items()))


GROUPINGS = {
    "rule": lambda t: t.rule,
    "population": lambda t: t.population,
    "round": lambda t: str(t.round),
    "population/rule": lambda t: f"{t.population}/{t.rule}",
    "arm/rule": lambda t: f"{t.arm or 'main'}/{t.rule}",
}


def _label_shares(group: Sequence[Trace], labels, rng, num_resamples, seen=None) -> dict:
    """label -> share with CI over ``group``. ``seen`` (traces' ids -> shares) answers a group
    of the very traces another grouping already drew (one population and one arm make the rule,
    population / rule and arm / rule groups the same): the same traces, the same interval, and
    one bootstrap instead of three."""
    identity = (tuple(id(t) for t in group), tuple(labels))
    if seen is not None and identity in seen:
        return {label: dict(entry) for label, entry in seen[identity].items()}
    games = [t.game for t in group]
    labelled = np.asarray([[t.labels.get(label, False) for label in labels] for t in group], bool)
    shares = dict(zip(labels, share_rows(labelled, games, rng, num_resamples), strict=True))
    if seen is not None:
        seen[identity] = shares
    return {label: dict(entry) for label, entry in shares.items()}


def rule_inference(traces: Sequence[Trace], rng, num_resamples=NUM_RESAMPLES) -> dict:
    """Per rule (and per arm and rule): post-first-elimination traces classified as inferring,
    with the games that hold at least one such trace (the paper's "43 / 44 games")."""
    after = [t for t in traces if t.after_elimination]
    out = {}
    for grouping in ("rule", "arm/rule"):
        rows = {}
        for name, group in _groups(after, GROUPINGS[grouping]).items():
            inferring = [t.labels.get("rule_inference", False) for t in group]
            entry = share_row(inferring, [t.game for t in group], rng, num_resamples)
            entry["games_inferring"] = len({t.game for t in group if t.labels["rule_inference"]})
            rows[name] = entry
        out[grouping] = rows
    return out


def rationale_report(
    traces: Sequence[Trace], seed: int = 0, num_resamples: int = NUM_RESAMPLES
) -> dict:
    """Label shares per rule, population, round, population / rule and arm / rule with CIs;
    rule inference after the first elimination; round-one traces of failing games."""
    rng = np.random.default_rng(seed)
    report: dict = {"traces": len(traces), "labels": list(LABELS), "shares": {}}
    seen: dict = {}
    for grouping, key in GROUPINGS.items():
        report["shares"][grouping] = {
            name: _label_shares(group, LABELS, rng, num_resamples, seen)
            for name, group in _groups(traces, key).items()
        }
    report["rule_inference_after_first_elimination"] = rule_inference(traces, rng, num_resamples)
    failing = [t for t in traces if t.failed and t.round == 1]
    report["round_one_failing_games"] = {
        rule: _label_shares(group, ("fatalism", "positional", "exploitative"), rng, num_resamples)
        for rule, group in _groups(failing, GROUPINGS["rule"]).items()
    }
    return report


# ---------------------------------------------------------------------------- files
def _cell(entry: Mapping) -> str:
    if entry.get("share") is None:
        return "–"
    return f"{100 * entry['share']:.0f}% [{100 * entry['low']:.0f}, {100 * entry['high']:.0f}]"


def shares_table(report: Mapping) -> tuple[list[str], list[list]]:
    """(header, rows): one row per grouping and group, traces, games, each label's share in %
    with its 95% CI."""
    header = ["grouping", "group", "traces", "games", *LABELS]
    rows = []
    for grouping, groups in report["shares"].items():
        for name, shares in groups.items():
            first = next(iter(shares.values()))
            rows.append(
                [grouping, name, first["traces"], first["games"]]
                + [_cell(shares[label]) for label in LABELS]
            )
    return header, rows


def inference_table(report: Mapping) -> tuple[list[str], list[list]]:
    """(header, rows) of rule inference after the first elimination, per rule and arm / rule."""
    header = ["grouping", "group", "inferring traces", "share [95% CI]", "games inferring"]
    rows = []
    for grouping, groups in report["rule_inference_after_first_elimination"].items():
        for name, e in groups.items():
            rows.append(
                [
                    grouping,
                    name,
                    f"{e['count']}/{e['traces']}",
                    _cell(e),
                    f"{e['games_inferring']}/{e['games']}",
                ]
            )
    return header, rows


def write_traces_csv(traces: Iterable[Trace], path: Path) -> Path:
    """One row per trace with its labels, for checking the labeller by hand."""
    fields = [f for f in Trace.__dataclass_fields__ if f != "labels"]
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow([*fields, *LABELS])
        for trace in traces:
            row = asdict(trace)
            writer.writerow([row[k] for k in fields] + [int(trace.labels[k]) for k in LABELS])
    return path


def write_rationale_report(
    traces: Sequence[Trace], out: Path, seed: int = 0, num_resamples: int = NUM_RESAMPLES
) -> dict:
    """``rationales.json``, ``rationale_labels.md`` / ``.csv``, ``rule_inference.md`` / ``.csv``
    and ``traces.csv`` under ``out``; returns the report."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report = rationale_report(traces, seed, num_resamples)
    (out / "rationales.json").write_text(json.dumps(report, indent=1))
    write_table(out / "rationale_labels", *shares_table(report))
    write_table(out / "rule_inference", *inference_table(report))
    write_traces_csv(traces, out / "traces.csv")
    return report
