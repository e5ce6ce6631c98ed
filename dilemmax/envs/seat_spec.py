"""One grammar for every seat: ``kind:target[,option=value|,flag]``, and the registry of kinds.

Every place that seats a policy (``dilemmax rollout``, ``play``, ``experiment``, scenario focal
seats and backgrounds, Inspect tasks, training partners, the Gymnasium single-seat view, the
arena) reads a seat through :func:`parse_seat` and gets its policy from :func:`resolve_seat`,
so the same text means the same seat everywhere and a mistake is the same one-line
:class:`SeatSpecError` everywhere.

- ``kind`` names a registered :class:`SeatKind`: ``scripted:<name>``, ``trained:<run
  folder>[,seed=<k>][,greedy]``, ``zoo:<game>/<population>[,greedy]``, ``openai:<model>``,
  ``inspect:<provider>/<model>``, ``hf:<model folder>`` (each model kind with its own endpoint,
  sampling and protocol options).
- A bare name (``teacher``, ``random``) is the shorthand of ``scripted:<name>``, in every
  place alike.
- Options follow the target, separated by commas: ``name=value``, or a bare ``flag``. Each kind
  declares the options it takes and how each value is read; a value may hold ``=``, ``:`` and
  ``|`` (``base_url=http://a/v1|http://b/v1``) but no comma.

A kind is declared once, as a :class:`SeatKind` named by an entry point of the
``dilemmax.seats`` group (:data:`SEAT_GROUP`; the entry point's name is the kind's), as Inspect
AI's ``@modelapi`` providers are found. dilemmax's own kinds are declared there in its
``pyproject.toml`` exactly as a plug-in's are: ``scripted`` here, ``trained`` and ``zoo`` in
:mod:`dilemmax.agents.seat_kinds`, the model kinds in :mod:`dilemmax.llm.providers`. A kind's
module is imported only when a spec first names the kind (this module, below every package
that seats a player, imports none of them), and a kind that does not import, or declares
something that is not a valid :class:`SeatKind`, is refused in one line naming it
(:func:`seat_kind_problems` lists them) while every other kind keeps working.
:func:`reload_seat_kinds` reads the entry points again (a package installed, or a folder with a
``.dist-info`` put on ``sys.path``, since). :func:`register_seat_kind` adds a kind in-process.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dilemmax.envs.option_spec import shown
from dilemmax.envs.policies import policies_for
from dilemmax.errors import UsageError

SEAT_GROUP = "dilemmax.seats"  # the entry-point group every seat kind is declared in
FLAG = "flag"  # an option written bare (",greedy"): its value is True
MAX_SPEC = 10_000  # characters; no seat (model name, folder, base URLs) is longer
_QUOTED = 200  # characters of a refused spec an error message quotes
_KIND_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
_OPTION_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")


class SeatSpecError(UsageError, ValueError):
    """A seat spec that names no seat: the message names the spec and what is wrong."""


# How an option's text is read: ``reader(text, label) -> value`` raising a UsageError that
# names ``label`` (None: the text is kept; FLAG: written bare, no value).
OptionReader = Callable[[str, str], Any] | str | None


@dataclass
class SeatContext:
    """What a seat is built with beyond its spec: the run's model options and its shared state.

    Attributes:
        generate: the run's model and generation options, under each model seat's own
            (:class:`dilemmax.llm.config.GenerateConfig`; None: its defaults).
        protocol: the run's text-protocol options, under a model seat's own (``role=...``).
        cache: what seats of one run share (model clients), keyed by the kind's resolver.
    """

    generate: Any = None
    protocol: Mapping[str, Any] = field(default_factory=dict)
    cache: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SeatKind:
    """One kind of seat: how its spec is written and how its policy is built.

    Attributes:
        name: the kind, as written before the colon.
        target: what the target is, for messages (``<run folder>``).
        resolve: ``resolve(spec, env, context) -> policy``: the policy the spec names, to play
            ``env`` (checked against it), with a one-line UsageError for what is wrong.
        options: option name -> its reader (see :data:`OptionReader`).
        check: ``check(spec, env, context)``: what can be checked before any folder is written
            or any model loaded (names, folders, keys); None: nothing beyond the grammar.
        target_ok: whether a target is well formed (``inspect:`` needs ``provider/model``).
        jittable: whether its policies run inside JAX (training partners, scenario backgrounds
            and the Gymnasium view seat only those).
        model: whether it is a language model (a seat of its own text-protocol options).
    """

    name: str
    target: str
    resolve: Callable[[SeatSpec, Any, SeatContext], Any]
    options: Mapping[str, OptionReader] = field(default_factory=dict)
    check: Callable[[SeatSpec, Any, SeatContext], None] | None = None
    target_ok: Callable[[str], bool] | None = None
    jittable: bool = True
    model: bool = False


_KINDS: dict[str, SeatKind] = {}  # kinds loaded from their entry points or registered
_LOADED: set[str] = set()  # the kinds of _KINDS loaded from entry points
_PROBLEMS: dict[str, str] = {}  # kind -> why its declaration cannot be used (one line)


def register_seat_kind(kind: SeatKind) -> SeatKind:
    """Adds (or replaces) a seat kind in this process: its specs then parse and resolve in
    every command. (A package declares its kinds as entry points instead: see the module.)"""
    if not _KIND_NAME.fullmatch(kind.name):
        raise ValueError(f"seat kind {kind.name!r}: lower-case letters, digits and _ only")
    _KINDS[kind.name] = kind
    _LOADED.discard(kind.name)
    _PROBLEMS.pop(kind.name, None)
    return kind


@functools.cache
def _declared() -> dict[str, importlib.metadata.EntryPoint]:
    """kind -> its entry point in :data:`SEAT_GROUP`, over every distribution on ``sys.path``.
    Read once: :func:`reload_seat_kinds` reads again.

    Every copy of a distribution's metadata is read, not only the first on the path: a stale
    ``*.egg-info`` left in a source checkout (first on the path when Python runs there) would
    otherwise hide the installed entry points. Of two copies of one distribution that declare
    a kind differently the first wins, as its import does; a kind two distributions declare is
    a problem, and neither is used."""
    found: dict[str, importlib.metadata.EntryPoint] = {}
    owners: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        owner = (dist.metadata["Name"] or "").lower().replace("_", "-")
        for point in dist.entry_points.select(group=SEAT_GROUP):
            if point.name not in found:
                found[point.name], owners[point.name] = point, owner
            elif owners[point.name] != owner and found[point.name].value != point.value:
                _PROBLEMS[point.name] = (
                    f"seat kind {point.name!r} is declared twice ({found[point.name].value}, "
                    f"{point.value}); neither is used"
                )
    return found


def reload_seat_kinds() -> None:
    """Reads the ``dilemmax.seats`` entry points again, forgetting the kinds loaded from them
    and their problems: a package installed since, or a folder holding a package and its
    ``.dist-info`` put on ``sys.path``, is then found as an installed one is. Kinds added
    with :func:`register_seat_kind` are kept."""
    for name in _LOADED:
        _KINDS.pop(name, None)
    _LOADED.clear()
    _PROBLEMS.clear()
    _declared.cache_clear()
    importlib.invalidate_caches()  # the path finders' caches of each sys.path folder


def seat_kinds() -> tuple[str, ...]:
    """Every kind a spec may name, declared as entry points or registered, by name."""
    return tuple(sorted({*_declared(), *_KINDS}))


def seat_kind(name: str) -> SeatKind:
    """The kind ``name``, its declaration loaded from its entry point when first asked for; a
    one-line :class:`SeatSpecError` when there is none, or when it does not load or is not a
    valid :class:`SeatKind` (which names the kind and its entry point)."""
    if name in _KINDS:
        return _KINDS[name]
    declared = _declared()
    if name in declared and name not in _PROBLEMS:
        _load(name, declared[name])
    if name in _PROBLEMS:
        raise SeatSpecError(_PROBLEMS[name])
    if name not in _KINDS:
        known = ", ".join(seat_kinds()) or f"none (no entry points in {SEAT_GROUP}: reinstall)"
        raise SeatSpecError(f"unknown seat kind {name!r}; use {known}")
    return _KINDS[name]


def seat_kind_problems(plugins_only: bool = False) -> dict[str, str]:
    """kind -> the one line saying why it cannot be used, for every declared kind that does
    not load or declares something invalid (each kind is loaded to find out). With
    ``plugins_only`` only the kinds other packages declare are loaded: ``dilemmax list`` names
    a broken plug-in without importing the model stack behind dilemmax's own kinds."""
    for name, point in _declared().items():
        if plugins_only and point.value.startswith("dilemmax."):
            continue
        with contextlib.suppress(SeatSpecError):
            seat_kind(name)
    return dict(_PROBLEMS)


