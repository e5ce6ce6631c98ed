"""What SFT and RLOO share: LoRA settings, model loading, precision, checkpoints and logging.

A run writes into one output folder::

    <out>/checkpoint-<step>/   Trainer checkpoints: adapter, optimizer, scheduler, RNG, state
    <out>/adapter/             the final adapter (``adapter_config.json``, ``adapter_model.*``)
                               and the tokenizer, loadable with ``PeftModel.from_pretrained``
    <out>/settings.json        the settings the run was started with, and its launch
                               (process count, accelerate's distributed type)

Starting the same command again on the same folder resumes from the newest checkpoint (the
Trainer restores optimizer, scheduler, RNG and the data position), unless ``resume=False``.
Under ``accelerate launch`` every process trains; the main one alone writes ``settings.json``,
the adapter and the tokenizer (the Trainer writes checkpoints the same way, each process adding
its own RNG state), and the others wait for those files before going on (``sft-rloo`` reads the
SFT adapter next). See docs/finetune_distributed.md.
torch, transformers and peft (the optional ``llm`` extra) are imported inside the functions that
load or train a model, so the settings import without them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from dilemmax.errors import UsageError
from dilemmax.finetune import processes
from dilemmax.finetune.checks import check_adapter, check_model, read_records
from dilemmax.llm.hf_client import LOAD_ERRORS, load_failure


@dataclass(frozen=True)
class LoraSettings:
    """LoRA of the paper (rank 16, alpha 32, dropout 0.05).

    ``target_modules="all-linear"`` adapts every linear layer of the blocks (the paper does not
    name its targets; PEFT's per-architecture default, the attention q/v projections only, gives
    a small model too little to learn with).

    ``modules_to_save`` trains whole copies of the named modules beside the adapter (saved
    with it). Real models need none; a randomly initialised tiny model does: with its output
    layer and norms frozen at their small random scale, LoRA alone can rank the right token
    first but never make it likely, so sampling (RLOO, T = 1) stays near uniform. The CPU demo
    trains ``lm_head`` (a copy, untied from the input embedding) and ``norm`` (every RMSNorm:
    PEFT matches each module whose name ends in it).
    """

    r: int = 16
    alpha: int = 32
    dropout: float = 0.05
    target_modules: str | tuple[str, ...] = "all-linear"
    modules_to_save: tuple[str, ...] = ()

    def peft_config(self):
        from peft import LoraConfig  # optional llm extra

        targets = self.target_modules
        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=targets if isinstance(targets, str) else list(targets),
            modules_to_save=list(self.modules_to_save) or None,
            task_type="CAUSAL_LM",
        )


@dataclass(frozen=True)
class RunSettings:
    """Settings every method shares.

    Attributes:
        model: a local folder or hub id of a causal LM (``AutoModelForCausalLM``).
        data: a dataset folder written by ``dilemmax finetune data`` (or a JSONL file).
        out: the run's output folder.
        adapter: start from this LoRA adapter instead of a fresh one (SFT -> RLOO).
        max_steps, learning_rate, batch_size, grad_accum, warmup_steps, seed: optimisation.
        save_steps: checkpoint every this many steps (and at the end).
        logging_steps: log every this many steps.
        resume: continue from the newest checkpoint in ``out`` when there is one.
        wandb: log to Weights & Biases (project ``wandb_project``); off by default.
        precision: "auto" (bf16 where the accelerator has it, else fp32), "bf16" or "fp32".
        gradient_checkpointing: "auto" (on with an accelerator, off on CPU), or True / False.
        max_train_records: use only the first this many training records (0: all).
        overrides: any other field of TRL's config (``--set name=value`` on the CLI).
    """

    model: str
    data: str
    out: str
    adapter: str | None = None
    max_steps: int = 2000
    learning_rate: float = 2e-4
    batch_size: int = 2
    grad_accum: int = 8
    warmup_steps: int = 20
    seed: int = 0
    save_steps: int = 200
    logging_steps: int = 10
    resume: bool = True
    wandb: bool = False
    wandb_project: str = "dilemmax-finetune"
    precision: str = "auto"
    gradient_checkpointing: Any = "auto"
    max_train_records: int = 0
    lora: LoraSettings = field(default_factory=LoraSettings)
    overrides: dict[str, Any] = field(default_factory=dict)


def has_accelerator() -> bool:
    import torch  # optional llm extra

    return torch.cuda.is_available()


def use_bf16(precision: str) -> bool:
    """Whether to train in bf16: asked for, or "auto" on a device that supports it."""
    import torch  # optional llm extra

    if precision not in ("auto", "bf16", "fp32"):
        raise ValueError(f"precision must be auto, bf16 or fp32, got {precision!r}")
    if precision == "auto":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return precision == "bf16"


def trainer_arguments(settings: RunSettings) -> dict[str, Any]:
    """The TrainingArguments fields both trainers take from the shared settings."""
    checkpointing = settings.gradient_checkpointing
    if checkpointing == "auto":  # on a GPU, unless FSDP checkpoints the activations itself
        checkpointing = has_accelerator() and not processes.fsdp_checkpoints_activations()
    report_to = ["wandb"] if settings.wandb else "none"
    args = {
        "output_dir": settings.out,
        "max_steps": settings.max_steps,
        "learning_rate": settings.learning_rate,
        "per_device_train_batch_size": settings.batch_size,
        "gradient_accumulation_steps": settings.grad_accum,
        "warmup_steps": settings.warmup_steps,
        "seed": settings.seed,
        "data_seed": settings.seed,
        "save_strategy": "steps",
        "save_steps": settings.save_steps,
        "logging_steps": settings.logging_steps,
        "bf16": use_bf16(settings.precision),
        "fp16": False,
        "gradient_checkpointing": bool(checkpointing),
        "report_to": report_to,
        "run_name": Path(settings.out).name,
        "disable_tqdm": False,
        # Several processes without a GPU: DDP over gloo. Without this the Trainer would see no
        # distributed device and each process would train alone on the whole data.
        "use_cpu": processes.is_launched() and not has_accelerator(),
    }
    args.update(settings.overrides)
    return args


def trainer_config(config_class, **arguments):
    """TRL's ``config_class`` built from ``arguments``; what it refuses (a batch that does not
    divide into the generations of a prompt on this many processes, a field of the wrong type)
    is a one-line UsageError naming the class, before any model loads."""
    try:
        return config_class(**arguments)
    except (ValueError, TypeError) as err:
        reason = " ".join(str(err).split())
        message = f"TRL's {config_class.__name__} refuses these settings: {reason}"
        raise UsageError(message) from None


def configure_wandb(settings: RunSettings) -> None:
    if settings.wandb:
        os.environ.setdefault("WANDB_PROJECT", settings.wandb_project)


def load_model(name: str, adapter: str | None = None, trainable: bool = True, precision="auto"):
    """(model, tokenizer): the causal LM at ``name``, with the LoRA ``adapter`` on top if given.

    Both folders are checked first, and what transformers or PEFT still refuse is a one-line
    :class:`~dilemmax.llm.hf_client.ModelFolderError` naming the folder.
    """
    import torch  # optional llm extra
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_model(name)
    check_adapter(adapter)
    dtype = torch.bfloat16 if use_bf16(precision) else torch.float32
    try:
        tokenizer = AutoTokenizer.from_pretrained(adapter or name)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype)
    except LOAD_ERRORS as err:
        raise load_failure("--model", name, err) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    device = model_device()
    if device is not None:
        model = model.to(device)
    if adapter:
        from peft import PeftModel  # optional llm extra

        try:
            model = PeftModel.from_pretrained(model, adapter, is_trainable=trainable)
        except LOAD_ERRORS as err:
            raise load_failure("--adapter", adapter, err) from None
    return model, tokenizer


def model_device() -> str | None:
    """Where a loaded model goes: this process's GPU (``cuda:<LOCAL_RANK>``, so the processes of a
    launch do not all fill GPU 0), or None (stay on the CPU it loaded to) without a GPU or when
    FSDP / DeepSpeed will shard and place the weights themselves."""
    if not has_accelerator() or processes.sharding_wrapper():
        return None
    return f"cuda:{processes.local_rank()}"


def check_lora_modules(model, lora: LoraSettings) -> None:
    """Raises UsageError naming every --lora-targets / --lora-save name that matches no module
    of ``model``, before a trainer is built around it. The matches are PEFT's: a target is the
    last part of a module's dotted path, a module to save any ending of it (``norm`` saves
    every ``*norm``)."""
    paths = [name for name, _ in model.named_modules() if name]
    matches = {
        "--lora-targets": (lora.target_modules, lambda p, w: p == w or p.endswith(f".{w}")),
        "--lora-save": (lora.modules_to_save, lambda p, w: p.endswith(w)),
    }
    for option, (wanted, match) in matches.items():
        if isinstance(wanted, str):  # "all-linear": PEFT's own choice
            continue
        missing = [w for w in wanted if not any(match(p, w) for p in paths)]
        if missing:
            leaves = sorted({p.rsplit(".", 1)[-1] for p in paths} - set(map(str, range(999))))
            raise UsageError(
                f"{option}: the model has no module {', '.join(missing)} "
                f"(its module names include {', '.join(leaves[:20])})"
            )


def last_checkpoint(out: str | Path) -> str | None:
    """The newest ``checkpoint-<step>`` folder in ``out``, or None."""
    from transformers.trainer_utils import get_last_checkpoint  # optional llm extra

    out = Path(out)
    return get_last_checkpoint(str(out)) if out.is_dir() else None


def run_trainer(trainer, settings: RunSettings, tokenizer) -> Path:
    """Trains (resuming when asked and possible), then saves the final adapter; returns it.

    Every process of a launch calls this; the main one writes the run's own files, and all of
    them call ``save_model`` (FSDP and DeepSpeed gather the sharded weights in it; the Trainer
    writes on the main process only) and then wait until the adapter is complete."""
    out = Path(settings.out)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint = last_checkpoint(out) if settings.resume else None
    check_world(trainer)
    if processes.is_main_process():
        warn_on_changed_launch(out, checkpoint)
        record = run_record(settings, trainer)
        (out / "settings.json").write_text(json.dumps(record, indent=2, default=str))
    trainer.train(resume_from_checkpoint=checkpoint)
    adapter_dir = out / "adapter"
    if trainer.is_fsdp_enabled:  # one ordinary PEFT folder, not one shard per process
        trainer.accelerator.state.fsdp_plugin.set_state_dict_type("FULL_STATE_DICT")
    trainer.save_model(str(adapter_dir))
    if trainer.is_world_process_zero():
        tokenizer.save_pretrained(str(adapter_dir))
    trainer.accelerator.wait_for_everyone()  # the adapter is read next (sft-rloo, the caller)
    return adapter_dir


def check_world(trainer) -> None:
    """Raises UsageError unless the Trainer trains on as many processes as the launch started:
    a launch the Trainer does not recognise would train every process alone, each on all of the
    data, and write the same files from all of them."""
    launched, training = processes.world_size(), trainer.args.world_size
    if launched != training:
        raise UsageError(
            f"the launch started {launched} processes (WORLD_SIZE) but the Trainer trains on "
            f"{training} (distributed type {trainer.accelerator.distributed_type}); check the "
            "accelerate config (docs/finetune_distributed.md)"
        )
    wrapper = processes.sharding_wrapper()
    if wrapper == "fsdp" and not trainer.is_fsdp_enabled:  # accelerate's choice without a GPU
        processes.main_print(
            f"the launch asks for FSDP; accelerate runs {trainer.accelerator.distributed_type} "
            "here (FSDP needs GPUs): every process holds the whole model"
        )


def run_record(settings: RunSettings, trainer) -> dict[str, Any]:
    """What ``settings.json`` holds: the settings and the launch they were trained under, as
    the Trainer runs it (process count; accelerate's distributed type: NO, MULTI_CPU,
    MULTI_GPU, FSDP, DEEPSPEED)."""
    kind = trainer.accelerator.distributed_type
    kind = getattr(kind, "value", kind)  # the enum's name as text
    return {
        **asdict(settings),
        "launch": {"processes": trainer.args.world_size, "distributed_type": kind},
    }


def warn_on_changed_launch(out: Path, checkpoint: str | None) -> None:
    """A resume under another process count is allowed (the Trainer restores the step, the
    optimizer and the schedule), but the global batch changes with it: said in one line."""
    try:
        before = json.loads((out / "settings.json").read_text()).get("launch", {})
    except (OSError, ValueError, AttributeError):
        return
    now = processes.world_size()
    if checkpoint and isinstance(before, dict) and before.get("processes", 1) != now:
        print(
            f"resuming {checkpoint} on {now} processes (it was trained on "
            f"{before.get('processes', 1)}): the global batch changes with the process count"
        )


def training_records(
    settings: RunSettings, need: Sequence[str], split: str = "train"
) -> list[dict[str, Any]]:
    """The ``split`` records of ``settings.data``, each checked for the fields ``need`` (a
    one-line :class:`~dilemmax.finetune.checks.DatasetError` naming the file and line
    otherwise); read before any model is loaded."""
    records = read_records(settings.data, split, need)
    if settings.max_train_records:
        records = records[: settings.max_train_records]
    return records


def check_config_fields(config_class, settings: RunSettings) -> None:
    """Raises UsageError unless every ``--set`` name is a field of TRL's ``config_class``: an
    unknown one would otherwise fail inside TRL after the model is loaded."""
    known = {f.name for f in fields(config_class)}
    unknown = sorted(set(settings.overrides) - known)
    if unknown:
        raise UsageError(
            f"--set {', '.join(unknown)}: not a field of TRL's {config_class.__name__} "
            "(see its documentation for the names)"
        )
