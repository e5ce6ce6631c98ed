"""Typed, range-checked env options, and the one parser from command-line text to a typed value.

Every environment declares each static constructor option once, in its signature
(``Annotated[type, Option(meaning, **range)]``, read into ``option_specs``; the constraints
between options in ``check_options_together``) and checks them here, with one call at the top of
``__init__``; every command-line ``--set key=value`` is parsed here, typed by the option it
sets. Two things follow: a wrong value fails at once with a message naming the option, the value
and what is allowed (never deep inside JAX, never as a silent coercion such as ``bool("false") is
True``), and the same text means the same value in every command. A constructor argument
without an ``Option`` is still checked against its type annotation.

What one option may be is an :class:`~dilemmax.envs.option_spec.OptionSpec` (re-exported here);
the specs below (pool seeds, splits, trial counts) are the ranges several games share.

Bounds on sizes (pool sizes, map sizes, numbers of rounds, resources) keep memory use and
generation time within what a laptop handles: the largest allowed open_cleanup map generates its
pool in seconds, and the consequence context table stays under
:data:`dilemmax.envs.consequence.generator.MAX_CONTEXTS` rows.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from dilemmax.envs.option_declaration import signature_options
from dilemmax.envs.option_spec import INT32_MAX, NOT_ALLOWED, OptionError, OptionSpec, shown
from dilemmax.envs.registry import current_option_names, env_spec, registered_envs, registered_name

__all__ = [
    "ENV_OPTIONS",
    "FRACTION",
    "INT32_MAX",
    "LAYOUT_POOL",
    "MAX_TEXT",
    "OBSERVATION",
    "POOL_SEED",
    "RULE_POOL",
    "SPLIT",
    "TRIALS",
    "TRIAL_STEPS",
    "UNIT",
    "OptionError",
    "OptionSpec",
    "check_env_options",
    "constructor_specs",
    "env_option_specs",
    "parse_env_options",
    "parse_value",
    "positive",
]

# Longest text a --set value may have: every parse below is then bounded in time.
MAX_TEXT = 10_000


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
        raise OptionError(f"{name}: expected text, got {shown(text)}")
    if len(text) > MAX_TEXT:
        raise OptionError(f"{name}: value of {len(text)} characters (at most {MAX_TEXT})")
    raw = text.strip()
    kind = spec.kind if spec is not None else "any"
    if raw.lower() in _NONE and (spec is None or spec.optional or kind == "any"):
        return None
    value = _PARSERS.get(kind, _parse_literal)(raw)
    if value is NOT_ALLOWED:
        expected = spec.describe() if spec is not None else "a value"
        raise OptionError(f"option {name}={shown(text)} is not allowed: expected {expected}")
    if spec is not None:
        return spec.check(name, value)
    return value


def _parse_bool(raw: str) -> Any:
    lowered = _unquote(raw).lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    return NOT_ALLOWED


def _parse_int(raw: str) -> Any:
    raw = _unquote(raw)
    if not raw.isascii():
        return NOT_ALLOWED
    digits = raw.replace("_", "")
    body = digits[1:] if digits[:1] in "+-" else digits
    if body.isdigit():
        if len(body) > 30:
            return NOT_ALLOWED
        return int(digits)
    number = _parse_float(raw)
    if number is NOT_ALLOWED or not math.isfinite(number) or not number.is_integer():
        return NOT_ALLOWED
    return int(number)


def _parse_float(raw: str) -> Any:
    raw = _unquote(raw)
    if not raw.isascii() or len(raw) > 100:
        return NOT_ALLOWED
    try:
        return float(raw.replace("_", ""))
    except ValueError:
        return NOT_ALLOWED


def _parse_str(raw: str) -> Any:
    return _unquote(raw)


def _parse_literal(raw: str) -> Any:
    """JSON, else a Python literal, else the text itself."""
    value = _parse_structured(raw)
    return _unquote(raw) if value is NOT_ALLOWED else value


def _parse_structured(raw: str) -> Any:
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
    return NOT_ALLOWED


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


# ----------------------------------------------------------------------------- shared ranges
def positive(high: int | None = None) -> OptionSpec:
    """An integer in 1..high (>= 1 without ``high``)."""
    return OptionSpec("int", low=1, high=high)


SPLIT = OptionSpec("str", choices=("train", "held_out", "all"))
OBSERVATION = OptionSpec("str", choices=("codes", "one_hot"))
POOL_SEED = OptionSpec("int", low=0, high=INT32_MAX - 2)  # the rule pool uses seed + 1
LAYOUT_POOL = OptionSpec("int", low=2, high=4096)  # layouts generated at make time
RULE_POOL = OptionSpec("int", low=2, high=1_000_000)
FRACTION = OptionSpec("float", low=0.01, high=0.99)
UNIT = OptionSpec("float", low=0.0, high=1.0)
TRIALS = positive(100)
TRIAL_STEPS = positive(10_000)


# ----------------------------------------------------------------------------- environments
def constructor_specs(env_cls: type) -> dict[str, OptionSpec]:
    """option -> spec for every constructor argument of ``env_cls``: what its ``Option``
    declares, else its annotation (an env's ``option_specs``, read once when its class was
    defined; any other class's signature is read now)."""
    specs = env_cls.__dict__.get("option_specs") if isinstance(env_cls, type) else None
    if specs is None:
        options = signature_options(env_cls.__init__)
        specs = {name: option.spec for name, option in options.items()}
    return dict(specs)


def check_env_options(env_cls: type, values: Mapping[str, Any]) -> dict[str, Any]:
    """Checks every constructor option of an env; call as the first line of ``__init__``::

        check_env_options(type(self), locals())

    Each given value against its spec, then the given values together (the class's
    ``check_options_together``, which sees the values as given). Returns the checked values
    (ints as int, choices in their canonical spelling). Raises :class:`OptionError` naming the
    env (the id it is registered under), the option, the value and the allowed range.
    """
    specs = constructor_specs(env_cls)
    env_id = registered_name(env_cls)
    given = {name: values[name] for name in specs if name in values}
    checked = {name: specs[name].check(name, value, env_id) for name, value in given.items()}
    check_together = getattr(env_cls, "check_options_together", None)
    if check_together is not None:
        check_together(given)
    return checked


def env_option_specs(env_id: str, old_names: bool = False) -> dict[str, OptionSpec]:
    """option -> spec of a registered env (for typing its ``--set`` values); with ``old_names``
    also each renamed option's old name, typed as the option (``dilemmax.make`` then renames it,
    with one deprecation line)."""
    env_cls = env_spec(env_id).load()
    specs = constructor_specs(env_cls)
    if old_names:
        renamed = getattr(env_cls, "renamed_options", {})
        specs.update({old: specs[new] for old, new in renamed.items() if new in specs})
    return specs


def parse_env_options(env_id: str, pairs: Mapping[str, str]) -> dict[str, Any]:
    """``{"sorted_agents": "false"}`` -> ``{"sorted_agents": False}``, typed by the env's options.

    Unknown names raise :class:`OptionError` listing the env's options.
    """
    specs = env_option_specs(env_id)
    out = {}
    for name, text in current_option_names(env_id, pairs).items():
        if name not in specs:
            raise OptionError(
                f"{env_id}: unknown option {name!r}; options: {', '.join(sorted(specs))}"
            )
        out[name] = parse_value(text, specs[name], name)
    return out


class _DeclaredOptions(Mapping):
    """env id -> the options its constructor declares (``option_specs``), read from the class on
    access, so that importing this module imports (and compiles) no game."""

    def __getitem__(self, env_id: str) -> Mapping[str, OptionSpec]:
        if env_id not in registered_envs():
            raise KeyError(env_id)
        return dict(getattr(env_spec(env_id).load(), "option_specs", {}))

    def __iter__(self) -> Iterator[str]:
        return iter(registered_envs())

    def __len__(self) -> int:
        return len(registered_envs())


# env id -> option -> spec, for every registered env.
ENV_OPTIONS: Mapping[str, Mapping[str, OptionSpec]] = _DeclaredOptions()
