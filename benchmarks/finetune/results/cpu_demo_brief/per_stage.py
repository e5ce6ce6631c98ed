"""Greedy replies of a (tiny) model + adapter on held-out records, per decision stage: the RLOO
reward parts and the share of exact target moves, with a few examples (run from the repo root).

    python per_stage.py MODEL ADAPTER DATA OUT.json [RECORDS_PER_STAGE]
"""

import json
import sys

import numpy as np
import torch

from dilemmax.finetune.common import load_model
from dilemmax.finetune.datasets import load_split
from dilemmax.finetune.evaluate import generate_replies
from dilemmax.finetune.rewards import score_records
from dilemmax.llm.config import GenerateConfig

model_dir, adapter, data, out = sys.argv[1:5]
per_stage = int(sys.argv[5]) if len(sys.argv) > 5 else 30
torch.set_num_threads(1)
records = load_split(data, "heldout")
model, tokenizer = load_model(model_dir, adapter, trainable=False)
result = {"adapter": adapter, "records_per_stage": per_stage}
for stage in ("work", "note", "final"):
    of_stage = [r for r in records if r["stage"] == stage]
    picks = np.linspace(0, len(of_stage) - 1, per_stage).round().astype(int)
    chosen = [of_stage[i] for i in picks]
    replies = generate_replies(
        model, tokenizer, chosen, GenerateConfig(max_tokens=96, temperature=0.0)
    )
    result[stage] = {
        "score": score_records(chosen, replies),
        "examples": [
            {"want": r["completion"][0]["content"], "got": x}
            for r, x in zip(chosen[:2], replies[:2], strict=True)
        ],
    }
    print(stage, json.dumps(result[stage]["score"]), flush=True)
with open(out, "w") as f:
    json.dump(result, f, indent=1)
