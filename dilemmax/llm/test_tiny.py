"""The tiny model loads through the ordinary transformers path and generates with its template."""

import importlib.util

import pytest

from dilemmax.llm.tiny import build_tiny_model

# transformers and torch (the optional llm extra) are imported by the tests that run, not when
# the suite is collected (tests/test_collection_imports.py).
pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(name) for name in ("transformers", "torch")),
    reason="needs the llm extra (transformers, torch)",
)


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), texts=["FINAL B because"])


def test_round_trip_and_template(tiny_path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_path)
    text = 'ACTION LOCAL B\nsome unseen bytes: é ³ {"a": 1}'
    assert tok.decode(tok(text)["input_ids"]) == text  # byte-level: nothing is lost
    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": "go"}]
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt == "<|system|>\nrules<|end|>\n<|user|>\ngo<|end|>\n<|assistant|>\n"
    chat = messages + [{"role": "assistant", "content": "FINAL B"}]
    out = tok.apply_chat_template(chat, return_assistant_tokens_mask=True, return_dict=True)
    masked = [t for t, m in zip(out["input_ids"], out["assistant_masks"], strict=True) if m]
    assert tok.decode(masked) == "FINAL B<|end|>"
    assert tok.padding_side == "left"


def test_same_seed_same_model_and_batched_generate(tiny_path, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    again = build_tiny_model(tmp_path / "again", texts=["FINAL B because"])
    a = AutoModelForCausalLM.from_pretrained(tiny_path)
    b = AutoModelForCausalLM.from_pretrained(again)
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name
    tok = AutoTokenizer.from_pretrained(tiny_path)
    batch = tok(["short", "a much longer prompt than that"], return_tensors="pt", padding=True)
    out = a.generate(**batch, max_new_tokens=4, do_sample=False)
    assert out.shape[0] == 2 and out.shape[1] <= batch["input_ids"].shape[1] + 4
