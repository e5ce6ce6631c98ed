"""What an option may be: :class:`OptionSpec`, its check, and specs read from type annotations.

An :class:`OptionSpec` says what a value may be: its kind (``"int"``, ``"float"``, ``"bool"``,
``"str"``, ``"list"``, ``"dict"``, ``"choice"`` or ``"any"``), an inclusive range, the allowed
choices, whether None is allowed, and for lists the spec of each item and the allowed lengths.
``spec.check(name, value)`` returns the value (ints as int, floats as float, choices in their
canonical spelling) or raises :class:`OptionError` naming the option, the value and what is
allowed. Text from a command line is parsed into a value by :mod:`dilemmax.envs.options`.

An environment declares each constructor option once, in its parameter's annotation:
``Annotated[type, Option(meaning, **spec fields)]``. :func:`signature_options` reads the
declarations back (``MultiAgentEnv.option_specs``, the ``Args:`` of the class docstring,
:func:`options_section`, and the game's docs page are made from them).

This module imports nothing else of dilemmax but the error base, so the env base class can name
these specs without importing the registry.
"""

from __future__ import annotations

import inspect
import math
import numbers
import re
import textwrap
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
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


# ----------------------------------------------------------------------------- specs from types
_SIMPLE_KINDS = {"int": "int", "float": "float", "bool": "bool", "str": "str", "Any": "any"}


