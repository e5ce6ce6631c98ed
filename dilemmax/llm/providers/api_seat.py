"""What the providers of a model behind an API share: its options, its settings, its key check
and what decides its replies.

An API seat's client is built from one :class:`~dilemmax.llm.config.GenerateConfig`: the run's,
with the seat's own options over it (:func:`api_settings`); two seats with equal settings share a
client. A provider of another package whose model is behind an API reuses these.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from dilemmax.envs.seat_spec import SeatSpec
from dilemmax.errors import UsageError
from dilemmax.llm import sampling
from dilemmax.llm.config import TRANSPORT_WORDS, GenerateConfig, field_names

API_OPTIONS = {  # a model behind an API: endpoint, sampling, output mode, attempts
    **sampling.ENDPOINT,
    **sampling.OPENAI,
    **sampling.GENERATION,
    **sampling.CLIENT,
}


def api_settings(options: Mapping[str, Any], generate: GenerateConfig) -> GenerateConfig:
    """Everything an API seat's client is built from: the seat's own model options (``options``
    may hold others) over the run's ``generate``."""
    return generate.merged({k: v for k, v in options.items() if k in field_names()})


def api_identity(kind: str, target: str, settings: GenerateConfig) -> dict:
    """What decides an API seat's replies besides what it is asked: its kind and model, its
    servers and every generation option; not how calls travel (key, timeout, attempts,
    concurrency)."""
    named = {
        f.name: getattr(settings, f.name)
        for f in dataclasses.fields(settings)
        if not any(word in (f.metadata["flag"] or f.name) for word in TRANSPORT_WORDS)
    }
    return {"kind": kind, "model": target, "base_url": settings.base_url, **named}


def check_key(spec: SeatSpec, variable: str) -> None:
    """The seat's key is there now, not found missing after the run folder is made."""
    if not os.environ.get(variable):
        raise UsageError(
            f"seat {spec.text!r}: no API key: set the environment variable {variable} (or give "
            "a base_url for a local server)"
        )
