"""``dilemmax finetune ...``: data, tiny-model, sft, rloo, sft-rloo, reward, evaluate, gepa.

Every default is the paper's (Appendix B) and every one can be overridden here; ``--set
name=value`` reaches any other field of TRL's config. A command that trains resumes from the
newest checkpoint in ``--out`` unless ``--no-resume``.

``sft``, ``rloo`` and ``sft-rloo`` run unchanged under ``accelerate launch`` (one process per
device: DDP, FSDP or DeepSpeed by the launch's config); every process checks the same inputs,
the main one alone writes and prints. The other commands run in one process and say so when
launched on several (docs/finetune_distributed.md).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from dilemmax.commandline import (
    output_file,
    output_folder,
    parse_assignments,
    positive_int,
    seed_int,
    user_input,
)
from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard.env import MoralHazardEnv
from dilemmax.errors import UsageError
from dilemmax.finetune.arguments import (
    add_rloo_args,
    add_run_args,
    floats,
    ints,
    name_list,
    nonnegative,
    nonnegative_int,
    positive,
)
from dilemmax.finetune.checks import (
    RLOO_FIELDS,
    SFT_FIELDS,
    check_adapter,
    check_model,
    read_records,
    read_spec,
)
from dilemmax.finetune.common import LoraSettings
from dilemmax.finetune.datasets import (
    DatasetSpec,
    paper_protocol_options,
    save_dataset,
    sft_grid,
)
from dilemmax.finetune.evaluate import (
    evaluate_methods,
    evaluate_seats,
    paired_difference,
    reward_on_records,
    table3,
    write_report,
)
from dilemmax.finetune.gepa import GEPASettings, optimize_prompts
from dilemmax.finetune.processes import is_launched, main_print, refuse_launch
from dilemmax.finetune.rloo import RLOOSettings, check_vllm, train_rloo
from dilemmax.finetune.sft import SFTSettings, train_sft
from dilemmax.llm.seats import (
    MODEL_KINDS,
    SEAT_OPTIONS,
    add_model_arguments,
    build_seat,
    check_specs,
)
from dilemmax.llm.tiny import build_tiny_model


def _protocol_options(args, data: str | None = None, option: str = "--conditions") -> dict:
    """Text-protocol options: the dataset's (``data``) or else the paper's SFT variant, with each
    ``--protocol key=value`` laid over them (``--protocol brief=true`` keeps the rest); checked
    by building the game's protocol with them."""
    base = dict(read_spec(data, option).protocol_options) if data else paper_protocol_options()
    options = {**base, **parse_assignments(args.protocol, "--protocol")}
    with user_input("--protocol"):
        MoralHazardEnv(2).text_protocol(**options)
    return options


def _check_run(args) -> None:
    """What a training or scoring command reads from elsewhere, checked before any model loads:
    the model and adapter folders and the --out folder."""
    check_model(args.model)
    check_adapter(args.adapter)
    if getattr(args, "out", None):
        _check_output_folder(args.out, "--out")


def _check_output_folder(path: str, option: str) -> None:
    """The folder a command will write, checked now (a file in the way, a place nobody can
    write); made only to check it, so a command that fails before writing leaves nothing. Under
    a launch it stays: the other processes check it at the same time (a probe file of theirs
    may be inside), and the run fills it next."""
    folder, created = output_folder(path, option)
    if created and not is_launched():
        folder.rmdir()


# ----------------------------------------------------------------------------- data
def _cmd_data(args) -> int:
    refuse_launch("data")
    _check_output_folder(args.out, "OUT")
    with user_input("the condition grid"):
        spec = DatasetSpec(
            seed=args.seed,
            episodes_per_condition=args.episodes,
            costs=args.costs,
            team_weights=args.team_weights,
            num_agents=args.num_agents,
            provenances=args.provenances,
            mapping=args.mapping,
            fractions=args.fractions,
            protocol_options=_protocol_options(args),
        )
        sft_grid(spec)  # every condition's costs, weights, provenance and mapping, checked now
    paths = save_dataset(spec, args.out, progress=not args.no_progress)
    counts = json.loads((Path(args.out) / "spec.json").read_text())["counts"]
    for split, path in paths.items():
        print(f"{split:10s} {counts[split]:7d} records  {path}")
    return 0


