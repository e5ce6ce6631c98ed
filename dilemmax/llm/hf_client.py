"""A local ``transformers`` causal LM as a client: chat template, left padding, batched generate.

A batch of requests becomes one padded batch (split into ``batch_size`` chunks) through one
``model.generate`` call each. An optional PEFT adapter (a LoRA fine-tune's output folder) is
loaded on top of the base model, so a fine-tuned model plays with the same code.

A model or adapter folder comes from elsewhere (a download, a colleague's run), so its files are
checked before torch is asked to load anything (:func:`check_model_folder`,
:func:`check_adapter_folder`), and what transformers or PEFT still refuse is reported the same
way: a :class:`ModelFolderError`, one line naming the folder and what is missing or wrong. The
checks read only small files and headers: a ``.safetensors`` file's header is read and its
declared tensors checked against the file's size (a download cut short), and an adapter's config
is checked field by field (PEFT accepts ``"r": "eight"`` and fails only when the model is built,
after a base model may already have played) and against the ranks of its weights. Every command
that seats adapters checks them all this way before the first game (the ``hf:`` seat,
:mod:`dilemmax.llm.providers.hf`, and ``dilemmax finetune evaluate``).
"""

from __future__ import annotations

import json
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path

from dilemmax.errors import UsageError
from dilemmax.llm.client import ChatRequest, Completion, FatalClientError, OnResult
from dilemmax.llm.config import GenerateConfig

# A Transformers client's generation when it is given none: an API seat's, with a shorter reply.
DEFAULT = GenerateConfig(max_tokens=256)
# What a folder written by ``save_pretrained`` holds, by part (any one file of a part will do).
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "spiece.model",
)
ADAPTER_WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")
# What transformers and PEFT raise on a folder they cannot build a model from (a config of an
# unknown architecture, weights of another shape, a damaged file).
LOAD_ERRORS = (OSError, ValueError, KeyError, TypeError, RuntimeError)
# Bytes per element of each safetensors dtype (a dtype not listed is checked by offsets alone).
SAFETENSORS_DTYPES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "I16": 2, "F16": 2,
    "BF16": 2, "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8,
}  # fmt: skip
# A safetensors header past this size is not one (the format caps it at 100 MB).
MAX_SAFETENSORS_HEADER = 100_000_000
# LoRA's config fields a model is built from: (the types allowed, what it must be). Only the
# fields present are checked; PEFT fills in the rest.
LORA_FIELDS = {
    "r": (int, "an integer >= 1"),
    "lora_alpha": ((int, float), "a number"),
    "lora_dropout": ((int, float), "a number in [0, 1)"),
    "target_modules": ((str, list, type(None)), "a module name, a list of them, or null"),
    "modules_to_save": ((list, type(None)), "a list of module names or null"),
    "bias": (str, "one of none, all, lora_only"),
    "fan_in_fan_out": (bool, "true or false"),
    "base_model_name_or_path": ((str, type(None)), "a model name or null"),
}


class ModelFolderError(FatalClientError, UsageError):
    """A model or adapter folder that cannot be loaded: retrying cannot help (a client error that
    stops the run), and the command reports it as one line with exit status 2."""


def _json_object(file: Path, what: str, folder: Path) -> dict:
    try:
        value = json.loads(file.read_text())
    except (OSError, UnicodeError, ValueError) as err:
        raise ModelFolderError(
            f"{what} {folder}: {file.name} is not readable JSON ({err})"
        ) from None
    if not isinstance(value, dict):
        raise ModelFolderError(f"{what} {folder}: {file.name} is not a JSON object")
    return value


def _needs_one_of(folder: Path, names: Sequence[str], part: str, what: str) -> None:
    if not any((folder / name).is_file() for name in names):
        raise ModelFolderError(
            f"{what} {folder} has no {part} (expected one of {', '.join(names)})"
        )


def check_model_folder(path, what: str = "hf seat", tokenizer: bool = True) -> Path:
    """``path`` if it holds a transformers model (``config.json`` naming its ``model_type``,
    weights, and with ``tokenizer`` a tokenizer); a :class:`ModelFolderError` otherwise."""
    folder = Path(path)
    if not folder.is_dir() or not (folder / "config.json").is_file():
        raise ModelFolderError(
            f"{what}: no model at {folder} (expected a folder with config.json, weights and a "
            "tokenizer)"
        )
    config = _json_object(folder / "config.json", what, folder)
    if not isinstance(config.get("model_type"), str):
        raise ModelFolderError(
            f"{what} {folder}: config.json names no model_type (which architecture to build)"
        )
    _needs_one_of(folder, WEIGHT_FILES, "weights", what)
    if tokenizer:
        _needs_one_of(folder, TOKENIZER_FILES, "tokenizer", what)
    return folder


