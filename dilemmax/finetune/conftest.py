"""Shared fixtures of the fine-tuning tests: a small teacher dataset and a tiny causal LM."""

from __future__ import annotations

import pytest

from dilemmax.finetune.datasets import DatasetSpec, build_records, write_jsonl
from dilemmax.llm.tiny import build_tiny_model

# Two costs x one team weight x two provenances x n in {2, 3}, three episodes each, one episode
# per split: 4 conditions x 3 episodes x (6 + 9) decisions = 180 records.
SMALL_SPEC = DatasetSpec(
    seed=3,
    episodes_per_condition=3,
    costs=(0.0, 0.35),
    team_weights=(0.5,),
    num_agents=(2, 3),
    fractions=(1 / 3, 1 / 3, 1 / 3),
)


@pytest.fixture(scope="session")
def small_records():
    return build_records(SMALL_SPEC)


@pytest.fixture(scope="session")
def small_data_dir(small_records, tmp_path_factory):
    """The small dataset written as a dataset folder (train / validation / heldout JSONL)."""
    out = tmp_path_factory.mktemp("finetune_data")
    for split in ("train", "validation", "heldout"):
        write_jsonl([r for r in small_records if r["split"] == split], out / f"{split}.jsonl")
    return out


@pytest.fixture(scope="session")
def tiny_model_dir(small_records, tmp_path_factory):
    """A tiny Llama-style LM (hidden 32) whose tokenizer was trained on the dataset's texts."""
    pytest.importorskip("trl")
    texts = [m["content"] for r in small_records[::6] for m in r["prompt"] + r["completion"]]
    out = tmp_path_factory.mktemp("tiny_model")
    return build_tiny_model(out, texts=texts, vocab_size=768, hidden_size=32, num_layers=1)
