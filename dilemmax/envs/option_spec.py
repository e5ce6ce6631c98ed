"""What an option may be: :class:`Range`, :class:`OptionSpec` and its check, the int32 bound, and
:func:`shown`, how an error message quotes a refused value.

An :class:`OptionSpec` says what a value may be: its kind (``"int"``, ``"float"``, ``"bool"``,
``"str"``, ``"list"``, ``"dict"``, ``"choice"`` or ``"any"``), an inclusive range, the allowed
choices, whether None is allowed, and for lists the spec of each item and the allowed lengths.
``spec.check(name, value)`` returns the value (ints as int, floats as float, choices in their
canonical spelling) or raises :class:`OptionError` naming the option, the value and what is
allowed. Text from a command line is parsed into a value by :mod:`dilemmax.envs.options`.

How an environment declares an option's spec (``Annotated[type, Option(meaning, **spec
fields)]``) is :mod:`dilemmax.envs.option_declaration`.

This module imports nothing else of dilemmax but the error base, so the env base class can name
these specs without importing the registry.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dilemmax.errors import UsageError

# The int32 range, what JAX stores: the largest int an int option may take unless its spec says
# less, the seeds of every command, the counts the trainers keep. Defined here only.
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


class OptionError(UsageError, ValueError):
    """A value that an option does not allow; the message names the option and the range."""


def shown(value: Any, limit: int = 60) -> str:
    """``value`` as an error message quotes what it refused: its repr (a number as written,
    ``5.0`` for ``np.float32(5)``) cut with ``...`` to about ``limit`` characters, text cut
    inside its quotes. The one helper of its kind (tests/test_one_home.py); it never raises,
    so a hostile ``__repr__`` or an integer too long to print cannot hide the real error."""
    try:
        if isinstance(value, str):
            return repr(value if len(value) <= limit else value[: limit - 3] + "...")
        if isinstance(value, numbers.Integral) and abs(int(value)).bit_length() > 128:
            return f"<integer of {abs(int(value)).bit_length()} bits>"
        text = str(value) if isinstance(value, numbers.Number) else repr(value)
    except Exception:  # what is refused may be anything: a failing repr is named by its type
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class Range:
    """The numbers an option allows: ``low <= value <= high``, an end left out where it is open.

    The one range vocabulary of dilemmax: env options (:class:`OptionSpec`), training fields,
    model and generation options (``dilemmax.llm``) and the commands' number arguments.

    Attributes:
        kind: "int" or "float".
        low, high: the bounds (None: unbounded).
        low_open, high_open: the bound itself is not allowed (a learning rate in (0, 1]).
    """

    kind: str = "float"
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def admits(self, number: float) -> bool:
        """Whether ``number`` lies in the range (a NaN in no bounded one)."""
        low, high = self.low, self.high
        if low is not None and not (number > low if self.low_open else number >= low):
            return False
        if high is not None:
            return number < high if self.high_open else number <= high
        return True

    def text(self, interval: bool = False) -> str:
        """The range in words after a noun: " in 0..2", " >= 1", " > 0 and <= 86400" ("" when
        unbounded); with ``interval``, bounded at both ends, in interval notation: " in [0, 1]",
        " in (0, 1]" (how env and training options have always named their float ranges)."""
        low = high = ""
        if self.low is not None:
            low = ("> " if self.low_open else ">= ") + _number(self.low)
        if self.high is not None:
            high = ("< " if self.high_open else "<= ") + _number(self.high)
        if low and high and interval:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f" in {left}{_number(self.low)}, {_number(self.high)}{right}"
        if low and high and not (self.low_open or self.high_open):
            return f" in {_number(self.low)}..{_number(self.high)}"
        return " " + " and ".join(x for x in (low, high) if x) if low or high else ""

    def describe(self) -> str:
        """The allowed values in words, e.g. "an integer >= 1" or "a number in 0..2"."""
        return ("an integer" if self.kind == "int" else "a number") + self.text()


@dataclass(frozen=True)
class OptionSpec:
    """What one option accepts.

    Attributes:
        kind: "int", "float", "bool", "str", "choice", "list", "dict" or "any".
        low, high: bounds of an int or float (None: unbounded; floats must be finite unless
            ``finite`` is False), inclusive unless ``low_open`` / ``high_open`` (:class:`Range`).
        choices: the allowed values of a "str" or "choice" option (strings compare
            case-insensitively when ``casefold``).
        optional: None is allowed.
        item: the spec of each item of a "list".
        min_len, max_len: allowed lengths of a "list".
        finite: a "float" must be finite (NaN and infinities refused).
        casefold: string choices compare case-insensitively.
        low_open, high_open: ``low`` / ``high`` itself is not allowed (a learning rate in
            (0, 1]).
    """

    kind: str = "any"
    low: float | None = None
    high: float | None = None
    choices: tuple | None = None
    optional: bool = False
    item: OptionSpec | None = None
    min_len: int = 0
    max_len: int | None = None
    finite: bool = True
    casefold: bool = False
    low_open: bool = False
    high_open: bool = False

    @property
    def range(self) -> Range:
        """The numbers an int or float option allows."""
        return Range(self.kind, self.low, self.high, self.low_open, self.high_open)

    # ------------------------------------------------------------------ description
    def describe(self) -> str:
        """The allowed values in words, e.g. "an integer in 1..64" or "one of 'a', 'b'"."""
        text = self._describe_kind()
        return f"{text}, or None" if self.optional else text

    def _describe_kind(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind == "int":
            return "an integer" + self.range.text()
        if self.kind == "float":
            finite = "a finite number" if self.finite else "a number"
            return finite + self.range.text(interval=True)
        if self.kind == "bool":
            return "true or false"
        if self.kind == "str":
            return "a string"
        if self.kind == "list":
            size = _length_text(self.min_len, self.max_len)
            items = f" of {self.item.describe()}" if self.item is not None else ""
            return f"a list{size}{items}"
        if self.kind == "dict":
            return "a mapping of names to values"
        return "any value"

    # ------------------------------------------------------------------ checking
    def check(self, name: str, value: Any, owner: str = "") -> Any:
        """``value`` if allowed (ints as int, floats as float); else :class:`OptionError`."""
        if value is None:
            if self.optional or self.kind == "any":
                return None
            raise self._error(name, value, owner)
        checked = self._check_kind(value)
        if checked is NOT_ALLOWED:
            raise self._error(name, value, owner)
        return checked

    def _error(self, name: str, value: Any, owner: str) -> OptionError:
        where = f"{owner}: " if owner else ""
        return OptionError(
            f"{where}option {name}={shown(value)} is not allowed: expected {self.describe()}"
        )

    def _check_kind(self, value: Any) -> Any:
        if self.kind == "int":
            return self._in_range(_as_int(value))
        if self.kind == "float":
            return self._in_range(_as_float(value, self.finite))
        if self.kind == "bool":
            return bool(value) if isinstance(value, bool | np.bool_) else NOT_ALLOWED
        if self.kind in ("str", "choice"):
            return self._choice(value)
        if self.kind == "list":
            return self._list(value)
        if self.kind == "dict":
            return dict(value) if isinstance(value, Mapping) else NOT_ALLOWED
        return value

    def _in_range(self, number: Any) -> Any:
        if number is NOT_ALLOWED:
            return NOT_ALLOWED
        return number if self.range.admits(number) else NOT_ALLOWED

    def _choice(self, value: Any) -> Any:
        if self.kind == "str" and not isinstance(value, str):
            return NOT_ALLOWED
        if self.choices is None:
            return value
        for choice in self.choices:
            if _same_choice(choice, value, self.casefold):
                return choice if isinstance(choice, str) else value
        return NOT_ALLOWED

    def _list(self, value: Any) -> Any:
        if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence | np.ndarray):
            return NOT_ALLOWED
        items = list(value)
        if len(items) < self.min_len or (self.max_len is not None and len(items) > self.max_len):
            return NOT_ALLOWED
        if self.item is None:
            return items
        out = []
        for item in items:
            checked = self.item._check_kind(item) if item is not None else NOT_ALLOWED
            if checked is NOT_ALLOWED:
                return NOT_ALLOWED
            out.append(checked)
        return out


# What a check returns for a value its spec refuses (None may be an allowed value).
NOT_ALLOWED = object()


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def _length_text(low: int, high: int | None) -> str:
    if high is None:
        return f" of at least {low} item(s)" if low > 0 else ""
    if low == high:
        return f" of {low} item(s)"
    return f" of {low}..{high} items"


def _same_choice(choice: Any, value: Any, casefold: bool) -> bool:
    if isinstance(choice, str):
        if not isinstance(value, str):
            return False
        return choice.lower() == value.lower() if casefold else choice == value
    if isinstance(value, bool | np.bool_ | str):
        return False
    integer = _as_int(value)
    return integer is not NOT_ALLOWED and integer == choice


def _as_int(value: Any) -> Any:
    """An int from a Python or numpy integer (not bool, not float: 2.7 and 3.0 are refused)."""
    if isinstance(value, bool | np.bool_):
        return NOT_ALLOWED
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "iu":
        return int(value)
    return NOT_ALLOWED


def _as_float(value: Any, finite: bool) -> Any:
    """A float from a real number (ints included, bools not)."""
    if isinstance(value, bool | np.bool_):
        return NOT_ALLOWED
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "iuf":
        value = value.item()
    if not isinstance(value, numbers.Real):
        return NOT_ALLOWED
    try:
        number = float(value)
    except (OverflowError, ValueError):
        return NOT_ALLOWED
    if finite and not math.isfinite(number):
        return NOT_ALLOWED
    return number
