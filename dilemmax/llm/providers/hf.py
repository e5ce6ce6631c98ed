"""The ``hf:<model folder>`` seat: a local ``transformers`` model (``save_pretrained``), with an
optional PEFT adapter, through :class:`~dilemmax.llm.hf_client.TransformersClient`.

Its sampling (``temperature``, ``top_p``, ``max_new_tokens``: ``--max-tokens``, and the seed) is
the run's :class:`~dilemmax.llm.config.GenerateConfig` under the seat's own; ``batch_size`` and
``device`` are its own (their defaults TransformersClient's). It reads no key; its model and
adapter folders come from elsewhere, so their files are checked whole before torch loads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dilemmax.envs.seat_spec import SeatSpec
from dilemmax.llm import sampling
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.hf_client import TransformersClient, check_adapter_folder, check_model_folder
from dilemmax.llm.seats import ModelProvider, model_seat_kind

NAME = "hf"
OWN = ("batch_size", "device")  # passed on as they are


def _sampled(options: Mapping[str, Any], generate: GenerateConfig) -> GenerateConfig:
    """The run's generation under the seat's own sampling (``max_new_tokens`` is its
    ``max_tokens``)."""
    own = {k: v for k, v in options.items() if k in ("temperature", "top_p")}
    if "max_new_tokens" in options:
        own["max_tokens"] = options["max_new_tokens"]
    return generate.merged(own)


def _client(target: str, options: Mapping[str, Any], generate: GenerateConfig):
    adapter = options.get("adapter") or None
    own = {k: options[k] for k in OWN if k in options}
    return TransformersClient(target, adapter, _sampled(options, generate), **own)


def _check(spec: SeatSpec, options: Mapping[str, Any], generate: GenerateConfig) -> None:
    """A folder from elsewhere: its files checked before torch loads it."""
    check_model_folder(spec.target)
    if options.get("adapter"):
        check_adapter_folder(options["adapter"])


def _identity(target: str, options: Mapping[str, Any], generate: GenerateConfig) -> dict:
    """Its model and adapter folders, resolved, and its sampling."""
    adapter = options.get("adapter")
    sampled = generate.merged({k: v for k, v in options.items() if k in ("temperature", "top_p")})
    return {
        "kind": NAME,
        "model": str(Path(target).expanduser().resolve()),
        "adapter": str(Path(adapter).expanduser().resolve()) if adapter else None,
        "max_new_tokens": options.get("max_new_tokens", sampled.max_tokens),
        "temperature": sampled.temperature,
        "top_p": sampled.top_p,
        "seed": sampled.seed,
        "batch_size": options.get("batch_size"),  # batches pad prompts, which may move replies
    }


PROVIDER = ModelProvider(
    NAME,
    "<model folder>",
    {"adapter": None, "device": None, **sampling.HF},
    _client,
    _identity,
    check=_check,
)
SEAT = model_seat_kind(PROVIDER)
