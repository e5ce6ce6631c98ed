"""Seats from the command line: ``--seat agent=<kind>:<target>[,option=value...]`` and ``--seats``.

A seat is ``openai:<model>``, ``inspect:<provider>/<model>``, ``hf:<model folder>``,
``scripted:<name>`` or ``trained:<run folder>[,seed=<k>][,greedy]``. A model seat names its own
endpoint and sampling (``openai:m,base_url=http://a/v1|http://b/v1,api_key_env=KEY,
temperature=0.2,top_k=20,presence_penalty=1.5,reasoning_effort=low,output=json_object``; what a
seat leaves out comes from the flags) and its own text-protocol options (``role=cooperator``,
passed on as :attr:`Seat.protocol_options`). Several base URLs, joined by ``|``, are replicas of
one model that the client spreads its calls over.

Every spec is checked (kind, options and their ranges, scripted names, model folders, API keys,
protocol options) before any folder is written or model loaded. Seats whose client options are
the same share one client, whatever their protocol options, so their prompts are batched
together.
"""

from __future__ import annotations

import os

from dilemmax.agents.trained import TrainedPolicy
from dilemmax.commandline import parse_assignments
from dilemmax.envs.policies import policies_for
from dilemmax.errors import UsageError  # a mistake in the command line: one line, exit 2
from dilemmax.llm import sampling
from dilemmax.llm.hf_client import TransformersClient, check_adapter_folder, check_model_folder
from dilemmax.llm.play import Seat
from dilemmax.llm.policy import LLMPolicy


def _split_spec(spec: str) -> tuple[str, str, dict[str, str]]:
    """``"hf:path,adapter=a,greedy"`` -> ("hf", "path", {"adapter": "a", "greedy": ""})."""
    if ":" not in spec:
        raise UsageError(
            f"seat {spec!r} has no kind; use openai:<model>, inspect:<provider>/<model>, "
            "hf:<path>, scripted:<name> or trained:<run dir>"
        )
    kind, rest = spec.split(":", 1)
    target, *options = rest.split(",")
    parsed = {}
    for option in options:
        name, _, value = option.partition("=")
        if name.strip() in parsed:
            raise UsageError(f"seat {spec!r} gives {name.strip()} twice")
        parsed[name.strip()] = value.strip()
    if not target:
        raise UsageError(f"seat {spec!r} names no {kind} target")
    if kind.strip() == "inspect" and "/" not in target.strip("/"):
        raise UsageError(f"seat {spec!r}: expected inspect:<provider>/<model>")
    return kind.strip(), target.strip(), parsed


TRAINED_SEED = sampling.Range("int", 0)  # which of the run's training seeds
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
SEAT_OPTIONS = {  # kind -> option -> its range (None: text, or a flag without a value)
    "openai": API_OPTIONS,
    # Inspect maps a thinking budget onto each provider's own (Anthropic's, Gemini's, ...).
    "inspect": {**API_OPTIONS, "reasoning_tokens": sampling.Range("int", 1)},
    "hf": {"adapter": None, "device": None, **sampling.HF, **PROTOCOL_OPTIONS},
    "scripted": {},
    "trained": {"seed": TRAINED_SEED, "greedy": None},
}
MODEL_KINDS = ("openai", "inspect", "hf")


def seat_options(spec: str, kind: str, options: dict[str, str], args) -> dict:
    """A seat's options, known to its kind and within range (and for a model seat, the model
    flags), checked before any call or load: a one-line UsageError naming the option otherwise."""
    if kind not in SEAT_OPTIONS:
        kinds = ", ".join(SEAT_OPTIONS)
        raise UsageError(f"unknown seat kind {kind!r} in {spec!r}; use {kinds}")
    known = SEAT_OPTIONS[kind]
    unknown = set(options) - set(known)
    if unknown:
        allowed = ", ".join(known) or "none"
        raise UsageError(
            f"{kind} seat options {sorted(unknown)} are not known (in {spec!r}); "
            f"{kind} seats take: {allowed}"
        )
    if options.get("greedy"):
        raise UsageError(f"seat {spec!r}: greedy takes no value (write ',greedy')")
    if kind in MODEL_KINDS:
        sampling.check_flags(args)
    ranges = {name: allowed for name, allowed in known.items() if allowed is not None}
    return sampling.seat_options(spec, options, ranges)


