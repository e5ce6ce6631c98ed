"""The model clients' options checked before any call: sampling, endpoints, timeouts, attempts.

The ranges of :class:`~dilemmax.llm.config.GenerateConfig`'s fields and of the seat kinds' own
options. Every option a model seat takes, as a flag (``--temperature``), a field
(``GenerateConfig(temperature=0.7)``) or inside a seat spec
(``openai:m,temperature=0.7,base_url=http://a/v1|http://b/v1``), goes through
:func:`check_option`, which parses text totally and refuses a value outside its range with an
:class:`~dilemmax.envs.options.OptionError` naming the option, the value and what is allowed.
The ranges are OpenAI's documented ones (temperature 0..2, top_p 0..1, presence_penalty -2..2,
max_tokens >= 1); a value the server would reject, or a NaN that serializes as invalid JSON, is
thus refused here instead of costing a run of failed calls. Besides numbers an option is a
:class:`Choice` (``output=json_object``), a list of server addresses (:data:`URLS`, several
joined by ``|`` since a seat spec's options are split at commas) or an environment variable's
name (:data:`ENV_NAME`).
"""

from __future__ import annotations

import math
import numbers
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

from dilemmax.envs.option_spec import INT32_MAX, Range, shown
from dilemmax.envs.options import OptionError

SEED_MAX = INT32_MAX  # the seeds of every dilemmax command (commandline.seed_int)


# What a model client accepts. A timeout must be finite (an infinite one would hang a run on a
# dead server) and at most a day (the socket layer refuses larger ones).
OPENAI = {
    "temperature": Range("float", 0.0, 2.0),
    "top_p": Range("float", 0.0, 1.0),
    "top_k": Range("int", 1),  # not OpenAI's own: vLLM, SGLang and Inspect's providers take it
    "presence_penalty": Range("float", -2.0, 2.0),
    "max_tokens": Range("int", 1),
    "seed": Range("int", 0, SEED_MAX),
}
HF = {
    "temperature": Range("float", 0.0, 2.0),
    "top_p": Range("float", 0.0, 1.0),
    "max_new_tokens": Range("int", 1),
    "batch_size": Range("int", 1),
}
CLIENT = {
    "timeout": Range("float", 0.0, 86_400.0, low_open=True),
    "max_attempts": Range("int", 1),
    "concurrency": Range("int", 1),
}


@dataclass(frozen=True)
class Choice:
    """A text option with a fixed set of values."""

    values: tuple[str, ...]

    def check(self, value: Any, option: str) -> str:
        text = value.strip() if isinstance(value, str) else None
        if text not in self.values:
            raise OptionError(f"{_named(option, value)}: expected one of {', '.join(self.values)}")
        return text


@dataclass(frozen=True)
class Urls:
    """One or more OpenAI-compatible servers, ``http(s)://host[:port][/path]``, joined by ``|``
    (replicas of one model, which a client spreads its calls over): a tuple of addresses."""

    def check(self, value: Any, option: str) -> tuple[str, ...]:
        urls = parse_urls(value)
        if urls is None:
            given = (
                f"{option} {shown(value, 40)}" if option.startswith("--") else _named(option, value)
            )
            raise OptionError(
                f"{given}: {urls_problem(value)}; expected http://host:port/v1 or https://..., "
                "several joined by | (each once)"
            )
        return urls


def parse_urls(value: Any) -> tuple[str, ...] | None:
    """``"http://a/v1|http://b/v1"`` -> the addresses; None when :func:`urls_problem` finds
    something wrong. Total, linear in the text."""
    if urls_problem(value):
        return None
    return tuple(u.strip() for u in value.split("|"))


def urls_problem(value: Any) -> str:
    """What is wrong with ``value`` as server addresses joined by ``|`` ('' when nothing):
    each an http(s) address with a host and a port in 1..65535 (when it names one), none named
    twice. A comma or a space is refused (no API's base URL has one; ``http://a/v1,http://b/v1``
    meant two servers)."""
    if not isinstance(value, str) or len(value) > 10_000:
        return "not an address"
    urls = tuple(u.strip() for u in value.split("|"))
    for url in urls:
        problem = url_problem(url)
        if problem:
            return problem if len(urls) == 1 else f"{shown(url, 40)}: {problem}"
    return "an address is named twice" if len(set(urls)) != len(urls) else ""


