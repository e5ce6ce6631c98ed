"""What every ``dilemmax`` command shares: argument types, ``--set`` parsing, the error contract.

The command modules (:mod:`dilemmax.cli` and the ``cli`` module of train, llm, analysis and
finetune) import their helpers from here, never from each other's ``cli``: :func:`parse_assignments`
(``--set name=value``, typed by the option it sets), the argparse types :func:`positive_int` and
:func:`seed_int`, :func:`user_input`, which turns setup errors into a
:class:`~dilemmax.errors.UsageError`, and :func:`run_parsed`, which prints a UsageError as one
line on stderr and exits with status 2, so a command only needs to raise one (or let an
:class:`~dilemmax.envs.options.OptionError` through). A Ctrl-C ends every command with one line
and status 130 (:data:`INTERRUPTED`; :func:`end_process` for the process itself).
"""

from __future__ import annotations

import _thread
import argparse
import contextlib
import dataclasses
import inspect
import json
import os
import sys
import threading
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import jax

from dilemmax.cache_home import cache_home
from dilemmax.envs.option_spec import INT32_MAX
from dilemmax.envs.options import OptionError, OptionSpec, env_option_specs, parse_value
from dilemmax.envs.registry import make
from dilemmax.errors import UsageError

# The scenario sets of every game (dilemmax.scenarios), as `scenarios evaluate --set` and
# `evaluate --scenarios` name them.
SCENARIO_SETS = ("train", "test")


def parse_assignments(
    pairs: list[str] | None,
    what: str = "--set",
    specs: Mapping[str, OptionSpec] | None = None,
) -> dict:
    """``["num_agents=5", "rule=RP"]`` -> ``{"num_agents": 5, "rule": "RP"}``.

    The one string-to-value parser of every command. With ``specs`` (name -> spec, e.g.
    :func:`dilemmax.envs.options.env_option_specs`), each value is parsed as its option's kind
    (``sorted_agents=false`` is False, ``num_rounds=2.7`` is refused) and an unknown name is an
    error listing the known ones; without, values are JSON or Python literals where they parse
    as one, text otherwise.

    Total: raises only :class:`~dilemmax.envs.options.OptionError` (a
    :class:`~dilemmax.errors.UsageError`), whose message names the pair and what is allowed.
    """
    out = {}
    for pair in pairs or []:
        name, sep, raw = str(pair).partition("=")
        name = name.strip()
        if not sep or not name:
            raise OptionError(f"{what} expects name=value, got {pair!r}")
        spec = None
        if specs is not None:
            if name not in specs:
                known = ", ".join(sorted(specs))
                raise OptionError(f"{what}: unknown name {name!r}; choose from {known}")
            spec = specs[name]
        out[name] = parse_value(raw, spec, name)
    return out


