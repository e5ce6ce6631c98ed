"""How an env declares its options: :class:`Option` in a constructor parameter's annotation,
read back by :func:`signature_options`; how an options dataclass declares a field
(:func:`setting`); and the :class:`~dilemmax.envs.option_spec.OptionSpec`
a bare type annotation implies (:func:`spec_from_annotation`).

A constructor parameter ``name: Annotated[type, Option(meaning, **spec fields)] = default`` is the
one place an env option is written. ``MultiAgentEnv`` reads ``option_specs`` and its docstring's
``Args:`` (:func:`options_section`) from these declarations when a class is defined, and the
game's docs page is made from them. Training fields read their kinds from their annotations the
same way (:func:`spec_from_annotation`, :func:`merge`).

Like :mod:`dilemmax.envs.option_spec`, this imports nothing of dilemmax beyond it, so the env base
class can read declarations without importing the registry.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import textwrap
import typing
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from dilemmax.envs.option_spec import OptionSpec

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
def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",
    range: Any = None,
    flag: str | None = None,
    **metadata: Any,
) -> Any:
    """A field of an options dataclass (TrainConfig, GenerateConfig, a design's parameters),
    declared once: its default (or ``default_factory=``) and, in its metadata, its help line,
    the range its values must fit (None: any, or its annotation's), its command-line flag
    (None: ``--`` + the name with dashes) and what else the command line reads (``type``,
    ``list``, ``append``, ``cli``: :func:`dilemmax.commandline.add_config_arguments`).

    An env's constructor option is declared with :class:`Option` in its annotation instead: a
    parameter has no metadata of its own (docs/architecture.md, "One way to declare a field").
    """
    factory = metadata.pop("default_factory", dataclasses.MISSING)
    described = {"help": help, "range": range, "flag": flag, **metadata}
    return dataclasses.field(default=default, default_factory=factory, metadata=described)


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