def safetensors_header(file: Path, what: str, folder: Path) -> dict:
    """tensor name -> (dtype, shape, offsets) of a ``.safetensors`` file, read from its header
    alone; a :class:`ModelFolderError` when the header is damaged, declares other than the bytes
    the file holds (a copy cut short, or with bytes after its tensors, which safetensors refuses
    too), or holds a tensor whose bytes do not match its shape."""
    size = file.stat().st_size
    with open(file, "rb") as handle:
        length = int.from_bytes(handle.read(8).ljust(8, b"\xff"), "little")
        if length > min(size - 8, MAX_SAFETENSORS_HEADER):
            raise ModelFolderError(
                f"{what} {folder}: {file.name} is not a whole safetensors file ({size} bytes, "
                "too short for the header it declares)"
            )
        try:
            header = json.loads(handle.read(length))
        except (UnicodeError, ValueError):
            header = None
    if not isinstance(header, dict):
        raise ModelFolderError(f"{what} {folder}: {file.name} has no readable safetensors header")
    end = 0
    for name, tensor in header.items():
        if name != "__metadata__":
            where = f"{what} {folder}: {file.name} tensor {name[:80]!r}"
            end = max(end, _tensor_end(tensor, where))
    if 8 + length + end != size:
        state = "is cut short" if 8 + length + end > size else "has bytes past its tensors"
        raise ModelFolderError(
            f"{what} {folder}: {file.name} {state}: its header declares "
            f"{8 + length + end} bytes, the file holds {size}"
        )
    return header


def _tensor_end(tensor, where: str) -> int:
    """Where a header entry's data ends; ModelFolderError when the entry is not a tensor's."""
    try:
        dtype, shape, (begin, end) = tensor["dtype"], tensor["shape"], tensor["data_offsets"]
        ints = [begin, end, *shape]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ints):
            raise ValueError
    except (TypeError, KeyError, ValueError):
        raise ModelFolderError(f"{where}: not a tensor entry (dtype, shape, offsets)") from None
    count = 1
    for dim in shape:
        count *= dim
    itemsize = SAFETENSORS_DTYPES.get(dtype)
    if end < begin or (itemsize is not None and end - begin != count * itemsize):
        raise ModelFolderError(
            f"{where}: offsets {begin}..{end} do not hold a {dtype} tensor of shape {shape}"
        )
    return end


def check_adapter_folder(path, what: str = "hf seat adapter") -> Path:
    """``path`` if it holds a PEFT adapter (``adapter_config.json`` naming its ``peft_type``, and
    the adapter's weights); a :class:`ModelFolderError` otherwise."""
    folder = Path(path)
    if not folder.is_dir() or not (folder / "adapter_config.json").is_file():
        raise ModelFolderError(
            f"{what}: no PEFT adapter at {folder} (expected a folder with adapter_config.json and "
            "adapter_model.safetensors)"
        )
    config = _json_object(folder / "adapter_config.json", what, folder)
    if not isinstance(config.get("peft_type"), str):
        raise ModelFolderError(f"{what} {folder}: adapter_config.json names no peft_type")
    _needs_one_of(folder, ADAPTER_WEIGHT_FILES, "adapter weights", what)
    if config["peft_type"] == "LORA":
        _check_lora_config(config, f"{what} {folder}: adapter_config.json")
    if (folder / "adapter_model.safetensors").is_file():
        header = safetensors_header(folder / "adapter_model.safetensors", what, folder)
        if config["peft_type"] == "LORA":
            _check_lora_ranks(header, config, f"{what} {folder}")
    else:  # a torch.save zip: cut short, it has no central directory
        _check_zip(folder / "adapter_model.bin", what, folder)
    return folder


def _check_lora_config(config: dict, where: str) -> None:
    for field, (types, meaning) in LORA_FIELDS.items():
        if field not in config:
            continue
        value, allowed = config[field], types if isinstance(types, tuple) else (types,)
        fits = isinstance(value, allowed) and (bool in allowed or not isinstance(value, bool))
        if fits and field == "r":
            fits = value >= 1
        elif fits and field == "lora_dropout":
            fits = 0 <= value < 1
        elif fits and field == "bias":
            fits = value in ("none", "all", "lora_only")
        elif fits and isinstance(value, list):
            fits = all(isinstance(v, str) for v in value)
        if not fits:
            shown = json.dumps(value)[:60]
            raise ModelFolderError(f"{where}: {field} is {shown}, not {meaning}")