def _load(name: str, point: importlib.metadata.EntryPoint) -> None:
    """Loads and checks a declared kind: registered, or its problem recorded."""
    try:
        kind = point.load()
    except Exception as error:  # a plug-in's module may raise anything: named, not raised
        _PROBLEMS[name] = f"seat kind {name!r} ({point.value}) does not load: " + _said(error)
        return
    problem = _declaration_problem(name, kind)
    if problem:
        _PROBLEMS[name] = f"seat kind {name!r} ({point.value}) is not valid: {problem}"
        return
    _KINDS[name] = kind
    _LOADED.add(name)


def _said(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0][:200]}" if lines else type(error).__name__


def _declaration_problem(name: str, kind: Any) -> str:
    """What makes ``kind``, declared as ``name``, unusable ('' when nothing)."""
    if not isinstance(kind, SeatKind):
        return f"a {type(kind).__name__}, not a SeatKind"
    if not _KIND_NAME.fullmatch(name):
        return "its name is not lower-case letters, digits and _ (at most 32)"
    if kind.name != name:
        return f"it calls itself {kind.name!r}"
    if not isinstance(kind.target, str) or not isinstance(kind.options, Mapping):
        return "its target is not text or its options not a mapping"
    for option, reader in kind.options.items():
        if not (isinstance(option, str) and _OPTION_NAME.fullmatch(option)):
            return f"option {option!r} is not lower-case letters, digits and _"
        if not (reader is None or reader == FLAG or callable(reader)):
            return f"option {option}'s reader is neither None, FLAG nor callable"
    hooks = {"resolve": kind.resolve, "check": kind.check, "target_ok": kind.target_ok}
    for hook, value in hooks.items():
        if not (callable(value) or (value is None and hook != "resolve")):
            return f"its {hook} is not callable"
    return ""


