"""Seats from the command line: ``--seat agent=<kind>:<target>[,option=value...]`` and ``--seats``.

A seat is ``openai:<model>``, ``hf:<model folder>[,adapter=<folder>]``, ``scripted:<name>`` or
``trained:<run folder>[,seed=<k>][,greedy]``. Every spec is checked (kind, options and their
ranges, scripted names, model folders) before any folder is written or model loaded; the same
model spec on several seats is one client, so their prompts are batched together.
"""

from __future__ import annotations

import urllib.parse

from dilemmax.agents.trained import TrainedPolicy
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
            f"seat {spec!r} has no kind; use openai:<model>, hf:<path>, scripted:<name> or "
            "trained:<run dir>"
        )
    kind, rest = spec.split(":", 1)
    target, *options = rest.split(",")
    parsed = {}
    for option in options:
        name, _, value = option.partition("=")
        parsed[name.strip()] = value.strip()
    if not target:
        raise UsageError(f"seat {spec!r} names no {kind} target")
    return kind.strip(), target.strip(), parsed


TRAINED_SEED = sampling.Range("int", 0)  # which of the run's training seeds
SEAT_OPTIONS = {  # kind -> option -> its range (None: text, or a flag without a value)
    "openai": {**sampling.OPENAI},
    "hf": {"adapter": None, "device": None, **sampling.HF},
    "scripted": {},
    "trained": {"seed": TRAINED_SEED, "greedy": None},
}


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
    if kind == "openai":
        _check_base_url(args.base_url)
    if kind in ("openai", "hf"):
        sampling.check_flags(args)
    ranges = {name: allowed for name, allowed in known.items() if allowed is not None}
    return sampling.seat_options(spec, options, ranges)


def _check_base_url(url: str | None) -> None:
    """An OpenAI-compatible server's address: http(s)://host[...]; anything else would only fail
    every call after its retries."""
    if url is None:
        return
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"--base-url {url!r}: expected http://host:port/v1 or https://...")


def _model_client(kind: str, target: str, options: dict, args):
    """The client of a model seat; ``options`` as :func:`seat_options` returns them."""
    if kind == "openai":
        # openai_client needs tenacity, of the optional llm extra: loaded for an openai seat.
        from dilemmax.llm.openai_client import OpenAIClient

        return OpenAIClient(
            target,
            base_url=args.base_url,
            api_key_env=args.api_key_env,
            temperature=options.get("temperature", args.temperature),
            top_p=options.get("top_p", args.top_p),
            max_tokens=options.get("max_tokens", args.max_tokens),
            seed=options.get("seed", args.model_seed),
            structured_output=not args.no_structured_output,
            timeout=args.timeout,
            max_attempts=args.max_attempts,
            concurrency=args.concurrency,
        )
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


def build_seat(spec: str, env, args, cache: dict):
    """The :class:`~dilemmax.llm.play.Seat` a spec names (model seats shared per spec)."""
    if spec in cache:
        return cache[spec]
    kind, target, options = _split_spec(spec)
    options = seat_options(spec, kind, options, args)
    if kind in ("openai", "hf"):
        seat = Seat(spec, LLMPolicy(_model_client(kind, target, options, args), spec))
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
    p.add_argument("--base-url", help="OpenAI-compatible server, e.g. http://localhost:8000/v1")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="env variable with the key")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--max-tokens", type=int, default=512, help="reply length cap")
    p.add_argument("--model-seed", type=int, default=None, help="sampling seed sent to models")
    p.add_argument("--no-structured-output", action="store_true",
                   help="never ask the server for JSON-schema output")  # fmt: skip
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per request attempt")
    p.add_argument("--max-attempts", type=int, default=6, help="attempts per request")
    p.add_argument("--concurrency", type=int, default=16, help="requests in flight per model")
