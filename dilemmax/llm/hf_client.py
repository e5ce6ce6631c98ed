"""A local ``transformers`` causal LM as a client: chat template, left padding, batched generate.

A batch of requests becomes one padded batch (split into ``batch_size`` chunks) through one
``model.generate`` call each. An optional PEFT adapter (a LoRA fine-tune's output folder) is
loaded on top of the base model, so a fine-tuned model plays with the same code.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from dilemmax.llm.client import ChatRequest, Completion, FatalClientError, OnResult


def _plain_chat(messages: Sequence[dict]) -> str:
    """The prompt for a tokenizer without a chat template: role-tagged blocks."""
    blocks = [f"{m['role'].upper()}:\n{m['content']}" for m in messages]
    return "\n\n".join(blocks) + "\n\nASSISTANT:\n"


class TransformersClient:
    """Replies from a local causal LM.

    Args:
        model_path: a folder with ``config.json`` + weights + tokenizer (``save_pretrained``).
        adapter: a PEFT adapter folder to apply on top (optional).
        max_new_tokens: reply length cap.
        temperature: 0 means greedy decoding; otherwise sampling at this temperature.
        top_p: nucleus sampling mass (sampling only).
        seed: torch seed set before each batch (sampling is then reproducible).
        batch_size: requests per ``generate`` call.
        device: torch device ("cpu", "cuda", ...).
    """

    def __init__(
        self,
        model_path: str | Path,
        adapter: str | Path | None = None,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
        batch_size: int = 32,
        device: str = "cpu",
    ):
        import torch  # optional llm extra: loaded with the model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = Path(model_path)
        if not (path / "config.json").is_file():
            raise FatalClientError(f"no model at {path} (expected a folder with config.json)")
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.tokenizer.padding_side = "left"  # generation continues each row at its end
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(path)
        if adapter is not None:
            from peft import PeftModel  # optional llm extra

            if not Path(adapter).is_dir():
                raise FatalClientError(f"no PEFT adapter at {adapter}")
            model = PeftModel.from_pretrained(model, str(adapter))
        self.model = model.to(device).eval()
        self.device = device
        self.max_new_tokens = int(max_new_tokens)
        self.temperature, self.top_p = float(temperature), float(top_p)
        self.seed = int(seed)
        self.batch_size = max(1, int(batch_size))
        self._torch = torch

    def prompt_text(self, request: ChatRequest) -> str:
        messages = [dict(m) for m in request.messages]
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True
            )
        return _plain_chat(messages)

    def complete(
        self, requests: Sequence[ChatRequest], on_result: OnResult | None = None
    ) -> list[Completion]:
        out: list[Completion] = []
        for start in range(0, len(requests), self.batch_size):
            batch = self._generate(requests[start : start + self.batch_size])
            for offset, completion in enumerate(batch):
                if on_result is not None:
                    on_result(start + offset, completion)
            out += batch
        return out

    def _generate(self, requests: Sequence[ChatRequest]) -> list[Completion]:
        torch = self._torch
        start = time.perf_counter()
        texts = [self.prompt_text(r) for r in requests]
        batch = self.tokenizer(
            texts, return_tensors="pt", padding=True, add_special_tokens=False
        ).to(self.device)
        sampling = self.temperature > 0
        options = {"do_sample": sampling, "max_new_tokens": self.max_new_tokens}
        if sampling:
            options.update(temperature=self.temperature, top_p=self.top_p)
        torch.manual_seed(self.seed)
        with torch.no_grad():
            generated = self.model.generate(
                **batch, pad_token_id=self.tokenizer.pad_token_id, **options
            )
        new_tokens = generated[:, batch["input_ids"].shape[1] :]
        latency = (time.perf_counter() - start) / max(1, len(requests))
        completions = []
        for row, mask in zip(new_tokens, batch["attention_mask"], strict=True):
            length = _reply_length(row.tolist(), self._stop_ids())
            text = self.tokenizer.decode(row[:length], skip_special_tokens=True)
            completions.append(
                Completion(
                    text,
                    prompt_tokens=int(mask.sum()),
                    completion_tokens=length,
                    latency_s=latency,
                )
            )
        return completions

    def _stop_ids(self) -> set[int]:
        ids = {self.tokenizer.pad_token_id, self.tokenizer.eos_token_id}
        return {i for i in ids if i is not None}


def _reply_length(tokens: list[int], stop_ids: set[int]) -> int:
    """Tokens before the first end/pad token (the whole row if none)."""
    for i, token in enumerate(tokens):
        if token in stop_ids:
            return i
    return len(tokens)
