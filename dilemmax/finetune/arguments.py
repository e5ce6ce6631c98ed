"""The argument types and shared options of ``dilemmax finetune``: every count, rate and
learning rate is checked by its type, so a NaN or a zero is refused by argparse in one line
before anything loads, instead of training on it."""

from __future__ import annotations

import argparse
import math

from dilemmax.commandline import positive_int, seed_int
from dilemmax.envs.option_spec import INT32_MAX, Range


def comma_list(cast, what: str):
    """An argparse type: ``"a,b,c"`` -> a tuple of ``cast`` values, or an error naming ``what``."""

    def parse(text: str) -> tuple:
        try:
            return tuple(cast(x) for x in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated {what}, got {text!r}"
            ) from None

    return parse


floats = comma_list(float, "numbers")
ints = comma_list(int, "integers")


def number(allowed: Range):
    """An argparse type: a finite number in the range ``allowed``, else an error naming the range
    (a NaN learning rate would otherwise train on, silently)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and allowed.admits(value)):
            raise argparse.ArgumentTypeError(f"must be {allowed.describe()}, got {text!r}")
        return value

    return parse


def nonnegative_int(text: str) -> int:
    """argparse type of a count that may be 0 (0 meaning "all" or "none"), at most INT32_MAX
    (torch and the trainers keep counts in 32 bits)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= INT32_MAX:
        raise argparse.ArgumentTypeError(f"must be an integer in 0..{INT32_MAX}, got {text!r}")
    return value


positive = number(Range("float", 0.0, low_open=True))
nonnegative = number(Range("float", 0.0))
top_p = number(Range("float", 0.0, 1.0, low_open=True))
dropout = number(Range("float", 0.0, 1.0, high_open=True))


def generations(text: str) -> int:
    """argparse type of RLOO's K: each sample's baseline is the mean of the other K - 1."""
    value = positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(
            f"must be at least 2 (a leave-one-out baseline), got {text!r}"
        )
    return value


def name_list(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def add_run_args(p, defaults) -> None:
    p.add_argument("--model", required=True, help="local folder or hub id of a causal LM")
    p.add_argument("--data", required=True, help="dataset folder (dilemmax finetune data)")
    p.add_argument("--out", required=True, help="run folder (checkpoints, adapter/)")
    p.add_argument("--adapter", help="start from this LoRA adapter folder")
    p.add_argument("--steps", type=positive_int, default=defaults.max_steps)
    p.add_argument("--lr", type=positive, default=defaults.learning_rate)
    p.add_argument(
        "--batch", type=positive_int, default=defaults.batch_size, help="per-device batch"
    )
    p.add_argument(
        "--accum", type=positive_int, default=defaults.grad_accum, help="gradient accumulation"
    )
    p.add_argument("--warmup", type=nonnegative_int, default=defaults.warmup_steps)
    p.add_argument("--seed", type=seed_int, default=defaults.seed)
    p.add_argument("--save-steps", type=positive_int, default=defaults.save_steps)
    p.add_argument("--logging-steps", type=positive_int, default=defaults.logging_steps)
    p.add_argument(
        "--max-records", type=nonnegative_int, default=0, help="use the first N train records"
    )
    p.add_argument("--no-resume", action="store_true", help="start over even with checkpoints")
    p.add_argument("--wandb", action="store_true", help="log to Weights & Biases")
    p.add_argument("--wandb-project", default=defaults.wandb_project)
    p.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto")
    p.add_argument("--grad-checkpointing", choices=("auto", "on", "off"), default="auto")
    p.add_argument(
        "--threads", type=nonnegative_int, default=0, help="torch CPU threads (0: torch's own)"
    )
    p.add_argument("--lora-r", type=positive_int, default=defaults.lora.r)
    p.add_argument("--lora-alpha", type=positive_int, default=defaults.lora.alpha)
    p.add_argument("--lora-dropout", type=dropout, default=defaults.lora.dropout)
    p.add_argument(
        "--lora-targets", default="all-linear", help="all-linear or comma-separated module names"
    )
    p.add_argument(
        "--lora-save",
        type=name_list,
        default=(),
        help="modules trained whole beside the adapter (tiny demo: lm_head,norm)",
    )
    p.add_argument("--set", action="append", help="any other TRL config field: name=value")


def add_rloo_args(p, d) -> None:
    p.add_argument(
        "--generations", type=generations, default=d.num_generations, help="K per prompt"
    )
    p.add_argument("--temperature", type=positive, default=d.temperature)
    p.add_argument("--top-p", type=top_p, default=d.top_p)
    p.add_argument("--beta", type=nonnegative, default=d.beta, help="KL coefficient")
    p.add_argument("--max-completion", type=positive_int, default=d.max_completion_length)
    p.add_argument(
        "--vllm",
        choices=("colocate", "server"),
        help="generate through TRL's vLLM mode (needs the vllm package): colocate (an engine "
        "in each training process) or server (trl vllm-serve on GPUs of its own)",
    )
    p.add_argument(
        "--vllm-server", metavar="URL", help="address of trl vllm-serve (with --vllm server)"
    )