def _check_lora_ranks(header: dict, config: dict, where: str) -> None:
    """Each LoRA pair's rank (lora_A's rows, lora_B's columns) is the config's ``r`` (or its
    ``rank_pattern`` entry's): weights of another config fail only once the model is built."""
    ranks = {int(config.get("r", 8))} | {
        v for v in (config.get("rank_pattern") or {}).values() if isinstance(v, int)
    }
    for name, tensor in header.items():
        shape = tensor.get("shape") if isinstance(tensor, dict) else None
        if not shape or len(shape) != 2:
            continue
        rank = shape[0] if ".lora_A." in name else shape[1] if ".lora_B." in name else None
        if rank is not None and rank not in ranks:
            raise ModelFolderError(
                f"{where}: tensor {name[:80]!r} has rank {rank}, but adapter_config.json "
                f"says r={config.get('r', 8)}"
            )


def _check_zip(file: Path, what: str, folder: Path) -> None:
    try:
        with zipfile.ZipFile(file):
            return
    except (OSError, zipfile.BadZipFile):
        raise ModelFolderError(
            f"{what} {folder}: {file.name} is not a whole torch.save file (cut short?)"
        ) from None


def _check_device(torch, device: str) -> None:
    """Raises ModelFolderError for a device torch cannot name or this machine does not have,
    before the model is loaded (minutes for a large one)."""
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError, ValueError) as err:
        text = " ".join(str(err).split())[:200]
        raise ModelFolderError(f"hf seat device {device!r} is not a torch device: {text}") from None
    if kind == "cuda" and not torch.cuda.is_available():
        raise ModelFolderError(f"hf seat device {device!r}: this machine has no CUDA device")


def load_failure(what: str, folder, err: BaseException) -> ModelFolderError:
    """The one-line error of a folder that passed the file checks but would not load."""
    text = " ".join(str(err).split())
    return ModelFolderError(f"{what} {folder} cannot be loaded: {text[:300]}")


def _plain_chat(messages: Sequence[dict]) -> str:
    """The prompt for a tokenizer without a chat template: role-tagged blocks."""
    blocks = [f"{m['role'].upper()}:\n{m['content']}" for m in messages]
    return "\n\n".join(blocks) + "\n\nASSISTANT:\n"


class TransformersClient:
    """Replies from a local causal LM.

    Args:
        model_path: a folder with ``config.json`` + weights + tokenizer (``save_pretrained``).
        adapter: a PEFT adapter folder to apply on top (optional).
        config: the generation options it reads: ``max_tokens`` (the reply length cap, passed
            as ``max_new_tokens``), ``temperature`` (0: greedy decoding), ``top_p`` (nucleus
            mass when sampling; None: no cut) and ``seed`` (the torch seed set before each
            batch, so sampling is reproducible; None: 0). The others are an API's.
        batch_size: requests per ``generate`` call.
        device: torch device ("cpu", "cuda", ...).
    """

    def __init__(
        self,
        model_path: str | Path,
        adapter: str | Path | None = None,
        config: GenerateConfig = DEFAULT,
        batch_size: int = 32,
        device: str = "cpu",
    ):
        import torch  # optional llm extra: loaded with the model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = check_model_folder(model_path)
        if adapter is not None:
            check_adapter_folder(adapter)
        _check_device(torch, device)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path)
        except LOAD_ERRORS as err:
            raise load_failure("hf seat", path, err) from None
        self.tokenizer.padding_side = "left"  # generation continues each row at its end
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if adapter is not None:
            from peft import PeftModel  # optional llm extra

            try:
                model = PeftModel.from_pretrained(model, str(adapter))
            except LOAD_ERRORS as err:
                raise load_failure("hf seat adapter", adapter, err) from None
        try:
            self.model = model.to(device).eval()
        except (RuntimeError, AssertionError, ValueError) as err:  # torch's "no such device"
            text = " ".join(str(err).split())[:200]
            raise ModelFolderError(f"hf seat device {device!r} cannot be used: {text}") from None
        self.device = device
        self.max_new_tokens = int(config.max_tokens)
        self.temperature = float(config.temperature)
        self.top_p = 1.0 if config.top_p is None else float(config.top_p)
        self.seed = 0 if config.seed is None else int(config.seed)
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
