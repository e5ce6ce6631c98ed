"""The language-model seat kinds, and the seats of a batched play run.

A seat is written in the one grammar of :mod:`dilemmax.envs.seat_spec`
(``kind:target[,option=value|,flag]``); this module registers its model kinds there:
``openai:<model>``, ``inspect:<provider>/<model>`` and ``hf:<model folder>``. A model seat names
its own endpoint and sampling (``openai:m,base_url=http://a/v1|http://b/v1,api_key_env=KEY,
temperature=0.2,top_k=20,presence_penalty=1.5,reasoning_effort=low,output=json_object``; what a
seat leaves out comes from the run's :class:`~dilemmax.llm.config.GenerateConfig`) and its own
text-protocol options (``role=cooperator``, passed on as :attr:`Seat.protocol_options`), and
its price in dollars per million tokens (``price=0.15/0.60``, or ``price=0.15/0.075/0.60`` with
the cached-input rate: :mod:`dilemmax.llm.pricing`). Several
base URLs, joined by ``|``, are replicas of one model that the client spreads its calls over.
``scripted:``, ``trained:`` and ``zoo:`` seats (and a bare scripted name) play inside JAX.

Every spec is checked (kind, options and their ranges, scripted names, model folders, API keys,
protocol options) before any folder is written or model loaded. Seats whose client options are
the same share one client, whatever their protocol options, so their prompts are batched
together.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dilemmax.commandline import parse_assignments
from dilemmax.envs.seat_spec import (
    SeatContext,
    SeatKind,
    SeatSpec,
    check_seat,
    parse_seat,
    register_seat_kind,
    resolve_seat,
)
from dilemmax.errors import UsageError  # a mistake in the command line: one line, exit 2
from dilemmax.llm import sampling
from dilemmax.llm.config import TRANSPORT_WORDS, GenerateConfig, field_names
from dilemmax.llm.hf_client import TransformersClient, check_adapter_folder, check_model_folder
from dilemmax.llm.play import Seat
from dilemmax.llm.policy import LLMPolicy
from dilemmax.llm.pricing import read_price_option

# Text-protocol options a model seat may set for itself (the rest are the run's --protocol):
# the Schelling role (item 1.5 of the grid games' system prompt) and the grid games' reveal of
# the hidden rules (an informed seat among uninformed ones).
PROTOCOL_OPTIONS = {"role": None, "reveal": None}
API_OPTIONS = {  # a model behind an API: endpoint, sampling, output mode, attempts
    **sampling.ENDPOINT,
    **sampling.OPENAI,
    **sampling.GENERATION,
    **sampling.CLIENT,
    **PROTOCOL_OPTIONS,
}
SEAT_OPTIONS = {  # model kind -> option -> its range (None: text)
    "openai": API_OPTIONS,
    # Inspect maps a thinking budget onto each provider's own (Anthropic's, Gemini's, ...).
    "inspect": {**API_OPTIONS, "reasoning_tokens": sampling.REASONING_TOKENS},
    "hf": {"adapter": None, "device": None, **sampling.HF, **PROTOCOL_OPTIONS},
}
MODEL_KINDS = tuple(SEAT_OPTIONS)
TARGETS = {"openai": "<model>", "inspect": "<provider>/<model>", "hf": "<model folder>"}


def _reader(allowed):
    """A seat option's reader (:data:`dilemmax.envs.seat_spec.OptionReader`) from its range."""
    if allowed is None:
        return None
    return lambda text, label: sampling.check_option(text, allowed, label)


def _model_options(spec: SeatSpec) -> dict[str, Any]:
    """The seat's own client options (its protocol options left out)."""
    return {k: v for k, v in spec.options.items() if k not in PROTOCOL_OPTIONS}


def _generate(context: SeatContext) -> GenerateConfig:
    return GenerateConfig() if context.generate is None else context.generate


def _check_model(spec: SeatSpec, env, context: SeatContext) -> None:
    """What a model seat needs before any call: its protocol options accepted by the game,
    its API key (openai, inspect), its model and adapter folders whole (hf)."""
    _check_protocol_options(spec.text, env, protocol_options(spec), context.protocol)
    if spec.kind in ("openai", "inspect"):
        _check_api_key(spec, _generate(context))
    if spec.kind == "hf":  # a folder from elsewhere: its files checked before torch loads it
        check_model_folder(spec.target)
        if spec.options.get("adapter"):
            check_adapter_folder(spec.options["adapter"])


def _model_policy(spec: SeatSpec, env, context: SeatContext) -> LLMPolicy:
    """The model a seat names, as a policy; seats with the same client options share one
    (``context.cache``), whatever their protocol options. :func:`_check_model` has run (every
    resolve checks first)."""
    options = _model_options(spec)
    key = _client_key(spec.kind, spec.target, options)
    if key not in context.cache:
        client = _model_client(spec.kind, spec.target, options, _generate(context))
        context.cache[key] = LLMPolicy(client, _client_name(spec.kind, spec.target, options))
    return context.cache[key]


