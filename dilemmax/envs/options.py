"""Typed, range-checked options, and the one parser from command-line text to a typed value.

Every environment checks its static constructor options here (one call at the top of
``__init__``), and every command-line ``--set key=value`` is parsed here, typed by the option it
sets. Two things follow: a wrong value fails at once with a message naming the option, the value
and what is allowed (never deep inside JAX, never as a silent coercion such as
``bool("false") is True``), and the same text means the same value in every command.

An :class:`OptionSpec` says what a value may be: its kind (``"int"``, ``"float"``, ``"bool"``,
``"str"``, ``"list"``, ``"dict"``, ``"choice"`` or ``"any"``), an inclusive range, the allowed
choices, whether None is allowed, and for lists the spec of each item and the allowed lengths.
Environments declare their ranges in :data:`ENV_OPTIONS`; an option that is not declared there
(an option added later) is still checked against the type annotation of its constructor
argument.

Bounds on sizes (pool sizes, map sizes, numbers of rounds, resources) keep memory use and
generation time within what a laptop handles: the largest allowed open_cleanup map generates its
pool in seconds, and the consequence context table stays under :data:`MAX_CONTEXTS` rows.
"""

from __future__ import annotations

import inspect
import json
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dilemmax.errors import UsageError

# Longest text a --set value may have: every parse below is then bounded in time.
MAX_TEXT = 10_000
# Largest number of (split, threshold) contexts a consequence env may enumerate (its context
# table is int32[contexts, n]; 2e6 rows of 3 agents is 24 MB).
MAX_CONTEXTS = 2_000_000
# Largest int an int option may take unless its spec says less (int32, what JAX stores).
INT32_MAX = 2**31 - 1


class OptionError(UsageError, ValueError):
    """A value that an option does not allow; the message names the option and the range."""