@dataclass(frozen=True)
class SeatSpec:
    """A parsed seat: ``kind:target`` and its options (values read by the kind's readers,
    flags True). ``text`` is the spec as written (how the seat is named in results)."""

    kind: str
    target: str
    options: Mapping[str, Any]
    text: str

    def __str__(self) -> str:
        return self.text

    def __hash__(self) -> int:
        return hash(self.text)

    @property
    def shorthand(self) -> bool:
        """Whether it was written as a bare scripted name (``teacher``)."""
        return ":" not in self.text.split(",", 1)[0]

    @property
    def seat_kind(self) -> SeatKind:
        return seat_kind(self.kind)


def _fail(text: str, problem: str) -> SeatSpecError:
    return SeatSpecError(f"seat {shown(text, _QUOTED)}: {problem}")


def parse_seat(spec: str | SeatSpec) -> SeatSpec:
    """The one parser of a seat spec. Total and linear in the text: returns the
    :class:`SeatSpec`, or raises a one-line :class:`SeatSpecError` naming the spec and what is
    wrong (no kind it knows, no target, an option the kind does not take or given twice, a
    value out of range)."""
    if isinstance(spec, SeatSpec):
        return spec
    if not isinstance(spec, str):
        raise SeatSpecError(f"a seat spec is text (kind:target), got {type(spec).__name__}")
    text = spec.strip()
    if not text:
        raise SeatSpecError(
            f"a seat spec is empty; write <kind>:<target> ({', '.join(seat_kinds())}) "
            "or a scripted policy's name"
        )
    if len(text) > MAX_SPEC:
        raise _fail(text, f"longer than {MAX_SPEC} characters")
    head, *entries = text.split(",")
    kind_name, colon, target = head.partition(":")
    kind_name, target = (kind_name.strip(), target.strip()) if colon else ("scripted", head.strip())
    if not _KIND_NAME.fullmatch(kind_name):
        raise _fail(text, f"unknown seat kind {kind_name[:40]!r}; use {', '.join(seat_kinds())}")
    try:
        kind = seat_kind(kind_name)
    except SeatSpecError as error:
        raise _fail(text, str(error)) from None
    if not target:
        raise SeatSpecError(
            f"seat {shown(text, _QUOTED)} names no {kind.name} target ({kind.target})"
        )
    if kind.target_ok is not None and not kind.target_ok(target):
        raise _fail(text, f"expected {kind.name}:{kind.target}")
    return SeatSpec(kind.name, target, _options(text, kind, entries), text)


