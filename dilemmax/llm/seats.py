"""The language-model seats: what every model seat shares, and the seats of a batched play run.

A seat is written in the one grammar of :mod:`dilemmax.envs.seat_spec`
(``kind:target[,option=value|,flag]``). A model kind is a :class:`ModelProvider` declared in its
own module and made a seat kind by :func:`model_seat_kind` (dilemmax's own: ``openai:<model>``,
``inspect:<provider>/<model>`` and ``hf:<model folder>``, in :mod:`dilemmax.llm.providers`),
named by an entry point of the ``dilemmax.seats`` group: this module names none of them. A
model seat names its own endpoint and sampling (``openai:m,base_url=http://a/v1|http://b/v1,
api_key_env=KEY,temperature=0.2,top_k=20,presence_penalty=1.5,reasoning_effort=low,
output=json_object``; what a seat leaves out comes from the run's
:class:`~dilemmax.llm.config.GenerateConfig`), and, whatever its provider, its own
text-protocol options (``role=cooperator``, passed on as :attr:`Seat.protocol_options`) and its
price in dollars per million tokens (``price=0.15/0.60``, or ``price=0.15/0.075/0.60`` with the
cached-input rate: :mod:`dilemmax.llm.pricing`). Several base URLs, joined by ``|``, are
replicas of one model that the client spreads its calls over. ``scripted:``, ``trained:`` and
``zoo:`` seats (and a bare scripted name) play inside JAX.

Every spec is checked (kind, options and their ranges, scripted names, the provider's own checks:
model folders, API keys; protocol options) before any folder is written or model loaded. Seats
whose client options are the same share one client, whatever their protocol options, so their
prompts are batched together.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dilemmax.commandline import parse_assignments
from dilemmax.envs.seat_spec import (
    SeatContext,
    SeatKind,
    SeatSpec,
    check_seat,
    parse_seat,
    resolve_seat,
    seat_kind,
    seat_kinds,
)
from dilemmax.errors import UsageError  # a mistake in the command line: one line, exit 2
from dilemmax.llm import sampling
from dilemmax.llm.config import GenerateConfig
from dilemmax.llm.play import Seat
from dilemmax.llm.policy import LLMPolicy
from dilemmax.llm.pricing import read_price_option

# Text-protocol options a model seat may set for itself (the rest are the run's --protocol):
# the Schelling role (item 1.5 of the grid games' system prompt) and the grid games' reveal of
# the hidden rules (an informed seat among uninformed ones).
PROTOCOL_OPTIONS = {"role": None, "reveal": None}

# ``client(target, options, generate)``, ``identity(target, options, generate)``: ``options``
# the seat's own client options (typed; its protocol options and price left out), ``generate``
# the run's model options.
ClientFactory = Callable[[str, Mapping[str, Any], GenerateConfig], Any]
Identity = Callable[[str, Mapping[str, Any], GenerateConfig], dict]


@dataclass(frozen=True)
class ModelProvider:
    """Everything about one kind of model seat, declared in its own module.

    Attributes:
        name: the seat kind, as written before the colon (``openai``).
        target: its target's form, for messages (``<model>``).
        options: the seat's own client options, name -> range (a
            :func:`~dilemmax.llm.sampling.check_option` range; None: text kept as written).
            Every model seat takes :data:`PROTOCOL_OPTIONS` and ``price`` besides.
        client: builds the seat's client (``complete(requests) -> completions``: an
            :class:`~dilemmax.llm.aio.BatchedClient`, or any object with that method).
        identity: what decides its replies besides what it is asked (the response cache's key,
            :mod:`dilemmax.llm.cache`): never the key, timeouts or attempts.
        check: ``check(spec, options, generate)``: what is checked before any folder is written
            or model loaded (its key variable, its folders), a one-line UsageError; None:
            nothing.
        target_ok: whether a target is well formed (``inspect:`` needs ``provider/model``).
    """

    name: str
    target: str
    options: Mapping[str, Any]
    client: ClientFactory
    identity: Identity
    check: Callable[[SeatSpec, Mapping[str, Any], GenerateConfig], None] | None = None
    target_ok: Callable[[str], bool] | None = None


@dataclass(frozen=True)
class ModelSeatKind(SeatKind):
    """The seat kind of a :class:`ModelProvider` (made by :func:`model_seat_kind`)."""

    provider: ModelProvider | None = None


def model_seat_kind(provider: ModelProvider) -> ModelSeatKind:
    """The seat kind that seats ``provider``'s models: what an entry point of the
    ``dilemmax.seats`` group names."""
    options = {**provider.options, **PROTOCOL_OPTIONS}
    return ModelSeatKind(
        provider.name,
        provider.target,
        _model_policy,
        options={
            **{name: _reader(allowed) for name, allowed in options.items()},
            "price": read_price_option,  # dollars per million tokens (llm.pricing)
        },
        check=_check_model,
        target_ok=provider.target_ok,
        jittable=False,
        model=True,
        provider=provider,
    )


def model_kinds() -> tuple[str, ...]:
    """The declared seat kinds that are language models (those that load)."""
    return tuple(name for name in seat_kinds() if _provider_or_none(name) is not None)


def model_seat_options() -> dict[str, dict[str, Any]]:
    """model kind -> every option its seats take but ``price``, name -> range."""
    return {name: {**_provider(name).options, **PROTOCOL_OPTIONS} for name in model_kinds()}


def _provider_or_none(name: str) -> ModelProvider | None:
    try:
        kind = seat_kind(name)
    except UsageError:  # a kind that does not load: named where it is asked for
        return None
    return kind.provider if isinstance(kind, ModelSeatKind) else None


def _provider(name: str) -> ModelProvider:
    provider = _provider_or_none(name)
    if provider is None:
        seat_kind(name)  # its own one-line error, if it has one
        raise UsageError(f"{name} seats are no language model")
    return provider


def _reader(allowed):
    """A seat option's reader (:data:`dilemmax.envs.seat_spec.OptionReader`) from its range."""
    if allowed is None:
        return None
    return lambda text, label: sampling.check_option(text, allowed, label)


