"""``dilemmax finetune reward``, ``evaluate`` and ``gepa``: scoring base models, adapters and any
model seat (``openai:``, ``inspect:``, ``hf:``) in one process."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from dilemmax.commandline import output_file, positive_int, seed_int, user_input
from dilemmax.envs.memory import check_waves_fit
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.envs.moral_hazard.generator import condition_grid
from dilemmax.errors import UsageError
from dilemmax.finetune.arguments import nonnegative, nonnegative_int
from dilemmax.finetune.checks import (
    RLOO_FIELDS,
    check_adapter,
    check_model,
    read_records,
    read_spec,
)
from dilemmax.finetune.command_checks import (
    check_output_folder,
    check_run,
    protocol_options,
    set_threads,
)
from dilemmax.finetune.datasets import sft_grid
from dilemmax.finetune.evaluate import (
    evaluate_methods,
    evaluate_seats,
    paired_difference,
    reward_on_records,
    table3,
    write_report,
)
from dilemmax.finetune.gepa import GEPASettings, optimize_prompts
from dilemmax.finetune.processes import refuse_launch
from dilemmax.llm.seats import (
    MODEL_KINDS,
    SEAT_OPTIONS,
    add_model_arguments,
    build_seat,
    check_specs,
)


def _read_json(path: str, what: str) -> dict:
    try:
        value = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise UsageError(f"{what} {path}: {error}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{what} {path}: expected a JSON object")
    return value


def _cmd_reward(args) -> int:
    refuse_launch("reward")
    set_threads(args)
    baseline = _read_json(args.baseline, "--baseline") if args.baseline else None
    records = read_records(args.data, args.split, RLOO_FIELDS)
    check_run(args)
    if args.json:
        output_file(args.json, "--json")
    if args.max_records and len(records) > args.max_records:  # evenly spaced over the grid
        picks = np.linspace(0, len(records) - 1, args.max_records).round().astype(int)
        records = [records[i] for i in picks]
    if baseline is not None:
        _check_baseline(baseline, args, len(records))
    means = reward_on_records(
        args.model,
        args.adapter,
        records,
        max_new_tokens=args.max_tokens,
        temperature=args.temperature,
        seed=args.seed,
        batch_size=args.batch,
        samples=args.samples,
    )
    row = {
        "model": args.model,
        "adapter": args.adapter,
        "split": args.split,
        "records": len(records),
        "temperature": args.temperature,
        **means,
    }
    if baseline is not None:
        row["vs_baseline"] = {"baseline": args.baseline, **paired_difference(row, baseline)}
    print(json.dumps({k: v for k, v in row.items() if k != "per_prompt"}, indent=2))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(row, indent=2))
    return 0


def _check_baseline(baseline: dict, args, count: int) -> None:
    """Raises UsageError unless the --baseline result scored the records this run will score
    (checked before the model is loaded, not after the scoring)."""
    if baseline.get("split") != args.split or baseline.get("records") != count:
        scored = f"{baseline.get('records')} {baseline.get('split')}"
        raise UsageError(
            f"--baseline {args.baseline} scored {scored} records; this run scores "
            f"{count} {args.split} records"
        )
    per_prompt = baseline.get("per_prompt")
    if not (
        isinstance(per_prompt, list)
        and len(per_prompt) == count
        and all(isinstance(x, int | float) and not isinstance(x, bool) for x in per_prompt)
    ):
        raise UsageError(
            f"--baseline {args.baseline}: 'per_prompt' must list {count} rewards, one per record "
            "(a --json result of `dilemmax finetune reward`)"
        )


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


def _evaluated_methods(args) -> dict[str, str | None]:
    """The base model and each --adapter (none without --model), every folder checked before
    the first is played."""
    if not args.model:
        if args.adapter:
            raise UsageError("--adapter needs --model (the base model it adapts)")
        return {}
    try:
        methods = adapter_methods(args.adapter)
    except SystemExit as err:  # adapter_methods' own callers expect SystemExit
        raise UsageError(str(err)) from None
    check_model(args.model, local=True)  # played through the local transformers client
    for name, folder in methods.items():
        check_adapter(folder, f"--adapter ({name})")
    return methods


def _method_specs(args, taken) -> dict[str, str]:
    """name -> model seat spec of each ``--method NAME=SPEC``, every spec checked by the seat
    parser (kind, options and ranges, folders, API keys) before anything is played."""
    specs: dict[str, str] = {}
    for entry in args.method or []:
        name, sep, spec = (x.strip() for x in entry.partition("="))
        if not sep or not name or not spec:
            raise UsageError(f"--method expects NAME=<kind>:<target>, got {entry!r}")
        if name in specs or name in taken:
            raise UsageError(f"--method {entry!r}: the name {name!r} is given twice")
        kind = spec.partition(":")[0].strip()
        if kind in SEAT_OPTIONS and kind not in MODEL_KINDS:
            kinds = ", ".join(f"{k}:" for k in MODEL_KINDS)
            raise UsageError(f"--method {entry!r}: evaluate plays model seats ({kinds})")
        specs[name] = spec
    check_specs(MoralHazardEnv(2), specs, None, args)
    return specs


def _cmd_evaluate(args) -> int:
    refuse_launch("evaluate")
    set_threads(args)
    methods = _evaluated_methods(args)
    specs = _method_specs(args, methods)
    if not methods and not specs:
        raise UsageError("give --model (with any --adapter) or --method NAME=<model seat spec>")
    grid = None
    if args.conditions:
        spec = read_spec(args.conditions, "--conditions")
        with user_input(f"--conditions {args.conditions}"):
            grid = sft_grid(spec)
    protocol = protocol_options(args, args.conditions)
    conditions = condition_grid() if grid is None else grid  # each method plays them in turn
    episodes = sum(len(s) for s in conditions.values()) * args.episodes
    what = "finetune evaluate"
    check_waves_fit(MoralHazardEnv(2), args.envs, episodes, what, "--envs or --episodes")
    check_output_folder(args.out, "--out")
    options = {
        "num_episodes": args.episodes,
        "seed": args.seed,
        "protocol_options": protocol,
        "num_envs": args.envs,
        "progress": not args.no_progress,
        "grid": grid,
    }
    results = evaluate_methods(
        args.model, methods, max_new_tokens=args.max_tokens, temperature=args.temperature,
        batch_size=args.batch, **options,
    ) if methods else {}  # fmt: skip
    cache: dict = {}
    seats = {name: build_seat(spec, MoralHazardEnv(2), args, cache) for name, spec in specs.items()}
    results.update(evaluate_seats(seats, **options))
    base = "base" if "base" in results else next(iter(results))
    paths = write_report(results, args.out, base)
    print(table3(results, base))
    print("\n".join(f"{k}: {v}" for k, v in paths.items()))
    return 0


def _cmd_gepa(args) -> int:
    refuse_launch("gepa")
    check_model(args.model, local=True)  # played through the local transformers client
    check_run(args)
    if args.reflection_model:
        check_model(args.reflection_model, "--reflection-model", local=True)
    settings = GEPASettings(
        model=args.model,
        adapter=args.adapter,
        out=args.out,
        train_episodes=args.train_episodes,
        val_episodes=args.val_episodes,
        test_episodes=args.test_episodes,
        max_metric_calls=args.max_metric_calls,
        minibatch_size=args.minibatch,
        temperature=args.temperature,
        max_new_tokens=args.max_tokens,
        seed=args.seed,
        reflection_model=args.reflection_model,
        num_agents=args.num_agents,
    )
    result = optimize_prompts(settings)
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
    p.add_argument("--max-tokens", type=positive_int, default=128)
    p.add_argument("--temperature", type=nonnegative, default=1.0)
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
        "evaluate",
        help="base vs adapters, or any model seats, on the 15-condition grid (Table 3)",
        conflict_handler="resolve",  # this command's --temperature / --max-tokens defaults win
    )
    add_model_arguments(p)  # the flags --method seats read (--base-url, --top-p, ...)
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
    p.add_argument("--max-tokens", type=positive_int, default=128)
    p.add_argument("--temperature", type=nonnegative, default=0.0)
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
    p.add_argument("--temperature", type=nonnegative, default=1.0)
    p.add_argument("--max-tokens", type=positive_int, default=512)
    p.add_argument("--reflection-model", help="reflection LM folder (default: --model)")
    p.add_argument("--seed", type=seed_int, default=0)
    p.set_defaults(func=_cmd_gepa)