def _cmd_tiny(args) -> int:
    refuse_launch("tiny-model")
    records = read_records(args.data, "train", SFT_FIELDS)[:: args.text_stride]
    _check_output_folder(args.out, "OUT")
    texts = [m["content"] for r in records for m in r["prompt"] + r["completion"]]
    path = build_tiny_model(
        args.out,
        texts=texts,
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        num_layers=args.layers,
        seed=args.seed,
    )
    print(f"tiny model: {path} (tokenizer trained on {len(texts)} texts)")
    return 0


# ------------------------------------------------------------------------- training
def _run_settings(args, cls, prefix: str = "", **fields):
    targets = args.lora_targets
    lora = LoraSettings(
        r=args.lora_r,
        alpha=args.lora_alpha,
        dropout=args.lora_dropout,
        target_modules=targets if targets == "all-linear" else name_list(targets),
        modules_to_save=tuple(args.lora_save),
    )
    checkpointing = {"auto": "auto", "on": True, "off": False}[args.grad_checkpointing]
    return cls(
        model=args.model,
        data=args.data,
        out=str(Path(args.out) / prefix) if prefix else args.out,
        adapter=args.adapter,
        max_steps=args.steps,
        learning_rate=args.lr,
        batch_size=args.batch,
        grad_accum=args.accum,
        warmup_steps=args.warmup,
        seed=args.seed,
        save_steps=args.save_steps,
        logging_steps=args.logging_steps,
        resume=not args.no_resume,
        wandb=args.wandb,
        wandb_project=args.wandb_project,
        precision=args.precision,
        gradient_checkpointing=checkpointing,
        max_train_records=args.max_records,
        lora=lora,
        overrides=parse_assignments(args.set, "--set"),
        **fields,
    )


def _threads(args) -> None:
    if args.threads:
        import torch  # of the optional llm extra, which only the training commands need

        torch.set_num_threads(args.threads)


def _rloo_fields(args) -> dict:
    return {
        "num_generations": args.generations,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "beta": args.beta,
        "max_completion_length": args.max_completion,
        "vllm": args.vllm,
        "vllm_server": args.vllm_server,
    }


def _cmd_sft(args) -> int:
    _check_run(args)
    _threads(args)
    adapter = train_sft(_run_settings(args, SFTSettings, max_length=args.max_length))
    main_print(f"SFT adapter: {adapter}")
    return 0


def _cmd_rloo(args) -> int:
    _check_run(args)
    _threads(args)
    settings = _run_settings(args, RLOOSettings, **_rloo_fields(args))
    check_vllm(settings)
    adapter = train_rloo(settings)
    main_print(f"RLOO adapter: {adapter}")
    return 0


def _cmd_sft_rloo(args) -> int:
    """SFT for --sft-steps, then RLOO for --rloo-steps from that adapter (in <out>/sft, /rloo)."""
    _check_run(args)
    read_records(args.data, "train", RLOO_FIELDS)  # RLOO's records, before SFT's hours
    _threads(args)
    rloo = _run_settings(args, RLOOSettings, prefix="rloo", **_rloo_fields(args))
    check_vllm(rloo)  # RLOO's generation options, before SFT's hours too
    sft = _run_settings(args, SFTSettings, prefix="sft", max_length=args.max_length)
    sft = replace(sft, max_steps=args.sft_steps)
    adapter = train_sft(sft)
    rloo = replace(
        rloo,
        max_steps=args.rloo_steps,
        adapter=str(adapter),
        learning_rate=args.rloo_lr,
        batch_size=args.rloo_batch,
        grad_accum=args.rloo_accum,
    )
    final = train_rloo(rloo)
    main_print(f"SFT adapter: {adapter}\nSFT+RLOO adapter: {final}")
    return 0


# ------------------------------------------------------------------------ evaluation
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
    _threads(args)
    baseline = _read_json(args.baseline, "--baseline") if args.baseline else None
    records = read_records(args.data, args.split, RLOO_FIELDS)
    _check_run(args)
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


