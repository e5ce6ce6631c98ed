"""What a play session is told, and the checks of it made before anything is built or written.

:class:`SessionOptions` holds the options ``dilemmax play``, ``dilemmax experiment`` and
``dilemmax scenarios evaluate`` share (their flags in its docstring); :class:`Shard` is the
share of the episodes a shard plays (``--shard i/N``); :func:`check_run_options` refuses what
no session can play, in one line, when a SessionOptions is made (so every one is checked once,
where it is built, and is handed on as it is); :func:`sampling_identity` and
:func:`model_identity` are the model options a run's identity names. The session that plays
under them is :mod:`dilemmax.llm.session`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dilemmax.envs.option_spec import INT32_MAX, Range
from dilemmax.errors import UsageError  # a mistake in the command line: one line, exit 2
from dilemmax.llm import sampling
from dilemmax.llm.cache import cache_folder
from dilemmax.llm.config import TRANSPORT_WORDS, GenerateConfig
from dilemmax.llm.limits import Limits
from dilemmax.llm.pricing import Price


# --------------------------------------------------------------------------- shards
@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (``--shard i/N``): episode g of the whole run is its when
    g mod count == index."""

    index: int = 0
    count: int = 1

    @classmethod
    def parse(cls, text: str | None) -> Shard:
        """``"i/N"`` with 0 <= i < N (None: the whole run). Total: a one-line error otherwise."""
        if text is None:
            return cls()
        index, sep, count = str(text).partition("/")
        if not (sep and index.strip().isdigit() and count.strip().isdigit()):
            raise UsageError(f"--shard {text!r}: expected i/N, e.g. 0/4 (shards 0/4 .. 3/4)")
        i, n = int(index), int(count)
        if n < 1 or i >= n or n > 1_000_000:
            raise UsageError(f"--shard {text!r}: need 0 <= i < N <= 1000000")
        return cls(i, n)

    @property
    def sharded(self) -> bool:
        return self.count > 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


# --------------------------------------------------------------------------- options
ON_CALL_ERROR = ("stop", "invalid")  # a call failed after its retries: stop the run, or go on


@dataclass(frozen=True)
class SessionOptions:
    """How a session plays its parts: the options ``dilemmax play``, ``experiment`` and
    ``scenarios evaluate`` share (their flags in parentheses).

    Attributes:
        seats: agent -> seat spec (``--seat agent=spec``), under a part's own seats.
        default_seat: the spec of every seat neither names (``--seats``).
        generate: the model options of every model seat, under a seat's own.
        protocol: text-protocol options of every part (``--protocol``), under a part's own.
        envs: environments stepped together (``--envs``).
        seed: the run's seed (``--seed``).
        max_steps: stop each episode after this many steps (None: the game's own end).
        on_call_error: a call that failed after its retries: ``"stop"`` the run (resume later)
            or play the ``"invalid"`` move and go on.
        out: the run folder (transcript.jsonl; None: nothing written).
        resume: continue the run in ``out``.
        progress: show a progress bar on stderr.
        shard: play only this shard of the episodes (``--shard i/N``; text is parsed).
        prices: model -> its :class:`~dilemmax.llm.pricing.Price` (``--prices FILE``), for
            the plan's and the results' costs; a seat's own ``price=`` comes first.
        limits: what the run may spend (``--max-calls``, ...: :mod:`dilemmax.llm.limits`).
        cache: the response cache's folder (``--cache [DIR]``, True: the default; None: off).
    """

    seats: Mapping[str, str] = field(default_factory=dict)
    default_seat: str | None = None
    generate: GenerateConfig = field(default_factory=GenerateConfig)
    protocol: Mapping[str, Any] = field(default_factory=dict)
    envs: int = 16
    seed: int = 0
    max_steps: int | None = None
    on_call_error: str = "stop"
    out: Path | None = None
    resume: bool = False
    progress: bool = True
    shard: Shard = field(default_factory=Shard)
    prices: Mapping[str, Price] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    cache: Path | None = None

    def __post_init__(self) -> None:
        if isinstance(self.out, str):
            object.__setattr__(self, "out", Path(self.out))
        object.__setattr__(self, "cache", cache_folder(self.cache))
        if not isinstance(self.shard, Shard):
            object.__setattr__(self, "shard", Shard.parse(self.shard))
        check_run_options(self)  # the one check: what is made is valid, and is passed on as is


# --------------------------------------------------------------------------- checks
PLAY_SEED = Range("int", 0, INT32_MAX)

# The model options a run's identity names as its "sampling" list, in this order.
SAMPLING_IDENTITY = ("temperature", "top_p", "max_tokens", "seed")


def check_run_options(options: SessionOptions) -> None:
    """The options every session reads, checked by :class:`SessionOptions` when it is made
    (before anything is built or written); a one-line UsageError naming the flag."""
    if options.envs < 1:
        raise UsageError("--envs must be >= 1")
    if options.max_steps is not None and options.max_steps < 1:
        raise UsageError("--max-steps must be >= 1")
    if options.resume and not options.out:
        raise UsageError("--resume needs the --out folder of the run to continue")
    if options.on_call_error not in ON_CALL_ERROR:
        raise UsageError(
            f"--on-call-error {options.on_call_error!r}: expected {' or '.join(ON_CALL_ERROR)}"
        )
    sampling.check_option(options.seed, PLAY_SEED, "--seed")
    options.generate.check()
    if options.shard.sharded and not options.out:
        raise UsageError("--shard needs --out: a shard's transcript and record are merged later")
    options.limits.check()


def sampling_identity(generate: GenerateConfig) -> list:
    """The sampling values a run's identity names: temperature, top_p, max_tokens, seed."""
    return [getattr(generate, name) for name in SAMPLING_IDENTITY]


def model_identity(generate: GenerateConfig) -> dict:
    """The model options that differ from their defaults and may change replies (not the
    sampling values, not how calls travel): what a run's identity adds to its sampling list.
    Each is named as its flag (``output_mode``), as runs before GenerateConfig named them."""
    default = GenerateConfig()
    named = {}
    for f in dataclasses.fields(GenerateConfig):
        flag = (f.metadata["flag"] or f.name).removeprefix("--").replace("-", "_")
        if f.name in SAMPLING_IDENTITY or any(word in flag for word in TRANSPORT_WORDS):
            continue
        if getattr(generate, f.name) != getattr(default, f.name):
            named[flag] = getattr(generate, f.name)
    return named