def api_settings(options: dict, args) -> dict:
    """Everything an API seat's client is built from: the seat's own options, the flags for the
    rest (``--base-url``, ``--temperature``, ...). Two seats with equal settings share a client."""
    flag_urls = getattr(args, "base_url", None)
    output = getattr(args, "output_mode", None)
    if output is None:
        output = "text" if getattr(args, "no_structured_output", False) else "json_schema"
    defaults = {
        "base_url": sampling.parse_urls(flag_urls) if flag_urls else None,
        "api_key_env": getattr(args, "api_key_env", "OPENAI_API_KEY"),
        "temperature": getattr(args, "temperature", 0.0),
        "top_p": getattr(args, "top_p", None),
        "top_k": getattr(args, "top_k", None),
        "presence_penalty": getattr(args, "presence_penalty", None),
        "max_tokens": getattr(args, "max_tokens", 512),
        "seed": getattr(args, "model_seed", None),
        "reasoning_effort": getattr(args, "reasoning_effort", None),
        "reasoning_tokens": None,
        "output": output,
        "timeout": getattr(args, "timeout", 60.0),
        "max_attempts": getattr(args, "max_attempts", 6),
        "concurrency": getattr(args, "concurrency", 16),
    }
    return {name: options.get(name, value) for name, value in defaults.items()}


def protocol_options(spec: str, options: dict) -> dict:
    """The seat's own text-protocol options (``role=cooperator``), parsed as ``--protocol``
    values are."""
    pairs = [f"{name}={options[name]}" for name in PROTOCOL_OPTIONS if name in options]
    return parse_assignments(pairs, f"seat {spec!r}")


def _check_protocol_options(spec: str, env, own: dict, args) -> None:
    """The game's protocol accepts the seat's options (with the run's ``--protocol``): a role on
    a game without roles, or a role it does not know, is refused before any call."""
    if not own or env is None:
        return
    run = parse_assignments(getattr(args, "protocol", None), "--protocol")
    try:
        env.text_protocol(**{**run, **own})
    except NotImplementedError as error:
        raise UsageError(f"seat {spec!r}: {error}") from error
    except (TypeError, ValueError) as error:
        shown = ", ".join(f"{k}={v}" for k, v in own.items())
        raise UsageError(f"seat {spec!r}: {shown} is refused by the game: {error}") from error


def _check_api_key(spec: str, kind: str, options: dict, args) -> None:
    """A seat's key is there now, not found missing after the run folder is made: an OpenAI
    seat without a server of its own needs one (a local server is sent "EMPTY" when the
    variable is unset), and so does an Inspect seat that names its key variable (else Inspect's
    provider reads its own)."""
    settings = api_settings(options, args)
    key = settings["api_key_env"]
    needed = settings["base_url"] is None if kind == "openai" else "api_key_env" in options
    if needed and not os.environ.get(key):
        raise UsageError(
            f"seat {spec!r}: no API key: set the environment variable {key} (or give a "
            "base_url for a local server)"
        )