def _methods(specs) -> dict[str, str | None]:
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
        methods = _methods(args.adapter)
    except SystemExit as err:  # _methods' own callers expect SystemExit
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
    _threads(args)
    methods = _evaluated_methods(args)
    specs = _method_specs(args, methods)
    if not methods and not specs:
        raise UsageError("give --model (with any --adapter) or --method NAME=<model seat spec>")
    grid = None
    if args.conditions:
        spec = read_spec(args.conditions, "--conditions")
        with user_input(f"--conditions {args.conditions}"):
            grid = sft_grid(spec)
    protocol_options = _protocol_options(args, args.conditions)
    _check_output_folder(args.out, "--out")
    options = {
        "num_episodes": args.episodes,
        "seed": args.seed,
        "protocol_options": protocol_options,
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
    _check_run(args)
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
def add_commands(subparsers) -> None:
    top = subparsers.add_parser("finetune", help="LoRA SFT / RLOO / GEPA for moral_hazard")
    sub = top.add_subparsers(dest="finetune_command", required=True)

    p = sub.add_parser("data", help="teacher demonstrations over the SFT condition grid")
    p.add_argument("out", help="dataset folder to write")
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument("--episodes", type=positive_int, default=21, help="episodes per condition")
    p.add_argument("--costs", type=floats, default=c.GRID_COSTS)
    p.add_argument("--team-weights", type=floats, default=c.GRID_TEAM_WEIGHTS)
    p.add_argument("--num-agents", type=ints, default=c.GRID_NUM_AGENTS)
    p.add_argument("--provenances", type=name_list, default=("anonymous", "visible"))
    p.add_argument("--mapping", default="highest")
    p.add_argument(
        "--fractions",
        type=floats,
        default=(0.8, 0.1, 0.1),
        help="train,validation,heldout shares of each condition's episodes",
    )
    p.add_argument(
        "--protocol",
        action="append",
        help="text protocol option key=value, laid over the paper's SFT variant (e.g. brief=true)",
    )
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=_cmd_data)

    p = sub.add_parser("tiny-model", help="a tiny causal LM with a tokenizer fit to a dataset")
    p.add_argument("out")
    p.add_argument("--data", required=True)
    p.add_argument("--vocab", type=positive_int, default=1024)
    p.add_argument("--hidden", type=positive_int, default=64)
    p.add_argument("--layers", type=positive_int, default=2)
    p.add_argument("--seed", type=seed_int, default=0)
    p.add_argument(
        "--text-stride", type=positive_int, default=10, help="use every k-th train record"
    )
    p.set_defaults(func=_cmd_tiny)

    sft_defaults = SFTSettings(model="", data="", out="")
    rloo_defaults = RLOOSettings(model="", data="", out="")

    p = sub.add_parser("sft", help="LoRA SFT on the teacher's demonstrations (TRL)")
    add_run_args(p, sft_defaults)
    p.add_argument("--max-length", type=positive_int, default=sft_defaults.max_length)
    p.set_defaults(func=_cmd_sft)

    p = sub.add_parser("rloo", help="RLOO on the target-action reward (TRL)")
    add_run_args(p, rloo_defaults)
    add_rloo_args(p, rloo_defaults)
    p.set_defaults(func=_cmd_rloo)

    p = sub.add_parser("sft-rloo", help="SFT, then RLOO from the SFT adapter")
    add_run_args(p, sft_defaults)
    add_rloo_args(p, rloo_defaults)
    p.add_argument("--max-length", type=positive_int, default=sft_defaults.max_length)
    p.add_argument("--sft-steps", type=positive_int, default=1000)
    p.add_argument("--rloo-steps", type=positive_int, default=1000)
    p.add_argument("--rloo-lr", type=positive, default=rloo_defaults.learning_rate)
    p.add_argument("--rloo-batch", type=positive_int, default=rloo_defaults.batch_size)
    p.add_argument("--rloo-accum", type=positive_int, default=rloo_defaults.grad_accum)
    p.set_defaults(func=_cmd_sft_rloo)

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
