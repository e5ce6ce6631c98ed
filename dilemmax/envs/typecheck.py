"""A value checked against its type annotation, for what a user hands dilemmax from Python.

The typed entry points (``dilemmax.llm.play_session``, ``dilemmax.experiments.run``, the
red-teaming, scenario and fine-tuning APIs) declare what each parameter takes in its annotation;
:func:`typed_arguments` checks every argument a call gives against it before the body runs, and
:func:`typed_fields` every field of an options dataclass when it is made. A value of the wrong
kind (``episodes="3"``, ``seats=["teacher"]``, ``generate={...}``) is then one line naming the
parameter and what it takes, an :class:`ArgumentError`, instead of a ``TypeError`` from deep
inside. The same check reads the fields of the JSON lines a file from elsewhere holds
(:func:`field_problem`), so a hand-written transcript gets the same words.

What an annotation admits: ``int`` an integer (numpy's too, never a bool), ``float`` any real
number, ``bool`` True or False, ``str`` a string, ``Path`` any path, a class its instances, a
``Mapping[K, V]`` any mapping whose keys and values are K and V, a ``Sequence[T]``, ``list[T]``
or ``tuple[T, ...]`` any sequence but text (a list where a tuple is annotated is fine), a
``tuple[A, B]`` a sequence of two, ``Literal[...]`` its values, ``Callable`` anything callable,
and a union any of its members. Ranges are the functions' own checks (``episodes >= 1``): this
checks the kind only.
"""

from __future__ import annotations

import collections.abc as abc
import dataclasses
import functools
import inspect
import numbers
import os
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from dilemmax.envs.option_spec import shown
from dilemmax.errors import UsageError


class ArgumentError(UsageError, TypeError):
    """An argument (or an options field) of the wrong kind; the message names the parameter,
    the value and what the parameter takes."""


_SEQUENCES = (list, tuple, abc.Sequence, abc.MutableSequence, abc.Collection, abc.Iterable)
_MAPPINGS = (dict, abc.Mapping, abc.MutableMapping)
_UNIONS = (typing.Union, types.UnionType)


# --------------------------------------------------------------------------- what a type admits
def admits(hint: Any, value: Any) -> bool:
    """Whether ``value`` is of the kind ``hint`` (a resolved annotation) names; anything this
    does not know how to check (a type variable, an unresolved name) admits every value."""
    origin, members = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or isinstance(hint, typing.TypeVar | str):
        return True
    if hint is None or hint is type(None):
        return value is None
    if origin is typing.Annotated:
        return admits(members[0], value)
    if origin in _UNIONS:
        return any(admits(arg, value) for arg in members)
    if origin is typing.Literal:
        return any(value == arg and type(value) is type(arg) for arg in members)
    if origin in _MAPPINGS or hint in _MAPPINGS:
        return _admits_mapping(members, value)
    if origin in _SEQUENCES or hint in _SEQUENCES:
        return _admits_sequence(origin or hint, members, value)
    if origin is abc.Callable or hint is abc.Callable:
        return callable(value)
    if isinstance(hint, type):
        return _admits_class(hint, value)
    return isinstance(value, origin) if isinstance(origin, type) else True


def _admits_class(hint: type, value: Any) -> bool:
    if hint is bool:
        return isinstance(value, bool | np.bool_)
    if isinstance(value, bool | np.bool_):
        return False  # True is an int to Python; to a count or a seed it is a mistake
    if hint is int:
        return isinstance(value, numbers.Integral)
    if hint is float:
        return isinstance(value, numbers.Real)
    if issubclass(hint, os.PathLike | Path):
        return isinstance(value, os.PathLike)
    return isinstance(value, hint)


def _admits_mapping(members: tuple, value: Any) -> bool:
    if not isinstance(value, Mapping):
        return False
    key, item = members if len(members) == 2 else (Any, Any)
    return all(admits(key, k) and admits(item, v) for k, v in value.items())


def _admits_sequence(kind: Any, members: tuple, value: Any) -> bool:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, abc.Sequence):
        return kind in (abc.Iterable, abc.Collection) and isinstance(value, abc.Collection) and (
            not isinstance(value, str | bytes | Mapping))  # fmt: skip
    if kind is tuple and members and members[-1] is not Ellipsis:  # tuple[A, B]: exactly these
        return len(value) == len(members) and all(map(admits, members, value))
    item = members[0] if members else Any
    return all(admits(item, v) for v in value)


# --------------------------------------------------------------------------- in words
_WORDS = {
    int: ("an integer", "integers"),
    float: ("a number", "numbers"),
    bool: ("a bool (True or False)", "bools"),
    str: ("a string", "strings"),
    Path: ("a path", "paths"),
    type(None): ("None", "None"),
}


