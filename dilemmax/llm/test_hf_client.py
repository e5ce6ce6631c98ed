"""The local transformers client on the tiny model: batched generate with left padding, a PEFT
adapter on top, and a whole ``dilemmax play`` run with an ``hf:`` seat."""

from __future__ import annotations

import importlib.util
import json

import pytest

from dilemmax.cli import main
from dilemmax.llm.client import ChatRequest
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.hf_client import TransformersClient, _reply_length
from dilemmax.llm.tiny import build_tiny_model

# transformers and torch (the optional llm extra) are imported by the client when a test runs,
# not when the suite is collected (tests/test_collection_imports.py).
pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(name) for name in ("transformers", "torch")),
    reason="needs the llm extra (transformers, torch)",
)


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


def requests(*texts):
    return [ChatRequest(({"role": "system", "content": "rules"}, {"role": "user", "content": t}))
            for t in texts]  # fmt: skip


def test_batched_generate_equals_one_at_a_time(tiny_path):
    client = TransformersClient(tiny_path, config=GenerateConfig(max_tokens=6))
    prompts = requests("go", "a much longer prompt, so the first row is padded on the left")
    batched = client.complete(prompts)
    alone = [client.complete([p])[0] for p in prompts]
    assert [c.text for c in batched] == [c.text for c in alone]
    assert batched[0].prompt_tokens < batched[1].prompt_tokens
    assert all(0 <= c.completion_tokens <= 6 for c in batched)
    assert client.prompt_text(prompts[0]).endswith("<|assistant|>\n")


def test_reply_stops_at_the_end_token():
    assert _reply_length([5, 6, 2, 7], {2}) == 2 and _reply_length([5, 6], {2}) == 2


def test_peft_adapter_is_applied(tiny_path, tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_path)
    config = LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(base, config).save_pretrained(tmp_path / "adapter")
    client = TransformersClient(tiny_path, tmp_path / "adapter", GenerateConfig(max_tokens=4))
    assert isinstance(client.model, PeftModel)
    assert len(client.complete(requests("go", "again"))) == 2


@pytest.mark.slow
def test_play_with_a_local_model_seat(tiny_path, tmp_path):
    out = tmp_path / "run"
    argv = ["play", "moral_hazard", "--seat", f"agent_0=hf:{tiny_path},max_new_tokens=4",
            "--seat", "agent_1=scripted:teacher", "--episodes", "2", "--envs", "2",
            "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    calls = results["calls"][f"hf:{tiny_path},max_new_tokens=4"]
    lines = (out / "transcript.jsonl").read_text().splitlines()
    assert calls["calls"] == sum('"type": "call"' in line for line in lines)
    assert 2 * 2 <= calls["calls"] <= 2 * 3 and calls["errors"] == 0  # work, (note), final
    assert len(results["episodes"]) == 2