def url_problem(url: str) -> str:
    """What is wrong with one server address ('' when nothing): its scheme (http or https),
    host, port (1..65535), or a comma or space inside it."""
    if "," in url or any(c.isspace() for c in url):
        return "a comma or space inside an address"
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # an unbalanced IPv6 bracket
        return "its host cannot be read"
    if parts.scheme not in ("http", "https"):
        return f"scheme {shown(parts.scheme, 20) if parts.scheme else 'missing'}, not http(s)"
    if not parts.hostname:
        return "no host"
    port = _PORT.search(parts.netloc)
    if port is None and re.search(r":[^\]]+$", parts.netloc.rsplit("@", 1)[-1]):
        return "its port is not a number"
    if port is not None and not 1 <= int(port[1]) <= 65535:
        return f"port {port[1]} is not in 1..65535"
    return ""


_PORT = re.compile(r":([0-9]{1,20})$")  # a netloc's port (longer digits: not a port either)


@dataclass(frozen=True)
class EnvName:
    """The name of an environment variable (where an API key is read from)."""

    def check(self, value: Any, option: str) -> str:
        text = value.strip() if isinstance(value, str) else ""
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,199}", text):
            raise OptionError(f"{_named(option, value)}: expected an environment variable's name")
        return text


# How a reply's format is asked for (the OpenSocialJax paper's Table 1 lists one per model):
# the prompt's JSON schema as structured output, JSON mode (any JSON object), or plain text that
# the game's parser reads.
OUTPUT_MODES = ("json_schema", "json_object", "text")
# Reasoning effort as OpenAI's API and Inspect's GenerateConfig spell it.
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
URLS = Urls()
ENV_NAME = EnvName()
ENDPOINT = {"base_url": URLS, "api_key_env": ENV_NAME}
GENERATION = {
    "reasoning_effort": Choice(REASONING_EFFORTS),
    "output": Choice(OUTPUT_MODES),
}
REASONING_TOKENS = Range("int", 1)  # a thinking budget (Inspect maps it onto each provider's)


def sampling_options(**given: Any) -> dict:
    """The sampling and reasoning options a client sends (``temperature``, ..., ``seed``,
    ``reasoning_effort``, ``reasoning_tokens``), each checked; None ones left out."""
    checks = {**OPENAI, **GENERATION, "reasoning_tokens": REASONING_TOKENS}
    unknown = sorted(set(given) - set(checks) - {"output"})
    if unknown:
        raise TypeError(f"unknown sampling options {unknown}")
    return {k: check_option(v, checks[k], k) for k, v in given.items() if v is not None}


def check_option(value: Any, allowed, option: str):
    """``value`` (a number, or text from a seat spec) as ``allowed``'s kind, within its range
    (``allowed``: a :class:`Range`, or a :class:`Choice`, :class:`Urls` or :class:`EnvName`).

    Total: returns the value or raises :class:`OptionError` naming ``option``, the value and the
    range; NaN and infinities are never in a range.
    """
    if not isinstance(allowed, Range):
        return allowed.check(value, option)
    number = _as_number(value, allowed.kind)
    finite = isinstance(number, int) or (number is not None and math.isfinite(number))
    if not finite or not allowed.admits(number):
        raise OptionError(f"{_named(option, value)}: expected {allowed.describe()}")
    return number


def _as_number(value: Any, kind: str) -> float | int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        if len(text) > 40:  # no number a sampling option takes is this long
            return None
        try:
            value = int(text) if kind == "int" else float(text)
        except ValueError:
            return None
    if kind == "int":  # numpy integers too; a float is never an int option's value
        return int(value) if isinstance(value, numbers.Integral) else None
    if not isinstance(value, numbers.Real):
        return None
    try:
        return float(value)
    except OverflowError:  # an integer beyond any float
        return None


def _named(option: str, value: Any) -> str:
    """``temperature=5`` (a flag: ``--temperature=5.0``)."""
    return f"{option}={shown(value, 40)}"
