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

from dilemmax.commandline import (
    parse_assignments,
    positive_int,
    seed_int,
    user_input,
)
from dilemmax.envs.moral_hazard import constants as c
from dilemmax.finetune.arguments import (
    add_rloo_args,
    add_run_args,
    floats,
    ints,
    name_list,
    positive,
)
from dilemmax.finetune.checks import (
    RLOO_FIELDS,
    SFT_FIELDS,
    read_records,
)
from dilemmax.finetune.command_checks import (
    check_output_folder,
    check_run,
    protocol_options,
    set_threads,
)
from dilemmax.finetune.common import LoraSettings
from dilemmax.finetune.datasets import (
    DatasetSpec,
    save_dataset,
    sft_grid,
)
from dilemmax.finetune.processes import main_print, refuse_launch
from dilemmax.finetune.rloo import RLOOSettings, check_vllm, train_rloo
from dilemmax.finetune.scoring_cli import add_scoring_commands
from dilemmax.finetune.sft import SFTSettings, train_sft
from dilemmax.llm.tiny import build_tiny_model


# ----------------------------------------------------------------------------- data
def _cmd_data(args) -> int:
    refuse_launch("data")
    check_output_folder(args.out, "OUT")
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
            protocol_options=protocol_options(parse_assignments(args.protocol, "--protocol")),
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
    check_output_folder(args.out, "OUT")
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
    check_run(args.model, args.adapter, args.out)
    set_threads(args.threads)
    adapter = train_sft(_run_settings(args, SFTSettings, max_length=args.max_length))
    main_print(f"SFT adapter: {adapter}")
    return 0


def _cmd_rloo(args) -> int:
    check_run(args.model, args.adapter, args.out)
    set_threads(args.threads)
    settings = _run_settings(args, RLOOSettings, **_rloo_fields(args))
    check_vllm(settings)
    adapter = train_rloo(settings)
    main_print(f"RLOO adapter: {adapter}")
    return 0


def _cmd_sft_rloo(args) -> int:
    """SFT for --sft-steps, then RLOO for --rloo-steps from that adapter (in <out>/sft, /rloo)."""
    check_run(args.model, args.adapter, args.out)
    read_records(args.data, "train", RLOO_FIELDS)  # RLOO's records, before SFT's hours
    set_threads(args.threads)
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

    add_scoring_commands(sub)
