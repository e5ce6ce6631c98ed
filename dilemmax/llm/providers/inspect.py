"""The ``inspect:<provider>/<model>`` seat: a model of Inspect AI's model API (the optional
``inspect`` extra), through :class:`~dilemmax.llm.inspect_client.InspectClient`.

It takes every API option, ``reasoning_tokens`` included (Inspect maps a thinking budget onto
each provider's own). Inspect's providers read their own key variables (``ANTHROPIC_API_KEY``,
...): a key variable is read, and checked before any call, only where the seat names one
(``api_key_env=...``); the run's ``--api-key-env`` is not passed on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from dilemmax.envs.seat_spec import SeatSpec
from dilemmax.llm import sampling
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.providers.api_seat import API_OPTIONS, api_identity, api_settings, check_key
from dilemmax.llm.seats import ModelProvider, model_seat_kind

NAME = "inspect"


def _settings(options: Mapping[str, Any], generate: GenerateConfig) -> GenerateConfig:
    """The seat's settings, its key variable only where the seat names one."""
    settings = api_settings(options, generate)
    return dataclasses.replace(settings, api_key_env=options.get("api_key_env"))


def _client(target: str, options: Mapping[str, Any], generate: GenerateConfig):
    # inspect_client needs inspect_ai, the optional inspect extra: loaded for an inspect seat.
    from dilemmax.llm.inspect_client import InspectClient

    return InspectClient(target, _settings(options, generate))


def _check(spec: SeatSpec, options: Mapping[str, Any], generate: GenerateConfig) -> None:
    variable = _settings(options, generate).api_key_env
    if variable is not None:
        check_key(spec, variable)


def _identity(target: str, options: Mapping[str, Any], generate: GenerateConfig) -> dict:
    return api_identity(NAME, target, api_settings(options, generate))


PROVIDER = ModelProvider(
    NAME,
    "<provider>/<model>",
    {**API_OPTIONS, "reasoning_tokens": sampling.REASONING_TOKENS},
    _client,
    _identity,
    check=_check,
    target_ok=lambda target: "/" in target.strip("/"),
)
SEAT = model_seat_kind(PROVIDER)
