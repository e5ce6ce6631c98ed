"""The model clients' options checked before any call: sampling, timeouts, attempts, seeds.

Every option a model seat takes, as a flag (``--temperature``) or inside a seat spec
(``openai:m,temperature=0.7``), goes through :func:`check_option`, which parses text totally and
refuses a value outside its range with an :class:`~dilemmax.envs.options.OptionError` naming the
option, the value and the range. The ranges are OpenAI's documented ones (temperature 0..2,
top_p 0..1, max_tokens >= 1); a value the server would reject, or a NaN that serializes as
invalid JSON, is thus refused here instead of costing a run of failed calls.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from dilemmax.envs.options import OptionError

SEED_MAX = 2**31 - 1  # the seeds of every dilemmax command (commandline.seed_int)


@dataclass(frozen=True)
class Range:
    """An option's kind and bounds: ``low <= value <= high`` (``low_open``: ``low < value``)."""

    kind: str  # "float" or "int"
    low: float | None = None
    high: float | None = None
    low_open: bool = False

    def describe(self) -> str:
        what = "a number" if self.kind == "float" else "an integer"
        if self.low is not None and self.high is not None:
            if self.low_open:
                return f"{what} > {_num(self.low)} and <= {_num(self.high)}"
            return f"{what} in {_num(self.low)}..{_num(self.high)}"
        if self.low is not None:
            return f"{what} {'>' if self.low_open else '>='} {_num(self.low)}"
        return what

    def admits(self, value: float) -> bool:
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return self.high is None or value <= self.high


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


# What a model client accepts. A timeout must be finite (an infinite one would hang a run on a
# dead server) and at most a day (the socket layer refuses larger ones).
OPENAI = {
    "temperature": Range("float", 0.0, 2.0),
    "top_p": Range("float", 0.0, 1.0),
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
# The flags of add_model_arguments and the range each must fit (None values mean "the server's
# default" and are not checked).
FLAGS = {
    "--temperature": OPENAI["temperature"],
    "--top-p": OPENAI["top_p"],
    "--max-tokens": OPENAI["max_tokens"],
    "--model-seed": OPENAI["seed"],
    "--timeout": CLIENT["timeout"],
    "--max-attempts": CLIENT["max_attempts"],
    "--concurrency": CLIENT["concurrency"],
}


def check_option(value: Any, allowed: Range, option: str) -> float | int:
    """``value`` (a number, or text from a seat spec) as ``allowed``'s kind, within its range.

    Total: returns the value or raises :class:`OptionError` naming ``option``, the value and the
    range; NaN and infinities are never in a range.
    """
    number = _as_number(value, allowed.kind)
    finite = isinstance(number, int) or (number is not None and math.isfinite(number))
    if not finite or not allowed.admits(number):
        raise OptionError(f"{option}={_show(value)}: expected {allowed.describe()}")
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


def _show(value: Any, limit: int = 40) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_flags(args) -> None:
    """Every model flag of ``args`` (an ``add_model_arguments`` namespace) within its range."""
    for flag, allowed in FLAGS.items():
        value = getattr(args, flag[2:].replace("-", "_"), None)
        if value is not None:
            check_option(value, allowed, flag)


def seat_options(spec: str, options: dict[str, str], ranges: dict[str, Range]) -> dict:
    """A seat spec's numeric options parsed and checked (other options are left as text)."""
    return {
        name: check_option(text, ranges[name], f"seat {spec!r}: {name}") if name in ranges else text
        for name, text in options.items()
    }