def _options(text: str, kind: SeatKind, entries: list[str]) -> dict[str, Any]:
    """The options after the target, each known to ``kind`` and read by its reader."""
    written: dict[str, tuple[str, bool]] = {}
    for entry in entries:
        name, eq, value = entry.partition("=")
        name = name.strip()
        if not name:
            raise _fail(text, "an option without a name (two commas, or a comma at the end?)")
        if name in written:
            twice = name if _OPTION_NAME.fullmatch(name) else repr(name[:64])
            raise SeatSpecError(f"seat {shown(text, _QUOTED)} gives {twice} twice")
        written[name] = (value.strip(), bool(eq))
    unknown = sorted(n for n in written if n not in kind.options or not _OPTION_NAME.fullmatch(n))
    if unknown:
        allowed = ", ".join(kind.options) or "none"
        names = [n[:64] for n in unknown[:8]]
        raise SeatSpecError(
            f"{kind.name} seat options {names} are not known (in {shown(text, _QUOTED)}); "
            f"{kind.name} seats take: {allowed}"
        )
    options: dict[str, Any] = {}
    for name, (value, has_value) in written.items():
        reader = kind.options[name]
        if reader == FLAG:
            if has_value:
                raise _fail(text, f"{name} takes no value (write ',{name}')")
            options[name] = True
        elif not has_value:
            raise _fail(text, f"{name} needs a value ({name}=...)")
        else:
            label = f"seat {shown(text, _QUOTED)}: {name}"
            options[name] = value if reader is None else reader(value, label)
    return options


def resolve_seat(spec: str | SeatSpec, env, context: SeatContext | None = None, where: str = ""):
    """The policy ``spec`` names, built to play ``env``. ``where`` (``"training partners"``)
    names a place that seats only policies that run inside JAX: a seat of another kind is
    refused there with one line saying so."""
    spec = check_plays_in_jax(spec, where) if where else parse_seat(spec)
    kind = seat_kind(spec.kind)
    context = SeatContext() if context is None else context
    if kind.check is not None:
        kind.check(spec, env, context)
    return kind.resolve(spec, env, context)


def check_plays_in_jax(spec: str | SeatSpec, where: str) -> SeatSpec:
    """``spec`` parsed, refused in one line unless its kind plays inside JAX: ``where``
    (``"training partners"``) names a place that seats only such policies."""
    spec = parse_seat(spec)
    kind = seat_kind(spec.kind)
    if not kind.jittable:
        raise _fail(
            spec.text,
            f"{where} play inside JAX, and {kind.name} seats do not; seat "
            f"{', '.join(k + ':' for k in seat_kinds() if _jittable(k))} there",
        )
    return spec


def check_seat(spec: str | SeatSpec, env, context: SeatContext | None = None) -> SeatSpec:
    """``spec`` parsed and checked against ``env`` as far as can be without loading anything
    (names, folders, API keys): what a command does before it writes a folder."""
    spec = parse_seat(spec)
    kind = seat_kind(spec.kind)
    if kind.check is not None:
        kind.check(spec, env, SeatContext() if context is None else context)
    return spec


def seat_policy(policy, env, context: SeatContext | None = None, where: str = ""):
    """A policy given as a spec (text or :class:`SeatSpec`) resolved; any other value (a
    policy already built) returned as it is."""
    if isinstance(policy, str | SeatSpec):
        return resolve_seat(policy, env, context, where)
    return policy


def is_model_seat(spec: str | SeatSpec) -> bool:
    """Whether ``spec`` names a language model (an ``openai:`` / ``inspect:`` / ``hf:`` seat,
    or any registered model kind)."""
    return seat_kind(parse_seat(spec).kind).model


def _jittable(name: str) -> bool:
    try:
        return seat_kind(name).jittable
    except SeatSpecError:  # a kind whose module does not import here
        return False


# --------------------------------------------------------------------------- scripted:<name>
def _scripted(spec: SeatSpec, env, context: SeatContext):
    """A scripted policy of ``env`` by name (:func:`dilemmax.envs.policies.policies_for`)."""
    del context
    choices = policies_for(env)
    if spec.target in choices:
        return choices[spec.target]
    known = ", ".join(sorted(choices))
    if spec.shorthand:  # perhaps a model or a folder written without its kind
        raise SeatSpecError(
            f"seat {shown(spec.text, _QUOTED)} has no kind and names no scripted policy of this "
            f"game (unknown policy {spec.target[:80]!r}; choose from {known}); otherwise write "
            f"<kind>:<target> with a kind of {', '.join(seat_kinds())}"
        )
    problem = f"no scripted policy {spec.target[:80]!r} in this game; choose from {known}"
    raise _fail(spec.text, problem)


def _check_scripted(spec: SeatSpec, env, context: SeatContext) -> None:
    _scripted(spec, env, context)


SCRIPTED = SeatKind("scripted", "<name>", _scripted, check=_check_scripted)
