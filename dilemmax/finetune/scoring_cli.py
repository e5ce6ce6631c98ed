"""``dilemmax finetune reward``, ``evaluate`` and ``gepa``: the command lines of
:func:`dilemmax.finetune.api.reward`, :func:`dilemmax.finetune.api.evaluate` and
:func:`dilemmax.finetune.api.gepa` (scoring base models, adapters and any model seat:
``openai:``, ``inspect:``, ``hf:``, in one process)."""

from __future__ import annotations

import json
from pathlib import Path

from dilemmax.commandline import output_file, parse_assignments, positive_int, seed_int
from dilemmax.errors import UsageError
from dilemmax.finetune import api
from dilemmax.finetune.arguments import nonnegative_int
from dilemmax.finetune.generation import EVALUATE_GENERATE, GEPA_GENERATE, RLOO_GENERATE
from dilemmax.finetune.gepa import GEPASettings
from dilemmax.llm.cli import add_model_arguments, generate_config

# The model flags of reward and gepa, which sample a local model: the fields it reads.
SAMPLING = ("max_tokens", "temperature")


def _read_json(path: str, what: str) -> dict:
    try:
        value = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise UsageError(f"{what} {path}: {error}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{what} {path}: expected a JSON object")
    return value


def _cmd_reward(args) -> int:
    baseline = _read_json(args.baseline, "--baseline") if args.baseline else None
    # the name only means something beside a baseline; otherwise reward's default stands
    compared = {"baseline": baseline, "baseline_name": args.baseline} if baseline else {}
    if args.json:
        output_file(args.json, "--json")
    row = api.reward(
        args.model, args.data, adapter=args.adapter, split=args.split,
        max_records=args.max_records, samples=args.samples,
        generate=generate_config(args, RLOO_GENERATE), batch=args.batch, seed=args.seed,
        threads=args.threads, **compared,
    )  # fmt: skip
    print(json.dumps({k: v for k, v in row.items() if k != "per_prompt"}, indent=2))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(row, indent=2))
    return 0


def adapter_methods(specs) -> dict[str, str | None]:
    """``--adapter name=folder`` values -> method name -> adapter folder, the base model (None)
    first; SystemExit naming a malformed value."""
    methods: dict[str, str | None] = {"base": None}
    for spec in specs or []:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"--adapter expects name=folder, got {spec!r}")
        methods[name] = path
    return methods


def _adapters(args) -> dict[str, str]:
    """name -> folder of each --adapter (the base model is api.evaluate's own)."""
    try:
        methods = adapter_methods(args.adapter)
    except SystemExit as err:  # adapter_methods' own callers expect SystemExit
        raise UsageError(str(err)) from None
    return {name: folder for name, folder in methods.items() if folder is not None}


def method_entries(entries) -> dict[str, str]:
    """``--method NAME=SPEC`` values -> name -> model seat spec; a one-line error naming a
    malformed value or a name given twice."""
    specs: dict[str, str] = {}
    for entry in entries or []:
        name, sep, spec = (x.strip() for x in entry.partition("="))
        if not sep or not name or not spec:
            raise UsageError(f"--method expects NAME=<kind>:<target>, got {entry!r}")
        if name in specs:
            raise UsageError(f"--method {entry!r}: the name {name!r} is given twice")
        specs[name] = spec
    return specs


def _cmd_evaluate(args) -> int:
    methods = method_entries(args.method)
    evaluation = api.evaluate(
        args.out, model=args.model, adapters=_adapters(args),
        methods=methods, episodes=args.episodes, seed=args.seed,
        protocol=parse_assignments(args.protocol, "--protocol"), conditions=args.conditions,
        envs=args.envs, batch=args.batch, generate=generate_config(args, EVALUATE_GENERATE),
        threads=args.threads,
        progress=not args.no_progress,
    )  # fmt: skip
    print(evaluation.table())
    print("\n".join(f"{k}: {v}" for k, v in evaluation.files.items()))
    return 0


