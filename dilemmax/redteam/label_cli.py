"""``dilemmax redteam label``: the rationales of runs labelled, with shares and CIs.

    dilemmax redteam label runs/my-model [more runs ...] --out labels
    dilemmax redteam label runs/my-model --out labels --judge openai:judge-model \
        --base-url http://localhost:8000/v1      # a model judge beside the lexical labels

Reads each run's ``transcript.jsonl`` (``dilemmax play``, ``redteam play`` / ``ablate``,
``dilemmax experiment``), labels every rationale (:mod:`dilemmax.redteam.rationale_lexicon`)
and writes ``rationales.json``, ``rationale_labels.md`` / ``.csv``, ``rule_inference.md`` /
``.csv`` and ``traces.csv``; with ``--judge``, also ``judge.jsonl`` (resumable verdicts),
``judge.json``, ``judge_labels.md`` and ``judge_agreement.md``.

A file that is not a dilemmax transcript (its first line is no run header) is refused. Memory
grows with the rationales present, not with the games times ``--resamples``: transcripts are read
line by line and the bootstrap draws in bounded blocks (:mod:`dilemmax.redteam.rationale_labels`).
"""

from __future__ import annotations

from dilemmax.commandline import seed_int
from dilemmax.llm.cli import add_model_arguments, generate_config
from dilemmax.redteam import api as P


def _cmd_label(args) -> int:
    """Labels every rationale of the runs (positional / exploitative / fatalism / rule
    inference) and writes the shares with CIs (:func:`dilemmax.redteam.api.label`)."""
    options = P.LabelOptions(
        tuple(args.name) if args.name else None, args.resamples, args.seed, args.judge,
        generate_config(args),
    )  # fmt: skip
    result = P.label(args.runs, args.out, options)
    if not result.traces:
        print(
            "no rationales in these transcripts: play with --protocol ask_rationale=true "
            "(the replies held only their move lines)"
        )
    for name, a in (result.judge or {}).get("agreement", {}).items():
        print(f"judge {name}: agreement with the lexicon {a['agreement']}, kappa {a['kappa']}")
    for rule, shares in result.report["shares"]["rule"].items():
        text = ", ".join(f"{label} {e['share']:.2f}" for label, e in shares.items())
        print(f"{rule}: {shares['positional']['traces']} traces; {text}")
    print(f"written {args.out}")
    return 0


def add_command(subparsers, resamples) -> None:
    """Adds ``label`` to ``dilemmax redteam``'s subcommands (``resamples``: the draws' type)."""
    p = subparsers.add_parser(
        "label",
        help="label the rationales of play / redteam / experiment runs",
        description="Labels every rationale of the runs' transcripts and writes the shares with "
        "bootstrap CIs over games. Memory: the labelled rationales themselves (about their "
        "text) and one outcome per game, plus bootstrap blocks of at most 2^20 draws (~50 MB), "
        "whatever --resamples is; transcripts are read line by line.",
    )
    p.add_argument("runs", nargs="+", help="run folders (or transcript.jsonl files)")
    p.add_argument("--name", nargs="+", help="one population name per run (default: seat names)")
    p.add_argument("--out", required=True, help="folder: rationales.json, tables, traces.csv")
    p.add_argument("--resamples", type=resamples, default=10_000)
    p.add_argument("--seed", type=seed_int, default=0)
    judge = p.add_argument_group("model judge (optional, beside the lexical labels)")
    judge.add_argument("--judge", help="a model (openai:<model>, hf:<folder>) labelling each trace")
    add_model_arguments(judge)
    p.set_defaults(func=_cmd_label)