def _model_client(kind: str, target: str, options: dict, args):
    """The client of a model seat; ``options`` as :func:`seat_options` returns them."""
    if kind == "openai":
        # openai_client needs aiohttp, of the optional llm extra: loaded for an openai seat.
        from dilemmax.llm.openai_client import OpenAIClient

        settings = api_settings(options, args)
        settings.pop("reasoning_tokens")  # no OpenAI-compatible spelling of a thinking budget
        return OpenAIClient(target, **settings)
    if kind == "inspect":
        # inspect_client needs inspect_ai, the optional inspect extra: loaded for an inspect seat.
        from dilemmax.llm.inspect_client import InspectClient

        settings = api_settings(options, args)
        # Inspect's providers read their own key variables (ANTHROPIC_API_KEY, ...): a key
        # variable is passed on only where the seat names one.
        settings["api_key_env"] = options.get("api_key_env")
        return InspectClient(target, **settings)
    return TransformersClient(
        target,
        adapter=options.get("adapter") or None,
        max_new_tokens=int(options.get("max_new_tokens", args.max_tokens)),
        temperature=float(options.get("temperature", args.temperature)),
        top_p=options.get("top_p", 1.0 if args.top_p is None else args.top_p),
        seed=0 if args.model_seed is None else args.model_seed,
        batch_size=int(options.get("batch_size", 32)),
        device=options.get("device", "cpu"),
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


def build_seat(spec: str, env, args, cache: dict):
    """The :class:`~dilemmax.llm.play.Seat` a spec names (seats with the same client options
    share one model client, whatever their protocol options)."""
    if spec in cache:
        return cache[spec]
    kind, target, options = _split_spec(spec)
    options = seat_options(spec, kind, options, args)
    if kind in MODEL_KINDS:
        own = protocol_options(spec, options)
        _check_protocol_options(spec, env, own, args)
        key = _client_key(kind, target, options)
        if key not in cache:
            client = _model_client(kind, target, options, args)
            cache[key] = LLMPolicy(client, _client_name(kind, target, options))
        seat = Seat(spec, cache[key], own)
    elif kind == "scripted":
        choices = policies_for(env)
        if target not in choices:
            raise UsageError(f"no scripted policy {target!r} for {args.env}: {sorted(choices)}")
        seat = Seat(spec, choices[target])
    else:  # trained
        try:
            # With env=, the run is checked against the game it is to play (its id, agents,
            # observations and actions) before any call is made.
            policy = TrainedPolicy.load(
                target, seed=options.get("seed", 0), greedy="greedy" in options, env=env
            )
        except (FileNotFoundError, ValueError, KeyError, OSError) as error:
            raise UsageError(f"cannot load trained seat {target!r}: {error}") from error
        seat = Seat(spec, policy)
    cache[spec] = seat
    return seat


def seat_specs(env, args) -> dict[str, str]:
    """agent -> spec, from ``--seat agent=spec`` entries and the ``--seats`` default."""
    specs: dict[str, str] = {}
    for entry in args.seat or []:
        agent, sep, spec = entry.partition("=")
        if not sep or not spec:
            raise UsageError(f"--seat expects agent=<kind>:<target>, got {entry!r}")
        specs[agent.strip()] = spec.strip()
    unknown = sorted(set(specs) - set(env.agents))
    if unknown and not args.grid:
        raise UsageError(f"--seat names unknown agent(s) {unknown}; agents: {env.agents}")
    return specs


def check_specs(env, specs: dict[str, str], default: str | None, args) -> None:
    """Every seat spec well formed (kind, options and their ranges, scripted names, hf model
    folders), before any folder is written or model loaded: :func:`build_seat` then meets no
    mistake of the user's."""
    choices = None
    for spec in dict.fromkeys([*specs.values(), *([default] if default else [])]):
        kind, target, options = _split_spec(spec)
        options = seat_options(spec, kind, options, args)
        if kind in MODEL_KINDS:
            _check_protocol_options(spec, env, protocol_options(spec, options), args)
        if kind in ("openai", "inspect"):
            _check_api_key(spec, kind, options, args)
        if kind == "hf":  # a folder from elsewhere: its files checked before torch loads it
            check_model_folder(target)
            if options.get("adapter"):
                check_adapter_folder(options["adapter"])
        if kind == "scripted":
            choices = policies_for(env) if choices is None else choices
            if target not in choices:
                raise UsageError(f"no scripted policy {target!r} for {args.env}: {sorted(choices)}")


def seats_for(env, specs: dict[str, str], default: str | None, args, cache) -> list:
    seats = []
    for agent in env.agents:
        spec = specs.get(agent, default)
        if spec is None:
            raise UsageError(f"no seat for {agent}: add --seat {agent}=<kind>:<target> or --seats")
        seats.append(build_seat(spec, env, args, cache))
    return seats


def add_model_arguments(p) -> None:
    """The model-client options :func:`build_seat` reads (``dilemmax redteam play`` too)."""
    p.add_argument("--base-url", help="OpenAI-compatible server, e.g. http://localhost:8000/v1; "
                   "replicas of one model joined by | (http://a/v1|http://b/v1)")  # fmt: skip
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="env variable with the key")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--top-k", type=int, default=None, help="top-k sampling (vLLM, SGLang, ...)")
    p.add_argument("--presence-penalty", type=float, default=None, help="-2..2")
    p.add_argument("--max-tokens", type=int, default=512, help="reply length cap")
    p.add_argument("--model-seed", type=int, default=None, help="sampling seed sent to models")
    p.add_argument("--reasoning-effort", choices=sampling.REASONING_EFFORTS, default=None,
                   help="asked of reasoning models (default: the server's)")  # fmt: skip
    p.add_argument("--output-mode", choices=sampling.OUTPUT_MODES, default=None,
                   help="how replies are asked for: the prompt's JSON schema (default), JSON "
                   "mode, or text the game's parser reads")  # fmt: skip
    p.add_argument("--no-structured-output", action="store_true",
                   help="never ask for JSON-schema output (--output-mode text)")  # fmt: skip
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per request attempt")
    p.add_argument("--max-attempts", type=int, default=6, help="attempts per request")
    p.add_argument("--concurrency", type=int, default=16,
                   help="requests in flight per model (over all its base URLs)")  # fmt: skip