def _cmd_gepa(args) -> int:
    settings = GEPASettings(
        model=args.model,
        adapter=args.adapter,
        out=args.out,
        train_episodes=args.train_episodes,
        val_episodes=args.val_episodes,
        test_episodes=args.test_episodes,
        max_metric_calls=args.max_metric_calls,
        minibatch_size=args.minibatch,
        generate=generate_config(args, GEPA_GENERATE),
        seed=args.seed,
        reflection_model=args.reflection_model,
        num_agents=args.num_agents,
    )
    result = api.gepa(settings)
    print(json.dumps(result, indent=2))
    return 0


# ------------------------------------------------------------------------------ parser
def add_scoring_commands(sub) -> None:
    """The parsers of ``reward``, ``evaluate`` and ``gepa`` under ``dilemmax finetune``."""
    p = sub.add_parser("reward", help="mean RLOO reward (and its standard error) on a split")
    p.add_argument("--model", required=True)
    p.add_argument("--adapter")
    p.add_argument("--data", required=True)
    p.add_argument("--split", default="heldout")
    p.add_argument(
        "--max-records", type=nonnegative_int, default=0, help="an evenly spaced sample of N"
    )
    p.add_argument("--samples", type=positive_int, default=1, help="sampled replies per prompt")
    add_model_arguments(p, RLOO_GENERATE, SAMPLING)
    p.add_argument("--batch", type=positive_int, default=8)
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--threads", type=nonnegative_int, default=0)
    p.add_argument("--json", help="also write the result here")
    p.add_argument(
        "--baseline",
        help="a --json result of another adapter on the same records: adds the paired difference "
        "(this minus it) and its standard error",
    )
    p.set_defaults(func=_cmd_reward)

    p = sub.add_parser(
        "evaluate", help="base vs adapters, or any model seats, on the 15-condition grid (Table 3)"
    )
    add_model_arguments(p, EVALUATE_GENERATE)  # the --method seats read all; the local model two
    p.add_argument("--model", help="local transformers model: 'base' and each --adapter")
    p.add_argument("--adapter", action="append", help="name=adapter folder (repeatable)")
    p.add_argument(
        "--method",
        action="append",
        metavar="NAME=SPEC",
        help="also play this model seat in every seat: openai:<model>[,base_url=...], "
        "inspect:<provider>/<model>, hf:<folder>[,adapter=...] (repeatable)",
    )
    p.add_argument("--episodes", type=positive_int, default=5, help="episodes per condition")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument(
        "--protocol",
        action="append",
        help="text protocol option key=value, laid over the paper's SFT variant, or with "
        "--conditions over the dataset's options",
    )
    p.add_argument("--envs", type=positive_int, default=16, help="environments stepped together")
    p.add_argument("--batch", type=positive_int, default=16, help="prompts per generate call")
    p.add_argument("--threads", type=nonnegative_int, default=0)
    p.add_argument("--out", required=True, help="report folder (results.json, table3.md, png)")
    p.add_argument(
        "--conditions",
        metavar="DATA",
        help="play the condition grid of this dataset folder instead of the paper's 15",
    )
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_evaluate)

    p = sub.add_parser("gepa", help="GEPA prompt optimisation against R_game (gepa extra)")
    p.add_argument("--model", required=True)
    p.add_argument("--adapter")
    p.add_argument("--out", required=True)
    p.add_argument("--num-agents", type=int, default=2)
    p.add_argument("--train-episodes", type=positive_int, default=64)
    p.add_argument("--val-episodes", type=positive_int, default=32)
    p.add_argument("--test-episodes", type=positive_int, default=64)
    p.add_argument("--max-metric-calls", type=positive_int, default=6000)
    p.add_argument("--minibatch", type=positive_int, default=5, help="reflection minibatch size")
    add_model_arguments(p, GEPA_GENERATE, SAMPLING)
    p.add_argument("--reflection-model", help="reflection LM folder (default: --model)")
    p.add_argument("--seed", type=seed_int, default=0)
    p.set_defaults(func=_cmd_gepa)