def _show(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class OptionSpec:
    """What one option accepts.

    Attributes:
        kind: "int", "float", "bool", "str", "choice", "list", "dict" or "any".
        low, high: inclusive bounds of an int or float (None: unbounded; floats must be finite
            unless ``finite`` is False).
        choices: the allowed values of a "str" or "choice" option (strings compare
            case-insensitively when ``casefold``).
        optional: None is allowed.
        item: the spec of each item of a "list".
        min_len, max_len: allowed lengths of a "list".
        finite: a "float" must be finite (NaN and infinities refused).
        casefold: string choices compare case-insensitively.
        exclusive_low: ``low`` itself is not allowed (a learning rate in (0, 1]).
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
    exclusive_low: bool = False

    # ------------------------------------------------------------------ description
    def describe(self) -> str:
        """The allowed values in words, e.g. "an integer in 1..64" or "one of 'a', 'b'"."""
        text = self._describe_kind()
        return f"{text}, or None" if self.optional else text

    def _range_text(self, lo_default: str = "", hi_default: str = "") -> str:
        if self.low is None and self.high is None:
            return ""
        lo = lo_default if self.low is None else _number(self.low)
        hi = hi_default if self.high is None else _number(self.high)
        if self.kind == "int":
            if self.high is None:
                return f" >= {lo}"
            if self.low is None:
                return f" <= {hi}"
            return f" in {lo}..{hi}"
        if self.high is None:
            return f" > {lo}" if self.exclusive_low else f" >= {lo}"
        if self.low is None:
            return f" <= {hi}"
        return f" in {'(' if self.exclusive_low else '['}{lo}, {hi}]"

    def _describe_kind(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind == "int":
            return "an integer" + self._range_text()
        if self.kind == "float":
            finite = "a finite number" if self.finite else "a number"
            return finite + self._range_text()
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
        if checked is _BAD:
            raise self._error(name, value, owner)
        return checked

    def _error(self, name: str, value: Any, owner: str) -> OptionError:
        where = f"{owner}: " if owner else ""
        return OptionError(
            f"{where}option {name}={_show(value)} is not allowed: expected {self.describe()}"
        )

    def _check_kind(self, value: Any) -> Any:
        if self.kind == "int":
            return self._in_range(_as_int(value))
        if self.kind == "float":
            return self._in_range(_as_float(value, self.finite))
        if self.kind == "bool":
            return bool(value) if isinstance(value, bool | np.bool_) else _BAD
        if self.kind in ("str", "choice"):
            return self._choice(value)
        if self.kind == "list":
            return self._list(value)
        if self.kind == "dict":
            return dict(value) if isinstance(value, Mapping) else _BAD
        return value

    def _in_range(self, number: Any) -> Any:
        if number is _BAD:
            return _BAD
        if self.low is not None and not number >= self.low:
            return _BAD
        if self.exclusive_low and not number > self.low:
            return _BAD
        if self.high is not None and not number <= self.high:
            return _BAD
        return number

    def _choice(self, value: Any) -> Any:
        if self.kind == "str" and not isinstance(value, str):
            return _BAD
        if self.choices is None:
            return value
        for choice in self.choices:
            if _same_choice(choice, value, self.casefold):
                return choice if isinstance(choice, str) else value
        return _BAD

    def _list(self, value: Any) -> Any:
        if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence | np.ndarray):
            return _BAD
        items = list(value)
        if len(items) < self.min_len or (self.max_len is not None and len(items) > self.max_len):
            return _BAD
        if self.item is None:
            return items
        out = []
        for item in items:
            checked = self.item._check_kind(item) if item is not None else _BAD
            if checked is _BAD:
                return _BAD
            out.append(checked)
        return out


_BAD = object()


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
    return integer is not _BAD and integer == choice


def _as_int(value: Any) -> Any:
    """An int from a Python or numpy integer (not bool, not float: 2.7 and 3.0 are refused)."""
    if isinstance(value, bool | np.bool_):
        return _BAD
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "iu":
        return int(value)
    return _BAD


def _as_float(value: Any, finite: bool) -> Any:
    """A float from a real number (ints included, bools not)."""
    if isinstance(value, bool | np.bool_):
        return _BAD
    if isinstance(value, np.ndarray) and value.shape == () and value.dtype.kind in "iuf":
        value = value.item()
    if not isinstance(value, numbers.Real):
        return _BAD
    try:
        number = float(value)
    except (OverflowError, ValueError):
        return _BAD
    if finite and not math.isfinite(number):
        return _BAD
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
    """The declared spec where there is one (its kind defaulting to the annotation's)."""
    if declared is None:
        return typed
    if declared.kind == "any" and typed.kind != "any":
        return replace(declared, kind=typed.kind, optional=declared.optional or typed.optional)
    return declared


# ----------------------------------------------------------------------------- parsing text
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")
_NONE = ("none", "null")


def parse_value(text: str, spec: OptionSpec | None = None, name: str = "value") -> Any:
    """Command-line text -> a value of the kind ``spec`` asks for (untyped without a spec).

    Total: any text gives a value or an :class:`OptionError` naming ``name``, the text and the
    expected kind; never another exception, and time linear in the (capped) length.

    - bool: true/false, yes/no, on/off, 1/0 (any case);
    - int: decimal digits (``1_000`` and integral ``1e6`` too); ``2.7`` is refused;
    - float: any decimal or exponent number, ``nan``/``inf`` parse (then the range refuses them);
    - str / choice: the text itself (quotes around it removed);
    - list / dict / untyped: JSON, else a Python literal, else (untyped only) the text.
    ``none`` / ``null`` is None for every kind that allows None (and untyped).
    """
    if not isinstance(text, str):
        raise OptionError(f"{name}: expected text, got {_show(text)}")
    if len(text) > MAX_TEXT:
        raise OptionError(f"{name}: value of {len(text)} characters (at most {MAX_TEXT})")
    raw = text.strip()
    kind = spec.kind if spec is not None else "any"
    if raw.lower() in _NONE and (spec is None or spec.optional or kind == "any"):
        return None
    value = _PARSERS.get(kind, _parse_literal)(raw)
    if value is _BAD:
        expected = spec.describe() if spec is not None else "a value"
        raise OptionError(f"option {name}={_show(text)} is not allowed: expected {expected}")
    if spec is not None:
        return spec.check(name, value)
    return value


def _parse_bool(raw: str) -> Any:
    lowered = _unquote(raw).lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    return _BAD


def _parse_int(raw: str) -> Any:
    raw = _unquote(raw)
    if not raw.isascii():
        return _BAD
    digits = raw.replace("_", "")
    body = digits[1:] if digits[:1] in "+-" else digits
    if body.isdigit():
        if len(body) > 30:
            return _BAD
        return int(digits)
    number = _parse_float(raw)
    if number is _BAD or not math.isfinite(number) or not number.is_integer():
        return _BAD
    return int(number)


def _parse_float(raw: str) -> Any:
    raw = _unquote(raw)
    if not raw.isascii() or len(raw) > 100:
        return _BAD
    try:
        return float(raw.replace("_", ""))
    except ValueError:
        return _BAD


def _parse_str(raw: str) -> Any:
    return _unquote(raw)


def _parse_literal(raw: str) -> Any:
    """JSON, else a Python literal, else the text itself."""
    value = _parse_structured(raw)
    return _unquote(raw) if value is _BAD else value


def _parse_structured(raw: str) -> Any:
    import ast

    lowered = raw.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("nan", "inf", "-inf", "+inf"):
        return float(lowered)
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(raw)
        except Exception:  # noqa: BLE001 - untrusted text: any failure means "not this format"
            continue
    return _BAD


def _parse_container(raw: str) -> Any:
    return _parse_structured(raw)


def _unquote(raw: str) -> str:
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1]
    return raw


_PARSERS: dict[str, Callable[[str], Any]] = {
    "bool": _parse_bool,
    "int": _parse_int,
    "float": _parse_float,
    "str": _parse_str,
    "choice": _parse_literal,
    "list": _parse_container,
    "dict": _parse_container,
}


# ----------------------------------------------------------------------------- environments
def _positive(high: int | None = None) -> OptionSpec:
    return OptionSpec("int", low=1, high=high)


_SPLIT = OptionSpec("str", choices=("train", "held_out", "all"))
_OBSERVATION = OptionSpec("str", choices=("codes", "one_hot"))
_SEED = OptionSpec("int", low=0, high=INT32_MAX - 2)
_FRACTION = OptionSpec("float", low=0.01, high=0.99)
_UNIT = OptionSpec("float", low=0.0, high=1.0)
_TRIALS = _positive(100)
_RULE_NAMES = ("AON", "RE", "DV", "RP", "PP")
_TRIAL_STEPS = _positive(10_000)

# env id -> option -> spec. Ranges are the game's own (spec sheets and constructors) or, for
# sizes, what keeps memory and generation time sane.
ENV_OPTIONS: dict[str, dict[str, OptionSpec]] = {
    "consequence": {
        "num_agents": OptionSpec("int", low=2, high=16),
        "num_rounds": _positive(64),
        "total_resources": OptionSpec("int", low=2, high=1024),
        "sorted_agents": OptionSpec("bool"),
        "anonymous_rule": OptionSpec("bool"),
        "reward": OptionSpec("str", choices=("lexicographic", "survival", "resources", "shaped")),
        "endgame": OptionSpec("str", choices=("all", "rule")),
        "rules": OptionSpec(
            "list",
            optional=True,
            min_len=1,
            max_len=5,
            item=OptionSpec(
                "choice", choices=("AON", "RE", "DV", "RP", "PP", 0, 1, 2, 3, 4), casefold=True
            ),
        ),
    },
    "moral_hazard": {
        "num_agents": OptionSpec("int", low=2, high=9),
        "mapping": OptionSpec("str", choices=("highest", "uninformative", "lowest")),
        "provenance": OptionSpec("str", choices=("anonymous", "visible")),
        "reward": OptionSpec("str", choices=("team", "private")),
        "cost": _UNIT,
        "w_local": _UNIT,
        "w_final": _UNIT,
        "w_team": _UNIT,
    },
    "open_cleanup": {
        "num_agents": OptionSpec("int", low=1, high=7),
        "observation": _OBSERVATION,
        "split": _SPLIT,
        "pool_seed": _SEED,
        "layout_pool_size": OptionSpec("int", low=2, high=4096),
        "rule_pool_size": OptionSpec("int", low=2, high=1_000_000),
        "train_fraction": _FRACTION,
        "p_spawn": _UNIT,
        "skew": _UNIT,
        "zap": OptionSpec("bool"),
        "clean_reward": OptionSpec("float", low=-100.0, high=100.0),
        "num_trials": _TRIALS,
        "trial_steps": _TRIAL_STEPS,
        # The layout generator's walks need at least the default map; beyond 24 x 32 its
        # all-pairs distance table grows past a few hundred MB.
        "height": OptionSpec("int", low=12, high=24),
        "width": OptionSpec("int", low=16, high=32),
        # Difficulty (curriculum) options; combinations are checked by the env itself.
        "recipe_length": OptionSpec("choice", choices=(1, 2)),
        "num_tools": OptionSpec("int", low=2, high=4),
        "num_hues": OptionSpec("int", low=1, high=5),
    },
    "open_harvest": {
        "num_agents": OptionSpec("int", low=1, high=20),
        "observation": _OBSERVATION,
        "split": _SPLIT,
        "pool_seed": _SEED,
        "num_layouts": OptionSpec("int", low=2, high=4096),
        "num_rules": OptionSpec("int", low=2, high=1_000_000),
        "train_fraction": _FRACTION,
        "num_trials": _TRIALS,
        "trial_steps": _TRIAL_STEPS,
        "stage_orders": OptionSpec("int", low=1, high=6),  # difficulty (curriculum) option
        # Difficulty option: the three pays, best first (the env checks the order).
        "pay_levels": OptionSpec(
            "list", item=OptionSpec("float", low=-100.0, high=100.0), min_len=3, max_len=3
        ),
        "shared_pay_order": OptionSpec("bool"),  # difficulty option: one pay order, all colours
    },
}


def constructor_specs(env_cls: type, env_id: str | None = None) -> dict[str, OptionSpec]:
    """option -> spec for every constructor argument of ``env_cls`` (declared ranges from
    :data:`ENV_OPTIONS` under ``env_id``, else the argument's annotation)."""
    declared = ENV_OPTIONS.get(env_id or "", {})
    out = {}
    for name, param in inspect.signature(env_cls.__init__).parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        typed = spec_from_annotation(param.annotation)
        if param.default is None:
            typed = replace(typed, optional=True)
        out[name] = merge(declared.get(name), typed)
    return out


def check_env_options(env_id: str, env_cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """Checks every constructor option of an env; call as the first line of ``__init__``::

        check_env_options("consequence", type(self), locals())

    Returns the checked values (ints as int, choices in their canonical spelling). Raises
    :class:`OptionError` naming the env, the option, the value and the allowed range.
    """
    specs = constructor_specs(env_cls, env_id)
    checked = {
        name: spec.check(name, values[name], env_id)
        for name, spec in specs.items()
        if name in values
    }
    _check_together(env_id, checked)
    return checked


def _check_together(env_id: str, values: Mapping[str, Any]) -> None:
    """Constraints between options."""
    if env_id == "consequence" and {"total_resources", "num_agents"} <= set(values):
        total, agents = values["total_resources"], values["num_agents"]
        if total < agents:
            raise OptionError(
                f"consequence: option total_resources={total} is not allowed: expected an integer "
                f">= num_agents ({agents}), since votes name agents by action index"
            )
        contexts = count_splits(total, agents) * total
        if contexts > MAX_CONTEXTS:
            raise OptionError(
                f"consequence: total_resources={total} with num_agents={agents} has {contexts} "
                f"contexts (at most {MAX_CONTEXTS}); choose fewer resources or agents"
            )


def count_splits(total: int, parts: int) -> int:
    """Ascending splits of ``total`` units over ``parts`` agents (zeros allowed): partitions of
    ``total`` into at most ``parts`` parts, by the usual O(total * parts) recursion."""
    # ways[w] = partitions of w into parts of size <= k, for k = 1..parts (conjugate partitions).
    ways = [1] + [0] * total
    for size in range(1, parts + 1):
        for w in range(size, total + 1):
            ways[w] += ways[w - size]
    return ways[total]


def env_option_specs(env_id: str) -> dict[str, OptionSpec]:
    """option -> spec of a registered env (for typing its ``--set`` values)."""
    from dilemmax.envs.registry import env_spec

    return constructor_specs(env_spec(env_id).load(), env_id)


def parse_env_options(env_id: str, pairs: Mapping[str, str]) -> dict[str, Any]:
    """``{"sorted_agents": "false"}`` -> ``{"sorted_agents": False}``, typed by the env's options.

    Unknown names raise :class:`OptionError` listing the env's options.
    """
    specs = env_option_specs(env_id)
    out = {}
    for name, text in pairs.items():
        if name not in specs:
            raise OptionError(
                f"{env_id}: unknown option {name!r}; options: {', '.join(sorted(specs))}"
            )
        out[name] = parse_value(text, specs[name], name)
    return out