def _model_options(spec: SeatSpec) -> dict[str, Any]:
    """The seat's own client options (its protocol options and price left out)."""
    return {k: v for k, v in spec.options.items() if k not in PROTOCOL_OPTIONS and k != "price"}


def _generate(context: SeatContext) -> GenerateConfig:
    return GenerateConfig() if context.generate is None else context.generate


def _check_model(spec: SeatSpec, env, context: SeatContext) -> None:
    """What a model seat needs before any call: its protocol options accepted by the game, and
    its provider's own checks (a key, a folder)."""
    _check_protocol_options(spec.text, env, protocol_options(spec), context.protocol)
    provider = _provider(spec.kind)
    if provider.check is not None:
        provider.check(spec, _model_options(spec), _generate(context))


def _model_policy(spec: SeatSpec, env, context: SeatContext) -> LLMPolicy:
    """The model a seat names, as a policy; seats with the same client options share one
    (``context.cache``), whatever their protocol options. :func:`_check_model` has run (every
    resolve checks first)."""
    options = _model_options(spec)
    key = _client_key(spec.kind, spec.target, spec.options)
    if key not in context.cache:
        client = _model_client(spec.kind, spec.target, options, _generate(context))
        name = _client_name(spec.kind, spec.target, spec.options)
        context.cache[key] = LLMPolicy(client, name)
    return context.cache[key]


def _model_client(kind: str, target: str, options: Mapping[str, Any], generate: GenerateConfig):
    """The client of a model seat: ``options`` the seat's own (typed), over ``generate``."""
    return _provider(kind).client(target, options, generate)


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


def _client_key(kind: str, target: str, options: Mapping[str, Any]) -> tuple:
    """What decides a model seat's client: its kind, target and every option but the protocol's
    (so seats that differ only in role share one client, and one batch)."""
    own = sorted((k, str(v)) for k, v in options.items() if k not in PROTOCOL_OPTIONS)
    return ("client", kind, target, tuple(own))


def _client_name(kind: str, target: str, options: Mapping[str, Any]) -> str:
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
    :mod:`dilemmax.llm.cache`): its provider's identity of its model (kind, model or folder,
    servers, every generation option, its own over the run's ``generate``); not how calls
    travel (key, timeout, attempts, concurrency), its protocol options (they change the prompt,
    which the key holds) or its price."""
    spec = parse_seat(spec)
    generate = GenerateConfig() if generate is None else generate
    return _provider(spec.kind).identity(spec.target, _model_options(spec), generate)