def spec_from_annotation(annotation: Any) -> OptionSpec:
    """A spec from a type annotation (a type or its string form, as ``from __future__ import
    annotations`` leaves it): ``int``, ``float | None``, ``list[int]``, ``dict[str, Any]``...

    Anything it does not understand becomes ``OptionSpec("any")`` (accepted as given)."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    if not isinstance(annotation, str) and hasattr(annotation, "__args__"):
        text = str(annotation).replace("typing.", "")
    text = text.replace(" ", "")
    parts = _split_union(text)
    optional = "None" in parts
    parts = [p for p in parts if p != "None"]
    if len(parts) != 1:
        return OptionSpec("any", optional=optional)
    (part,) = parts
    if part in _SIMPLE_KINDS:
        return OptionSpec(_SIMPLE_KINDS[part], optional=optional)
    for prefix in ("list[", "Sequence[", "tuple["):
        if part.startswith(prefix) and part.endswith("]"):
            inner = part[len(prefix) : -1].removesuffix(",...")
            return OptionSpec("list", optional=optional, item=spec_from_annotation(inner))
    if part in ("list", "Sequence", "tuple"):
        return OptionSpec("list", optional=optional)
    if part.startswith(("dict", "Mapping")):
        return OptionSpec("dict", optional=optional)
    return OptionSpec("any", optional=optional)


def _split_union(text: str) -> list[str]:
    """Splits ``"a|list[b|c]|None"`` at the top-level bars; ``Optional[x]`` counts as ``x|None``."""
    if text.startswith("Optional[") and text.endswith("]"):
        return [text[len("Optional[") : -1], "None"]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "|" and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def merge(declared: OptionSpec | None, typed: OptionSpec) -> OptionSpec:
    """The declared spec where there is one (its kind, and a list's item, defaulting to the
    annotation's)."""
    if declared is None:
        return typed
    if declared.kind == "any" and typed.kind != "any":
        return replace(
            declared,
            kind=typed.kind,
            optional=declared.optional or typed.optional,
            item=declared.item if declared.item is not None else typed.item,
        )
    return declared


# ----------------------------------------------------------------------------- declared options
@dataclass(frozen=True, init=False)
class Option:
    """An env option declared where it is a constructor parameter: its meaning and the values
    it allows, in the parameter's annotation (the one place the option is written)::

        def __init__(
            self,
            cost: Annotated[float, Option("k, the private cost of a query", UNIT)] = 0.1,
            num_agents: Annotated[int, Option("n, the number of agents", low=2, high=9)] = 2,
        ): ...

    ``spec`` is a shared :class:`OptionSpec` to start from (a range several games use), the
    keywords are :class:`OptionSpec` fields set over it; the kind is the annotation's (``int``
    -> "int", ``float | None`` -> an optional "float") unless given. The type, the default and
    this meaning make the ``Args:`` of the class's docstring (``MultiAgentEnv``), the game's
    docs page and ``option_specs``.
    """

    doc: str
    spec: OptionSpec

    def __init__(self, doc: str, spec: OptionSpec | None = None, /, **fields: Any):
        if not isinstance(doc, str) or not doc.strip():
            raise TypeError("Option(doc, ...): the option's meaning comes first, as text")
        object.__setattr__(self, "doc", " ".join(doc.split()))
        object.__setattr__(self, "spec", replace(spec or OptionSpec(), **fields))


@dataclass(frozen=True)
class DeclaredOption:
    """One constructor parameter as its signature declares it (:func:`signature_options`).

    Attributes:
        name: the parameter.
        spec: what it allows: its :class:`Option`'s spec, the kind (and None, for a None
            default) from the annotation where the declaration leaves them out.
        doc: its meaning ("" for a parameter without an :class:`Option`).
        type: its annotation as text, without the declaration ("int", "Sequence[int | str] |
            None"; "" when there is none).
        default: its default (``inspect.Parameter.empty`` when it is required).
    """

    name: str
    spec: OptionSpec
    doc: str
    type: str
    default: Any

    @property
    def required(self) -> bool:
        """Whether the parameter has no default."""
        return self.default is inspect.Parameter.empty


def signature_options(function: Any) -> dict[str, DeclaredOption]:
    """parameter -> :class:`DeclaredOption` for every named parameter of ``function`` (a
    constructor: ``self`` and ``*args`` / ``**kwargs`` left out), in signature order.

    Annotations written as text (``from __future__ import annotations``) are resolved in the
    function's module. One that cannot be (a name imported only for type checkers) is read as
    text: its type still gives the kind, but an :class:`Option` in it cannot be read, so that
    is a TypeError rather than a declaration silently lost.
    """
    annotations = _resolved_annotations(function)
    out = {}
    for name, param in inspect.signature(function).parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = annotations.get(name, inspect.Parameter.empty)
        base, declared = _declaration(annotation)
        text = type_text(base)
        typed = spec_from_annotation(text) if text else OptionSpec("any")
        if param.default is None:
            typed = replace(typed, optional=True)
        out[name] = DeclaredOption(
            name=name,
            spec=merge(declared.spec if declared else None, typed),
            doc=declared.doc if declared else "",
            type=text,
            default=param.default,
        )
    return out


def _resolved_annotations(function: Any) -> dict[str, Any]:
    try:
        return typing.get_type_hints(function, include_extras=True)
    except Exception as err:  # noqa: BLE001 - any unresolvable name: fall back to the text
        raw = dict(getattr(function, "__annotations__", {}))
        declared = sorted(n for n, a in raw.items() if isinstance(a, str) and "Option(" in a)
        if declared:
            raise TypeError(
                f"{function.__qualname__}: the Option declarations of {', '.join(declared)} "
                f"cannot be read ({type(err).__name__}: {err}); import the names their "
                "annotations use at module level"
            ) from err
        return raw


def _declaration(annotation: Any) -> tuple[Any, Option | None]:
    """``Annotated[T, Option(...)]`` -> ``(T, the Option)``; anything else -> ``(it, None)``."""
    if typing.get_origin(annotation) is not typing.Annotated:
        return annotation, None
    base, *extras = typing.get_args(annotation)
    options = [extra for extra in extras if isinstance(extra, Option)]
    if len(options) > 1:
        raise TypeError(f"an annotation declares {len(options)} Options: {annotation!r}")
    return base, (options[0] if options else None)


def type_text(annotation: Any) -> str:
    """A type as it is written in code: ``int``, ``Sequence[int | str] | None``, ``tuple[float,
    float, float]`` (text stays as it is; no annotation is "")."""
    if annotation is inspect.Parameter.empty:
        return ""
    if isinstance(annotation, str):
        return annotation
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__name__
    text = str(annotation)
    for prefix in ("typing.", "collections.abc.", "builtins."):
        text = text.replace(prefix, "")
    return text.replace("NoneType", "None")


def options_section(options: Mapping[str, DeclaredOption], width: int = 96) -> str:
    """The Google-style ``Args:`` block of a class docstring, one entry per option: its type,
    meaning, allowed values and default, as ``help()`` and the API docs show them."""
    lines = ["Args:"]
    for option in options.values():
        head = f"{option.name} ({option.type})" if option.type else option.name
        meaning = option.doc.rstrip(".") + ". " if option.doc else ""
        default = "required" if option.required else f"default {option.default!r}"
        text = f"{head}: {meaning}{_capitalised(option.spec.describe())}; {default}."
        # An operator glued to the word before it never starts a line, where Markdown (the API
        # docs) would read "+ x" or "- x" as a list item.
        text = re.sub(r" ([-+*]) ", "\xa0\\1 ", text)
        wrapped = textwrap.wrap(
            text,
            width,
            initial_indent="    ",
            subsequent_indent="        ",
            break_on_hyphens=False,
        )
        lines += [line.replace("\xa0", " ") for line in wrapped]
    return "\n".join(lines)


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]