def describe(hint: Any, plural: bool = False) -> str:
    """``hint`` in words: ``Mapping[str, str] | None`` is "a mapping of strings to strings, or
    None"; ``plural`` gives the words for several ("mappings of strings to strings")."""
    origin, members = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or isinstance(hint, typing.TypeVar | str):
        return "values" if plural else "any value"
    if hint is None:
        hint = type(None)
    if origin is typing.Annotated:
        return describe(members[0], plural)
    if origin in _UNIONS:
        return _either([describe(arg, plural) for arg in members])
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in members)
    if origin in _MAPPINGS or hint in _MAPPINGS:
        words = "mappings" if plural else "a mapping"
        if len(members) == 2 and members != (str, Any):
            return f"{words} of {describe(members[0], True)} to {describe(members[1], True)}"
        return f"{words} of names to values" if members else words
    if origin in _SEQUENCES or hint in _SEQUENCES:
        return _sequence_words(origin or hint, members, plural)
    if origin is abc.Callable or hint is abc.Callable:
        return "functions" if plural else "a function"
    named = origin if isinstance(origin, type) else hint
    if named in _WORDS:
        return _WORDS[named][plural]
    name = getattr(named, "__name__", str(named))
    return f"{name} objects" if plural else f"{'an' if name[:1] in 'AEIOU' else 'a'} {name}"


def _sequence_words(kind: Any, members: tuple, plural: bool) -> str:
    words = "lists" if plural else "a list"
    if kind is tuple and members and members[-1] is not Ellipsis:
        return f"{words} of {len(members)} items ({', '.join(describe(a) for a in members)})"
    return (
        f"{words} of {describe(members[0], True)}" if members and members[0] is not Any else words
    )


def _either(words: list[str]) -> str:
    """``["a string", "a path", "None"]`` -> "a string or a path, or None"."""
    words = list(dict.fromkeys(words))
    kinds = [w for w in words if w != "None"]
    text = " or ".join([", ".join(kinds[:-1]), kinds[-1]] if len(kinds) > 2 else kinds)
    return f"{text}, or None" if "None" in words and kinds else text or "None"


def field_problem(name: str, value: Any, hint: Any) -> str | None:
    """None if ``value`` is of the kind ``hint`` names; else the words of an error message:
    "episodes='3' is not allowed: expected an integer"."""
    if admits(hint, value):
        return None
    return f"{name}={shown(value)} is not allowed: expected {describe(hint)}"


# --------------------------------------------------------------------------- checked calls
def typed_arguments(function: Callable) -> Callable:
    """``function`` with every argument a call gives checked against its annotation first: a
    wrong kind is an :class:`ArgumentError` naming the function, the parameter and what it takes.
    Defaults are not checked (they are the function's own)."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            given = signature.bind(*args, **kwargs).arguments
        except TypeError:  # a call that cannot bind: Python's own message, from the call below
            given = {}
        hints = _hints(function)
        for name, value in given.items():
            kind = signature.parameters[name].kind
            values = (
                value.values() if kind is inspect.Parameter.VAR_KEYWORD
                else value if kind is inspect.Parameter.VAR_POSITIONAL else [value]
            )  # fmt: skip
            for each in values:
                problem = field_problem(name, each, hints.get(name, Any))
                if problem:
                    raise ArgumentError(f"{function.__name__}(): {problem}")
        return function(*args, **kwargs)

    return checked


def typed_fields(cls: type) -> type:
    """The dataclass ``cls`` with every field checked against its annotation when an instance
    is made (``PlayOptions(episodes="3")`` is an :class:`ArgumentError` naming the field)."""
    init = cls.__init__

    @functools.wraps(init)
    def checked_init(self, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        hints = _hints(cls)
        for field in dataclasses.fields(self):
            problem = field_problem(field.name, getattr(self, field.name), hints.get(field.name))
            if problem:
                raise ArgumentError(f"{cls.__name__}: {problem}")

    cls.__init__ = checked_init
    return cls


@functools.cache
def _hints(owner: Any) -> dict[str, Any]:
    """The resolved annotations of a function or class. One that cannot be resolved (a name
    imported only for type checkers) is left out, so its parameter takes any value."""
    try:
        return typing.get_type_hints(owner)
    except Exception:  # noqa: BLE001 - resolve them one by one below
        pass
    if isinstance(owner, type):
        raw = {
            k: v
            for c in reversed(owner.__mro__)
            for k, v in vars(c).get("__annotations__", {}).items()
        }
    else:
        raw = dict(getattr(owner, "__annotations__", {}))
    names = vars(inspect.getmodule(owner))
    resolved = {}
    for name, text in raw.items():
        try:  # the annotation's source, evaluated where it was written (what get_type_hints does)
            resolved[name] = eval(text, names) if isinstance(text, str) else text  # noqa: S307
        except Exception:  # noqa: BLE001 - an unresolvable annotation: any value
            continue
    return resolved