for _kind, _options in SEAT_OPTIONS.items():
    register_seat_kind(
        SeatKind(
            _kind,
            TARGETS[_kind],
            _model_policy,
            options={
                **{name: _reader(allowed) for name, allowed in _options.items()},
                "price": read_price_option,  # dollars per million tokens (llm.pricing)
            },
            check=_check_model,
            target_ok=(lambda target: "/" in target.strip("/")) if _kind == "inspect" else None,
            jittable=False,
            model=True,
        )
    )


def api_settings(options: Mapping[str, Any], generate: GenerateConfig) -> GenerateConfig:
    """Everything an API seat's client is built from: the seat's own model options (``options``
    may hold others: protocol, hf) over the run's ``generate``. Two seats with equal settings
    share a client."""
    return generate.merged({k: v for k, v in options.items() if k in field_names()})


def protocol_options(spec: SeatSpec) -> dict:
    """The seat's own text-protocol options (``role=cooperator``), parsed as ``--protocol``
    values are."""
    pairs = [f"{name}={spec.options[name]}" for name in PROTOCOL_OPTIONS if name in spec.options]
    return parse_assignments(pairs, f"seat {spec.text!r}")


def _check_protocol_options(spec: str, env, own: dict, run: Mapping[str, Any]) -> None:
    """The game's protocol accepts the seat's options (over the run's ``protocol``): a role on
    a game without roles, or a role it does not know, is refused before any call."""
    if not own or env is None:
        return
    try:
        env.text_protocol(**{**run, **own})
    except NotImplementedError as error:
        raise UsageError(f"seat {spec!r}: {error}") from error
    except (TypeError, ValueError) as error:
        shown = ", ".join(f"{k}={v}" for k, v in own.items())
        raise UsageError(f"seat {spec!r}: {shown} is refused by the game: {error}") from error


def _check_api_key(spec: SeatSpec, generate: GenerateConfig) -> None:
    """A seat's key is there now, not found missing after the run folder is made: an OpenAI
    seat without a server of its own needs one (a local server is sent "EMPTY" when the
    variable is unset), and so does an Inspect seat that names its key variable (else Inspect's
    provider reads its own)."""
    options = _model_options(spec)
    settings = api_settings(options, generate)
    key = settings.api_key_env
    needed = settings.base_url is None if spec.kind == "openai" else "api_key_env" in options
    if needed and not os.environ.get(key):
        raise UsageError(
            f"seat {spec.text!r}: no API key: set the environment variable {key} (or give a "
            "base_url for a local server)"
        )


# A Transformers seat's own options, passed on as they are (their defaults are
# TransformersClient's); its sampling comes from the run's GenerateConfig under the seat's.
HF_OWN = ("batch_size", "device")


def _model_client(kind: str, target: str, options: Mapping[str, Any], generate: GenerateConfig):
    """The client of a model seat: ``options`` the seat's own (typed), over ``generate``."""
    if kind == "openai":
        # openai_client needs aiohttp, of the optional llm extra: loaded for an openai seat.
        from dilemmax.llm.openai_client import OpenAIClient

        settings = api_settings(options, generate).settings()
        settings.pop("reasoning_tokens")  # no OpenAI-compatible spelling of a thinking budget
        return OpenAIClient(target, **settings)
    if kind == "inspect":
        # inspect_client needs inspect_ai, the optional inspect extra: loaded for an inspect seat.
        from dilemmax.llm.inspect_client import InspectClient

        settings = api_settings(options, generate).settings()
        # Inspect's providers read their own key variables (ANTHROPIC_API_KEY, ...): a key
        # variable is passed on only where the seat names one.
        settings["api_key_env"] = options.get("api_key_env")
        return InspectClient(target, **settings)
    sampled = generate.merged(
        {k: v for k, v in options.items() if k in ("temperature", "top_p")}
        | ({"max_tokens": options["max_new_tokens"]} if "max_new_tokens" in options else {})
    )
    return TransformersClient(
        target,
        options.get("adapter") or None,
        sampled,
        **{k: options[k] for k in HF_OWN if k in options},
    )


def _client_key(kind: str, target: str, options: dict) -> tuple:
    """What decides a model seat's client: its kind, target and every option but the protocol's
    (so seats that differ only in role share one client, and one batch)."""
    own = sorted((k, str(v)) for k, v in options.items() if k not in PROTOCOL_OPTIONS)
    return ("client", kind, target, tuple(own))


