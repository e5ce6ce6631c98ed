"""Greedy replies of the narrow-demo SFT adapter on the first 12 held-out records of each stage,
scored with the RLOO reward parts; writes per_stage.json (run from the repository root)."""

import json
import sys

import torch

from dilemmax.finetune.common import load_model
from dilemmax.finetune.datasets import load_split
from dilemmax.finetune.evaluate import generate_replies
from dilemmax.finetune.rewards import score_records
from dilemmax.llm.config import GenerateConfig

model_dir, adapter, data, out = sys.argv[1:5]
torch.set_num_threads(2)
records = load_split(data, "heldout")
model, tokenizer = load_model(model_dir, adapter, trainable=False)
result = {}
for stage in ("work", "note", "final"):
    chosen = [r for r in records if r["stage"] == stage][:12]
    replies = generate_replies(
        model, tokenizer, chosen, GenerateConfig(max_tokens=80, temperature=0.0)
    )
    result[stage] = {
        "score": score_records(chosen, replies),
        "examples": [
            {"want": r["completion"][0]["content"], "got": x}
            for r, x in zip(chosen[:3], replies[:3], strict=True)
        ],
    }
with open(out, "w") as f:
    json.dump(result, f, indent=1)
