"""A few SFT and RLOO steps on a tiny model: finite loss, a saved adapter that reloads to the same
outputs, and a resumed run that continues from the saved step."""

from __future__ import annotations

import importlib.util
import math

import pytest

from dilemmax.finetune.common import load_model, run_trainer
from dilemmax.finetune.rloo import RLOOSettings
from dilemmax.finetune.rloo import build_trainer as build_rloo
from dilemmax.finetune.sft import SFTSettings
from dilemmax.finetune.sft import build_trainer as build_sft

# trl, transformers and torch (the optional llm extra) are imported when a test runs, not when
# the suite is collected (tests/test_collection_imports.py).
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("trl") is None, reason="needs the llm extra (trl)"
)


def count_steps():
    """A callback that counts the optimiser steps a run actually takes (not the ones
    restored)."""
    from transformers import TrainerCallback

    class CountSteps(TrainerCallback):
        def __init__(self):
            self.steps = 0

        def on_step_end(self, args, state, control, **kwargs):
            self.steps += 1

    return CountSteps()


def train(build, settings):
    """(adapter dir, trainer, steps taken in this run)."""
    trainer, tokenizer = build(settings)
    counter = count_steps()
    trainer.add_callback(counter)
    return run_trainer(trainer, settings, tokenizer), trainer, counter.steps


def losses(trainer):
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def logits(model, tokenizer, text="FINAL A\nSTEP 1: the board"):
    import torch

    model.eval()
    with torch.no_grad():
        ids = tokenizer(text, return_tensors="pt")
        return model(**ids).logits


@pytest.fixture(scope="module")
def sft_run(tiny_model_dir, small_data_dir, tmp_path_factory):
    import torch

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("sft")
    settings = SFTSettings(
        model=str(tiny_model_dir),
        data=str(small_data_dir),
        out=str(out),
        max_steps=2,
        save_steps=2,
        grad_accum=1,
        warmup_steps=0,
        logging_steps=1,
        max_train_records=8,
    )
    adapter, trainer, steps = train(build_sft, settings)
    return settings, adapter, trainer, steps


def test_sft_loss_is_finite_and_adapter_reloads(sft_run, tiny_model_dir):
    import torch

    settings, adapter, trainer, steps = sft_run
    assert steps == 2
    assert len(losses(trainer)) == 2 and all(math.isfinite(x) for x in losses(trainer))
    assert (adapter / "adapter_config.json").exists()
    assert (adapter / "adapter_model.safetensors").exists()
    _, tokenizer = load_model(settings.model)
    reloaded, _ = load_model(settings.model, str(adapter), trainable=False)
    base, _ = load_model(settings.model)
    trained = logits(trainer.model, tokenizer)
    assert torch.allclose(logits(reloaded, tokenizer), trained, atol=1e-5)
    assert not torch.allclose(logits(base, tokenizer), trained, atol=1e-5)  # it did train


def test_sft_resume_continues_from_the_saved_step(sft_run):
    settings, _, _, _ = sft_run
    more = SFTSettings(**{**settings.__dict__, "max_steps": 3, "save_steps": 3})
    _, trainer, steps = train(build_sft, more)
    assert steps == 1  # only step 3 ran; steps 1-2 came from checkpoint-2
    assert trainer.state.global_step == 3
    assert [h["step"] for h in trainer.state.log_history if "loss" in h] == [1, 2, 3]


@pytest.mark.slow
def test_rloo_from_the_sft_adapter_steps_saves_and_resumes(sft_run, tmp_path_factory):
    settings, adapter, _, _ = sft_run
    out = tmp_path_factory.mktemp("rloo")
    rloo = RLOOSettings(
        model=settings.model,
        adapter=str(adapter),
        data=settings.data,
        out=str(out),
        max_steps=1,
        save_steps=1,
        warmup_steps=0,
        logging_steps=1,
        batch_size=2,
        num_generations=2,
        max_completion_length=8,
        max_train_records=4,
    )
    final, trainer, steps = train(build_rloo, rloo)
    assert steps == 1
    logged = [h for h in trainer.state.log_history if "loss" in h]
    assert math.isfinite(logged[0]["loss"]) and "rewards/target_reward/mean" in logged[0]
    assert (final / "adapter_model.safetensors").exists()
    _, trainer, steps = train(build_rloo, RLOOSettings(**{**rloo.__dict__, "max_steps": 2}))
    assert steps == 1 and trainer.state.global_step == 2