def _client_name(kind: str, target: str, options: dict) -> str:
    """The seat spec less its protocol options (how a shared client is named in errors)."""
    shown = {k: "|".join(v) if isinstance(v, tuple) else v for k, v in options.items()}
    rest = [f"{k}={v}" if v != "" else k for k, v in shown.items() if k not in PROTOCOL_OPTIONS]
    return ",".join([f"{kind}:{target}", *rest])


def build_seat(
    spec: str | SeatSpec,
    env,
    generate: GenerateConfig | None = None,
    protocol: Mapping[str, Any] | None = None,
    cache: dict | None = None,
) -> Seat:
    """The :class:`~dilemmax.llm.play.Seat` a spec names, to play ``env``: any seat kind, a
    model seat's options over ``generate`` (the run's) and its protocol options over
    ``protocol``. Seats with the same client options share one model client (in ``cache``)."""
    cache = {} if cache is None else cache
    spec = parse_seat(spec)
    if spec.text in cache:
        return cache[spec.text]
    context = SeatContext(generate, dict(protocol or {}), cache)
    policy = resolve_seat(spec, env, context)
    own = protocol_options(spec) if spec.seat_kind.model else {}
    seat = cache[spec.text] = Seat(spec.text, policy, own)
    return seat


def seat_entries(entries: Sequence[str] | None, option: str = "--seat") -> dict[str, str]:
    """agent -> spec, from ``agent=<kind>:<target>`` entries (``--seat``)."""
    specs: dict[str, str] = {}
    for entry in entries or []:
        agent, sep, spec = entry.partition("=")
        if not sep or not spec.strip() or not agent.strip():
            raise UsageError(f"{option} expects agent=<kind>:<target>, got {entry!r}")
        specs[agent.strip()] = spec.strip()
    return specs


def check_agents(env, specs: Mapping[str, str], option: str = "--seat") -> None:
    """Every agent a seat is given for is one of ``env``'s."""
    unknown = sorted(set(specs) - set(env.agents))
    if unknown:
        raise UsageError(f"{option} names unknown agent(s) {unknown}; agents: {env.agents}")


def check_specs(
    env,
    specs: Mapping[str, str],
    default: str | None,
    generate: GenerateConfig | None = None,
    protocol: Mapping[str, Any] | None = None,
) -> None:
    """Every seat spec well formed (kind, options and their ranges, scripted names, zoo names,
    run and model folders, API keys, protocol options), before any folder is written or model
    loaded: :func:`build_seat` then meets no mistake of the user's."""
    context = SeatContext(generate, dict(protocol or {}))
    for spec in dict.fromkeys([*specs.values(), *([default] if default else [])]):
        check_seat(spec, env, context)


def seats_for(
    env,
    specs: Mapping[str, str],
    default: str | None,
    generate: GenerateConfig | None = None,
    protocol: Mapping[str, Any] | None = None,
    cache: dict | None = None,
) -> list[Seat]:
    """One seat per agent of ``env``: its own spec, else ``default``."""
    cache = {} if cache is None else cache
    seats = []
    for agent in env.agents:
        spec = specs.get(agent, default)
        if spec is None:
            raise UsageError(f"no seat for {agent}: add --seat {agent}=<kind>:<target> or --seats")
        seats.append(build_seat(spec, env, generate, protocol, cache))
    return seats


def reply_identity(spec: str | SeatSpec, generate: GenerateConfig | None = None) -> dict:
    """What decides a model seat's replies besides what it is asked (the response cache's key,
    :mod:`dilemmax.llm.cache`): its kind and model, its servers, and every generation option,
    its own over the run's ``generate``; not how calls travel (key, timeout, attempts,
    concurrency), its protocol options (they change the prompt, which the key holds) or its
    price. A Transformers seat is named by its model and adapter folders, resolved."""
    spec = parse_seat(spec)
    options = _model_options(spec)
    generate = GenerateConfig() if generate is None else generate
    if spec.kind != "hf":
        settings = api_settings(options, generate)
        named = {
            f.name: getattr(settings, f.name)
            for f in dataclasses.fields(settings)
            if not any(word in (f.metadata["flag"] or f.name) for word in TRANSPORT_WORDS)
        }
        return {"kind": spec.kind, "model": spec.target, "base_url": settings.base_url, **named}
    adapter = options.get("adapter")
    sampled = generate.merged({k: v for k, v in options.items() if k in ("temperature", "top_p")})
    return {
        "kind": "hf",
        "model": str(Path(spec.target).expanduser().resolve()),
        "adapter": str(Path(adapter).expanduser().resolve()) if adapter else None,
        "max_new_tokens": options.get("max_new_tokens", sampled.max_tokens),
        "temperature": sampled.temperature,
        "top_p": sampled.top_p,
        "seed": sampled.seed,
        "batch_size": options.get("batch_size"),  # batches pad prompts, which may move replies
    }
