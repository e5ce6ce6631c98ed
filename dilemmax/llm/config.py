"""The model and generation options, declared once: :class:`GenerateConfig`.

Every place that asks a model for a reply reads its options from here: the ``dilemmax play``,
``experiment``, ``scenarios evaluate`` and ``redteam`` flags (generated from the fields by
:func:`dilemmax.commandline.add_config_arguments`, in :func:`dilemmax.llm.cli.add_model_arguments`),
a seat's own options (``openai:m,temperature=0.7`` via :meth:`GenerateConfig.merged`), the
Inspect tasks, and the Python API
(``dilemmax.llm.play_session(..., generate=GenerateConfig(temperature=0.7))``). Each field's
metadata holds its help text, its range (a :class:`~dilemmax.envs.option_spec.Range`, ``Choice``,
``Urls`` or ``EnvName``) and its command-line flag; :meth:`GenerateConfig.check` refuses a value
outside its range with a one-line :class:`~dilemmax.envs.options.OptionError` (a UsageError).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dilemmax.envs.option_declaration import setting
from dilemmax.envs.options import OptionError
from dilemmax.llm import sampling

# Model options that decide how calls travel, not what they answer (words of their flags): left
# out of a run's identity, so a shard may use its own server and a resume may change them, and
# out of a reply's cache key (which names the server itself).
TRANSPORT_WORDS = ("url", "key", "timeout", "attempts", "concurrency")


@dataclass(frozen=True)
class GenerateConfig:
    """How a model seat is asked: its server, sampling, output format, timeouts and attempts.

    None means "the server's own default" (and is never sent). A seat's own options override
    the run's (:meth:`merged`); ``base_url`` may be given as ``"http://a/v1|http://b/v1"``
    (replicas of one model) and is kept as a tuple.
    """

    base_url: tuple[str, ...] | None = setting(
        None,
        "the OpenAI-compatible server, e.g. http://localhost:8000/v1; several joined by | "
        "(http://a/v1|http://b/v1) are replicas of one model, each call going to the one with "
        "the fewest calls outstanding",
        sampling.URLS,
        type=str,  # one word, "a|b", split by __post_init__
    )
    api_key_env: str = setting(
        "OPENAI_API_KEY", "the environment variable the API key is read from", sampling.ENV_NAME
    )
    temperature: float = setting(0.0, "sampling temperature", sampling.OPENAI["temperature"])
    top_p: float | None = setting(None, "nucleus sampling mass", sampling.OPENAI["top_p"])
    top_k: int | None = setting(
        None,
        "top-k sampling (vLLM, SGLang and Inspect's providers take it; not OpenAI's own)",
        sampling.OPENAI["top_k"],
    )
    presence_penalty: float | None = setting(
        None, "penalty on tokens already present", sampling.OPENAI["presence_penalty"]
    )
    max_tokens: int = setting(512, "reply length cap, in tokens", sampling.OPENAI["max_tokens"])
    seed: int | None = setting(
        None, "the sampling seed sent to the server", sampling.OPENAI["seed"], flag="--model-seed"
    )
    reasoning_effort: str | None = setting(
        None,
        "asked of reasoning models (default: the server's)",
        sampling.Choice(sampling.REASONING_EFFORTS),
    )
    reasoning_tokens: int | None = setting(
        None,
        "a thinking budget in tokens, mapped by Inspect onto each provider's own (inspect: seats)",
        sampling.REASONING_TOKENS,
    )
    output: str = setting(
        "json_schema",
        "how a reply is asked for: the prompt's JSON schema as structured output, JSON mode (any "
        "JSON object), or text the game's parser reads",
        sampling.Choice(sampling.OUTPUT_MODES),
        flag="--output-mode",
    )
    timeout: float = setting(60.0, "seconds per request attempt", sampling.CLIENT["timeout"])
    max_attempts: int = setting(
        6,
        "attempts per request (rate limits, 5xx, timeouts and broken replies are retried with "
        "jittered exponential backoff)",
        sampling.CLIENT["max_attempts"],
    )
    concurrency: int = setting(
        16, "requests in flight per model, over all its base URLs", sampling.CLIENT["concurrency"]
    )

    def __post_init__(self) -> None:
        # "http://a/v1|http://b/v1" as the tuple it means (checked by check(), not here).
        if isinstance(self.base_url, str):
            urls = sampling.parse_urls(self.base_url)
            object.__setattr__(self, "base_url", urls if urls is not None else self.base_url)

    def check(self, label: Callable[[str], str] | None = None) -> GenerateConfig:
        """``self``, every field within its range; else an OptionError naming the field (as
        ``label(name)`` spells it: a flag, a seat's option) and what is allowed."""
        for field in dataclasses.fields(self):
            name = label(field.name) if label else field.name
            _checked(getattr(self, field.name), field.metadata["range"], name)
        return self

    def merged(self, options: Mapping[str, Any]) -> GenerateConfig:
        """This config with ``options`` (a seat's own, text or values) over it, each parsed and
        checked as its field's kind; an unknown name is an OptionError listing the known."""
        names = field_names()
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise OptionError(f"unknown model options {unknown}; known: {', '.join(names)}")
        ranges = {f.name: f.metadata["range"] for f in dataclasses.fields(self)}
        parsed = {name: _checked(value, ranges[name], name) for name, value in options.items()}
        return dataclasses.replace(self, **parsed)

    def settings(self) -> dict[str, Any]:
        """The fields by name (what a run records of its model options)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def _checked(value: Any, allowed: Any, name: str) -> Any:
    """``value`` parsed and within ``allowed`` (None values, the server's default, pass)."""
    if value is None or allowed is None:
        return value
    if isinstance(allowed, sampling.Urls) and isinstance(value, (tuple, list)):
        value = "|".join(value)
    return sampling.check_option(value, allowed, name)


def field_names() -> tuple[str, ...]:
    """The names of :class:`GenerateConfig`'s fields, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(GenerateConfig))