def positive_int(text: str) -> int:
    """argparse type of counts that must be >= 1 (``--episodes``)."""
    value = _int_arg(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def int_in(low: int, high: int) -> Callable[[str], int]:
    """argparse type of an integer in ``low .. high`` (a GIF's scale, its frame rate), for counts
    whose huge values would only fail late (an image too large to allocate or to encode)."""

    def parse(text: str) -> int:
        value = _int_arg(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer in {low}..{high}, got {text!r}")
        return value

    return parse


def seed_int(text: str) -> int:
    """argparse type of seeds: 0 .. INT32_MAX."""
    value = _int_arg(text)
    if not 0 <= value <= INT32_MAX:
        raise argparse.ArgumentTypeError(f"must be an integer in 0..{INT32_MAX}, got {text!r}")
    return value


def _int_arg(text: str) -> int:
    try:
        return parse_value(text, OptionSpec("int"))
    except OptionError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


@contextlib.contextmanager
def user_input(what: str) -> Iterator[None]:
    """Turns the ValueError / TypeError / KeyError of setting up from user input (building an
    env, a trainer) into a :class:`UsageError` naming ``what``."""
    try:
        yield
    except UsageError:
        raise
    except (ValueError, TypeError, KeyError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else err
        raise UsageError(f"{what}: {message}") from None


def build_env(env_id: str, pairs: list[str] | None):
    """The env ``env_id`` with ``--set`` options typed by its constructor; UsageError on any
    unknown env, unknown option or bad value."""
    with user_input(env_id):
        options = parse_assignments(pairs, "--set", env_option_specs(env_id, old_names=True))
        return make(env_id, **options)


def output_folder(path: str | Path, option: str = "--out") -> tuple[Path, bool]:
    """(the folder, whether this call created it) for a command that writes into ``path``.

    Made now, before any expensive work, so a file in the way or a place nobody can write to is a
    :class:`UsageError` naming ``option`` instead of a traceback after the computation. "Created"
    is decided by the one ``mkdir`` that makes the folder (it fails when the folder exists), so of
    two commands started together on the same new folder exactly one is told it created it.
    """
    folder = Path(path)
    created = False
    try:
        folder.mkdir(parents=True)
        created = True
    except FileExistsError:
        if not folder.is_dir():
            raise UsageError(
                f"{option} {folder} is a file; expected a folder (new or existing)"
            ) from None
    except (OSError, ValueError) as err:  # ValueError: a NUL byte, an unencodable name
        raise _unwritable(option, folder, err) from None
    try:
        _check_writable_folder(folder)
    except (OSError, ValueError) as err:  # ValueError: a NUL byte, an unencodable name
        raise _unwritable(option, folder, err) from None
    return folder, created


def _unwritable(option: str, path: Path, err: OSError | ValueError) -> UsageError:
    """The error of an ``os`` failure to make ``path``; a file where a folder of it should be is
    named as such (the bare "File exists" / "Not a directory" would not say which)."""
    for above in path.parents:
        if above.exists():
            if not above.is_dir():
                return UsageError(f"{option} {path} cannot be written: {above} is a file")
            break
    reason = getattr(err, "strerror", None) or err
    return UsageError(f"{option} {path} cannot be written: {reason}")


def output_file(path: str | Path, option: str) -> Path:
    """``path`` checked as a file this command can write (its folder is made if missing), before
    any expensive work; a :class:`UsageError` naming ``option`` otherwise. An existing file is
    left as it is (it is replaced only when the result is written)."""
    file = Path(path)
    if file.is_dir():
        raise UsageError(f"{option} {file} is a folder; expected a file name")
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        existed = file.exists()
        with open(file, "a"):
            pass
        if not existed:
            file.unlink()
    except (OSError, ValueError) as err:  # ValueError: a NUL byte, an unencodable name
        raise _unwritable(option, file, err) from None
    return file


@contextlib.contextmanager
def writing(path: str | Path, option: str) -> Iterator[None]:
    """Turns the OSError of writing a checked output (a full disk, a file removed meanwhile)
    into a :class:`UsageError` naming ``option`` and ``path``."""
    try:
        yield
    except OSError as err:
        reason = err.strerror or err
        raise UsageError(f"{option} {path}: writing it failed: {reason}") from None


def _check_writable_folder(folder: Path) -> None:
    """Raises OSError unless a file can be created in ``folder`` (permission bits alone do not
    say: root passes them on read-only mounts)."""
    probe = folder / f".dilemmax-write-check-{os.getpid()}"
    with open(probe, "w"):
        pass
    probe.unlink()


def enable_compilation_cache() -> None:
    """Keeps compiled programs on disk between runs (env builds and steps compile once)."""
    if os.environ.get("JAX_COMPILATION_CACHE_DIR") or jax.config.jax_compilation_cache_dir:
        return
    jax.config.update("jax_compilation_cache_dir", str(cache_home() / "jax"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)


def flag_of(field: dataclasses.Field) -> str:
    """The command-line flag of an options dataclass's field: its metadata's ``flag``, else
    ``--`` and the name with dashes (``max_tokens`` -> ``--max-tokens``)."""
    return field.metadata.get("flag") or "--" + field.name.replace("_", "-")


def _dest(field: dataclasses.Field) -> str:
    return flag_of(field)[2:].replace("-", "_")


def _scalar_type(cls: type, field: dataclasses.Field) -> type:
    """int, float or str: the type a field's flag parses each word as (``float | None`` is
    float, ``tuple[int, ...]`` int)."""
    kind = getattr(field.metadata.get("range"), "kind", None)
    if kind in ("int", "float"):
        return int if kind == "int" else float
    hint = typing.get_type_hints(cls)[field.name]
    for candidate in (int, float):
        inner = [a for arg in typing.get_args(hint) for a in (arg, *typing.get_args(arg))]
        if hint is candidate or candidate in inner:
            return candidate
    return str


def _is_tuple(cls: type, field: dataclasses.Field) -> bool:
    hint = typing.get_type_hints(cls)[field.name]
    return any(typing.get_origin(h) is tuple for h in (hint, *typing.get_args(hint)))


def add_config_arguments(
    parser, cls: type, defaults: Any = None, names: Sequence[str] | None = None
) -> None:
    """One flag per field of the options dataclass ``cls``, generated from its declaration.

    A field's metadata gives its ``help``, its ``flag`` (default ``--`` + the name with dashes),
    a ``range`` (a ``Choice``'s values become the flag's choices), a ``type`` to parse its one
    word with (default: int / float / str from the annotation), ``"append": True`` (the flag may
    be repeated) and ``"cli": False`` (no flag). The default is the field's; a ``bool`` field is
    a switch, a ``tuple[...]`` field without a ``type`` takes one or more words. The destination
    is the flag's name (``--model-seed`` -> ``model_seed``), so a field never collides with a
    command's own flag.

    ``defaults``, an instance of ``cls`` (a named config such as a command's own sampling), gives
    the flags' defaults instead of the fields'; ``names`` limits the flags to those fields.
    """
    for field in dataclasses.fields(cls):
        meta = field.metadata
        if meta.get("cli") is False or (names is not None and field.name not in names):
            continue
        default = None if field.default is dataclasses.MISSING else field.default
        if defaults is not None:
            default = getattr(defaults, field.name)
        common = {"dest": _dest(field), "default": default, "help": meta.get("help")}
        if typing.get_type_hints(cls)[field.name] is bool:
            parser.add_argument(flag_of(field), action="store_true", **common)
            continue
        kind = meta.get("type") or _scalar_type(cls, field)
        if meta.get("append"):
            common["action"] = "append"  # argparse appends to a copy of the default: a list
            common["default"] = None if default is None else list(default)
        elif _is_tuple(cls, field) and not meta.get("type"):
            common["nargs"] = "+"  # a field with its own word parser takes one word
        choices = getattr(meta.get("range"), "values", None) or meta.get("choices")
        parser.add_argument(flag_of(field), type=kind, choices=choices, **common)


def config_from_namespace(cls: type, args: argparse.Namespace, defaults: Any = None):
    """The ``cls`` instance the flags of :func:`add_config_arguments` give (a field whose flag
    the parser lacks keeps its value in ``defaults``, else its default), checked: a value out of
    range is a one-line error naming the flag."""
    fields = dataclasses.fields(cls)
    given = {f.name: getattr(args, _dest(f)) for f in fields if hasattr(args, _dest(f))}
    # nargs="+" and append give lists; the dataclass's fields are tuples (hashable, frozen)
    given = {name: tuple(v) if isinstance(v, list) else v for name, v in given.items()}
    config = cls(**given) if defaults is None else dataclasses.replace(defaults, **given)
    check = getattr(config, "check", None)
    if check is not None:  # a check(label=...) names the flag a bad value came from
        flags = {f.name: flag_of(f) for f in fields}
        named = "label" in inspect.signature(check).parameters
        check(label=flags.__getitem__) if named else check()
    return config


# The exit status of a command stopped by Ctrl-C: 128 + SIGINT, as shells report it.
INTERRUPTED = 130
INTERRUPT_AGAIN_S = 0.05  # after a swallowed Ctrl-C, when it is delivered again


def run_parsed(args: argparse.Namespace) -> int:
    """Runs a parsed command: a :class:`UsageError` prints one line and returns 2; a Ctrl-C
    prints one line and returns :data:`INTERRUPTED`."""
    enable_compilation_cache()
    try:
        with _interrupts_kept():
            return args.func(args)
    except UsageError as err:
        print(f"dilemmax {args.command}: error: {_one_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return interrupted(args.command)


def interrupted(command: str | None) -> int:
    """Says on stderr that ``command`` was stopped by Ctrl-C; returns :data:`INTERRUPTED`."""
    print(
        f"dilemmax {command}: interrupted" if command else "dilemmax: interrupted", file=sys.stderr
    )
    return INTERRUPTED


@contextlib.contextmanager
def _interrupts_kept() -> Iterator[None]:
    """A Ctrl-C that lands in a garbage-collector callback (JAX runs one at every collection)
    raises its KeyboardInterrupt where Python only reports it ("Exception ignored in ...") and
    goes on, so the command would run to its end as if never interrupted. While the command
    runs, such an interrupt is delivered again instead, a moment later from another thread, so
    that it lands outside the callback (and outside this hook, where it would be lost again)."""
    previous = sys.unraisablehook

    def deliver_again(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            threading.Timer(INTERRUPT_AGAIN_S, _thread.interrupt_main).start()
        else:
            previous(unraisable)

    sys.unraisablehook = deliver_again
    try:
        yield
    finally:
        sys.unraisablehook = previous


def end_process(status: int) -> NoReturn:
    """Ends the ``dilemmax`` process with ``status``. An interrupted command leaves at once
    (``os._exit``, its output flushed), without the interpreter's teardown: a Ctrl-C during an
    XLA compile stops the wait for it but not the compile, which runs on in XLA's threads, and
    tearing the interpreter down under it crashes (SIGSEGV, most cold-cache tries of ``dilemmax
    view``). Nothing is skipped that matters: a command releases its folder lock, finishes the
    checkpoint it is writing and closes its transcript in its own ``finally`` blocks, which ran
    on the way out."""
    if status == INTERRUPTED:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(status)
    sys.exit(status)


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


def read_json_file(
    path: Path, max_bytes: int, error: type[Exception], what: str, missing: str
) -> object:
    """The JSON a file from elsewhere holds, read totally: a missing file, one larger than
    ``max_bytes``, or bytes that are not JSON raise ``error`` with one line naming the file
    (``what`` names its kind, ``missing`` says what its absence means)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise error(f"{path}: {missing}") from None
    except OSError as failure:
        raise error(f"{path}: not a readable {what} ({str(failure)[:120]})") from None
    if size > max_bytes:
        raise error(f"{path}: {size} bytes, larger than any {what} ({max_bytes} bytes)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as failure:
        raise error(f"{path}: not a readable {what} ({str(failure)[:120]})") from None


def headless_pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed), imported when a figure is
    drawn: its import is slow, and the backend must be chosen before it."""
    import matplotlib  # matplotlib is a dependency, but loading it costs every command start

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
