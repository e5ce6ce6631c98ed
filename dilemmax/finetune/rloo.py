"""RLOO on the target-action reward (TRL ``RLOOTrainer``), from a fresh or an SFT adapter.

Paper defaults (Appendix B): K = 5 completions per prompt at temperature 1.0 and top-p 1.0,
lr 1e-6, KL coefficient 0.03, completions of at most 128 tokens, per-device batch 5 (one prompt's
five samples) x accumulation 1, 20 warm-up steps, 2,000 steps. The reward is the sum of the three
parts of :mod:`dilemmax.finetune.rewards` (0.05 format + 0.10 rationale + 0.85 target match).

From an SFT adapter (``adapter=``), TRL keeps a frozen copy of it as the KL reference, so the KL
term pulls towards the SFT policy, not towards the base model.

Generation runs through ``model.generate`` unless ``vllm`` asks for TRL's vLLM mode:
``"colocate"`` (a vLLM engine inside each training process, sharing its GPU) or ``"server"`` (a
``trl vllm-serve`` process on GPUs of its own at ``vllm_server``). vLLM is not a dependency of
the project; asking for it without the package installed is a one-line error before any model
loads.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from dilemmax.errors import UsageError
from dilemmax.finetune.checks import RLOO_FIELDS, DatasetError
from dilemmax.finetune.common import (
    RunSettings,
    check_config_fields,
    check_lora_modules,
    configure_wandb,
    load_model,
    run_trainer,
    trainer_arguments,
    trainer_config,
    training_records,
)
from dilemmax.finetune.datasets import to_hf_dataset
from dilemmax.finetune.generation import RLOO_GENERATE
from dilemmax.finetune.rewards import check_records, trl_reward_functions
from dilemmax.llm.sampling import url_problem


@dataclass(frozen=True)
class RLOOSettings(RunSettings):
    """:class:`RunSettings` with the paper's RLOO defaults."""

    learning_rate: float = 1e-6
    batch_size: int = 5
    grad_accum: int = 1
    num_generations: int = 5
    temperature: float = RLOO_GENERATE.temperature
    top_p: float = RLOO_GENERATE.top_p
    beta: float = 0.03
    max_completion_length: int = RLOO_GENERATE.max_tokens
    vllm: str | None = None  # None (model.generate), "colocate" or "server": TRL's vLLM modes
    vllm_server: str | None = None  # base URL of `trl vllm-serve` ("server" mode; TRL's default)


VLLM_MODES = ("colocate", "server")


def check_vllm(settings: RLOOSettings) -> None:
    """Raises UsageError unless the vLLM options make sense here: a known mode, a server URL
    only in server mode, and the ``vllm`` package installed (checked before any model loads,
    and before the hours of SFT that ``sft-rloo`` spends first)."""
    if settings.vllm is None:
        if settings.vllm_server:
            raise UsageError("--vllm-server needs --vllm server")
        return
    if settings.vllm not in VLLM_MODES:
        raise UsageError(f"--vllm {settings.vllm!r}: expected one of {', '.join(VLLM_MODES)}")
    if settings.vllm_server is not None:
        if settings.vllm != "server":
            raise UsageError("--vllm-server needs --vllm server (colocate runs vLLM in-process)")
        problem = url_problem(settings.vllm_server)
        if problem:
            raise UsageError(
                f"--vllm-server {settings.vllm_server!r}: {problem}; expected http://host:port "
                "(the address `trl vllm-serve` listens on)"
            )
    if importlib.util.find_spec("vllm") is None:
        raise UsageError(
            f"--vllm {settings.vllm}: the vllm package is not installed (pip install vllm)"
        )


def vllm_arguments(settings: RLOOSettings) -> dict:
    """RLOOConfig's vLLM fields for ``settings`` (none without ``vllm``)."""
    if settings.vllm is None:
        return {}
    server = {"vllm_server_base_url": settings.vllm_server} if settings.vllm_server else {}
    return {"use_vllm": True, "vllm_mode": settings.vllm, **server}


def build_trainer(settings: RLOOSettings):
    """(trainer, tokenizer) ready to ``train()``; nothing is trained yet."""
    from trl import RLOOConfig, RLOOTrainer  # of the optional llm extra: loaded to train

    configure_wandb(settings)
    # Everything read from files or flags is checked before the model loads (minutes on a GPU).
    check_vllm(settings)
    records = training_records(settings, RLOO_FIELDS)
    check_config_fields(RLOOConfig, settings)
    try:
        check_records(records)
    except (ValueError, TypeError, KeyError) as err:  # a context or protocol the game refuses
        raise DatasetError(f"--data {settings.data}: {err}") from None
    # The config before the model: DeepSpeed ZeRO-3 loads the weights sharded only when the
    # config exists first, and TRL's checks (batch vs generations vs processes) come first too.
    config = trainer_config(
        RLOOConfig,
        **trainer_arguments(settings),
        num_generations=settings.num_generations,
        temperature=settings.temperature,
        top_p=settings.top_p,
        beta=settings.beta,
        max_completion_length=settings.max_completion_length,
        **vllm_arguments(settings),
    )
    model, tokenizer = load_model(settings.model, settings.adapter, precision=settings.precision)
    if not settings.adapter:  # a fresh adapter: its modules must exist in this model
        check_lora_modules(model, settings.lora)
    tokenizer.padding_side = "left"  # generation pads on the left
    dataset = to_hf_dataset(
        records, columns=("prompt", "target", "context", "legal", "num_agents", "protocol")
    )
    trainer = RLOOTrainer(
        model=model,
        reward_funcs=trl_reward_functions(),
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=None if settings.adapter else settings.lora.peft_config(),
    )
    return trainer, tokenizer


def train_rloo(settings: RLOOSettings) -> Path:
    """Runs (or resumes) RLOO; returns the folder of the final adapter."""
    trainer, tokenizer = build_trainer(settings)
    return run_trainer(trainer, settings, tokenizer)
