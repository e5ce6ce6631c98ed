"""The ``openai:<model>`` seat: a model on any OpenAI-compatible server (hosted APIs, vLLM),
through :class:`~dilemmax.llm.openai_client.OpenAIClient`.

It takes every API option but ``reasoning_tokens`` (no OpenAI-compatible spelling of a thinking
budget). Its key is read from ``api_key_env`` (``OPENAI_API_KEY`` unless set), and is needed
unless the seat has a server of its own (a ``base_url``: a local server is sent "EMPTY" when the
variable is unset).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dilemmax.envs.seat_spec import SeatSpec
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.providers.api_seat import API_OPTIONS, api_identity, api_settings, check_key
from dilemmax.llm.seats import ModelProvider, model_seat_kind

NAME = "openai"


def _client(target: str, options: Mapping[str, Any], generate: GenerateConfig):
    # openai_client needs aiohttp, of the optional llm extra: loaded for an openai seat.
    from dilemmax.llm.openai_client import OpenAIClient

    return OpenAIClient(target, api_settings(options, generate))


def _check(spec: SeatSpec, options: Mapping[str, Any], generate: GenerateConfig) -> None:
    settings = api_settings(options, generate)
    if settings.base_url is None:
        check_key(spec, settings.api_key_env)


def _identity(target: str, options: Mapping[str, Any], generate: GenerateConfig) -> dict:
    return api_identity(NAME, target, api_settings(options, generate))


PROVIDER = ModelProvider(NAME, "<model>", API_OPTIONS, _client, _identity, check=_check)
SEAT = model_seat_kind(PROVIDER)
