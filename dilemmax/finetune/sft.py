"""LoRA supervised fine-tuning on the teacher's demonstrations (TRL ``SFTTrainer``).

Paper defaults (Appendix B): 2,000 steps, lr 2e-4, per-device batch 2 x gradient accumulation 8,
20 warm-up steps, maximum length 16,384, LoRA r 16 / alpha 32 / dropout 0.05, bf16. The records
are TRL prompt/completion conversations, so the loss covers the completion tokens only
(``completion_only_loss``); the prompt is the one the model sees when it plays.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dilemmax.finetune.checks import SFT_FIELDS
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


@dataclass(frozen=True)
class SFTSettings(RunSettings):
    """:class:`RunSettings` with the paper's SFT defaults plus ``max_length``."""

    max_length: int = 16384


def build_trainer(settings: SFTSettings):
    """(trainer, tokenizer) ready to ``train()``; nothing is trained yet."""
    from trl import SFTConfig, SFTTrainer  # of the optional llm extra: loaded to train

    configure_wandb(settings)
    # Everything read from files or flags is checked before the model loads (minutes on a GPU).
    records = training_records(settings, SFT_FIELDS)
    check_config_fields(SFTConfig, settings)
    # The config before the model: DeepSpeed ZeRO-3 loads the weights sharded only when the
    # config exists first.
    config = trainer_config(
        SFTConfig,
        **trainer_arguments(settings),
        max_length=settings.max_length,
        completion_only_loss=True,
    )
    model, tokenizer = load_model(settings.model, settings.adapter, precision=settings.precision)
    if not settings.adapter:  # a fresh adapter: its modules must exist in this model
        check_lora_modules(model, settings.lora)
    dataset = to_hf_dataset(records, columns=("prompt", "completion"))
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=None if settings.adapter else settings.lora.peft_config(),
    )
    return trainer, tokenizer


def train_sft(settings: SFTSettings) -> Path:
    """Runs (or resumes) SFT; returns the folder of the final adapter."""
    trainer, tokenizer = build_trainer(settings)
    return run_trainer(trainer, settings, tokenizer)
