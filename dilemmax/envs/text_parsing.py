"""Total, linear-time building blocks for parsing a language model's reply.

A reply is untrusted input: it can be empty, 100 kB long, full of non-ASCII digits, nested
10,000 levels deep, or crafted to make a backtracking regex run for minutes. Every helper here
is total (never raises on any ``str`` or non-``str`` input) and runs in time linear in the
reply, so a game parser built only from them is too:

- :func:`clean` caps the length (keeping the end, where a move usually sits), turns ``\\r\\n`` and
  ``\\r`` into ``\\n`` and turns a non-string into ``""``;
- :func:`parse_int` reads ASCII digits only, with a digit cap (``int()`` is never given 5,000
  digits, ``"³"`` is not a number);
- :func:`words` splits a line into ASCII word tokens with one character class, no backtracking;
- :func:`find_json_object` finds the last ``{...}`` object in a reply (fenced code blocks
  included) with one scan that tracks strings and depth, refusing objects nested deeper than a
  bound before ``json`` ever sees them;
- :func:`guarded` turns any exception a parser still raises into an invalid reply naming it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

MAX_REPLY_CHARS = 32_000  # longer replies keep their last MAX_REPLY_CHARS characters
MAX_INT_DIGITS = 9  # integers with more digits are refused, never converted
MAX_JSON_DEPTH = 8  # the deepest any protocol's reply needs is 3 ({"goal": {"cell": [r, c]}})

_WORD = re.compile(r"[A-Za-z0-9]+")  # one class, one quantifier: linear


def clean(reply: Any, cap: int = MAX_REPLY_CHARS) -> tuple[str, bool]:
    """(the reply as text with ``\\n`` line ends and at most ``cap`` characters, truncated?).

    A non-string becomes ``""``. An over-long reply keeps its END: every protocol here asks for
    the move last, and a reasoning model writes its thinking first.
    """
    if not isinstance(reply, str):
        return "", False
    truncated = len(reply) > cap
    text = reply[-cap:] if truncated else reply
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text, truncated


def parse_int(token: Any, max_digits: int = MAX_INT_DIGITS) -> int | None:
    """The integer an ASCII token spells (optional sign), or None.

    Only ``0-9`` count as digits (``"³"``, ``"٣"`` and ``"１"`` are refused), and a token with
    more than ``max_digits`` digits is refused before any conversion.
    """
    if isinstance(token, bool) or not isinstance(token, (str, int)):
        return None
    if isinstance(token, int):
        return token if abs(token) < 10**max_digits else None
    text = token.strip()
    sign = 1
    if text[:1] in ("-", "+"):
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    if not text or len(text) > max_digits or not (text.isascii() and text.isdigit()):
        return None
    return sign * int(text)


def words(line: str) -> list[str]:
    """The ASCII letter/digit runs of ``line``, upper-cased (``"**FINAL: c**"`` -> FINAL, C)."""
    return [w.upper() for w in _WORD.findall(line)]


def _safe_int(text: str) -> int | None:
    return parse_int(text)


def _refuse_constant(text: str) -> None:
    return None  # NaN / Infinity read as null


MAX_RESCANS = 3  # restarts after an object that never closes; each restart is one linear scan
MAX_STRUCTURAL = 20_000  # structural characters visited per reply (a real reply has hundreds)
_STRUCTURAL = re.compile(r'[{}\[\]"\\]')  # one class: the only characters a scan must look at
_OBJECT_START = re.compile(r'\{\s*["}]')  # where a JSON object can start: {"key" or {}


def _scan(
    text: str, begin: int, max_depth: int, budget: list[int]
) -> tuple[tuple[int, int, bool] | None, int]:
    """(span, resume) of the object starting at ``begin`` (a ``{``).

    ``span`` is (start, end, too_deep) once the object closes, else None; ``resume`` is where
    the search for the next object continues. Only structural characters are visited, strings
    are skipped (a ``}`` inside ``"..."`` does not close an object), and a scan stops as soon as
    the nesting passes ``max_depth``, so a deeply nested reply costs ``max_depth`` steps.
    ``budget[0]`` (structural characters left for the whole reply) is spent as it goes; an
    exhausted budget ends the scan as if the object never closed.
    """
    depth, in_string, escape_at = 0, False, -2
    for match in _STRUCTURAL.finditer(text, begin):
        budget[0] -= 1
        if budget[0] < 0:
            return None, len(text)
        k, ch = match.start(), match.group()
        if in_string:
            if ch == "\\" and escape_at != k - 1:
                escape_at = k  # the next character is escaped
            elif ch == '"' and escape_at != k - 1:
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
            if depth > max_depth:
                return (begin, k + 1, True), k + 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return (begin, k + 1, False), k + 1
    return None, len(text)


def _object_spans(text: str, max_depth: int) -> list[tuple[int, int, bool]]:
    """The ``{...}`` objects of ``text`` that do not sit inside an earlier one, in order.

    A candidate start is a ``{`` followed by a key or ``}`` (so prose such as "I think {maybe"
    starts nothing). An object that never closes is given up after one scan, and the search
    resumes at the next candidate at most ``MAX_RESCANS`` times; an object nested too deep ends
    the search (what follows its cut-off point would be its own insides). At most
    ``MAX_STRUCTURAL`` structural characters are visited in all: linear and bounded.
    """
    spans, position, rescans, budget = [], 0, 0, [MAX_STRUCTURAL]
    while budget[0] > 0:
        start = _OBJECT_START.search(text, position)
        if start is None:
            break
        span, resume = _scan(text, start.start(), max_depth, budget)
        if span is None:
            rescans += 1
            if rescans > MAX_RESCANS:
                break
            position = start.start() + 1
            continue
        spans.append(span)
        if span[2]:
            break
        position = resume
    return spans


def find_json_object(text: str, max_depth: int = MAX_JSON_DEPTH) -> tuple[dict | None, str]:
    """(the last JSON object in ``text`` that parses, or None; why not).

    Linear: one scan finds the top-level objects; each is parsed once, and the spans are
    disjoint. Objects nested deeper than ``max_depth`` are refused unparsed; integers with too
    many digits become None; NaN and Infinity become None.
    """
    if not isinstance(text, str) or "{" not in text:
        return None, "no JSON object in the reply"
    error = "no JSON object in the reply"
    for start, end, too_deep in reversed(_object_spans(text, max_depth)):
        if too_deep:
            error = f"JSON object nested deeper than {max_depth} levels"
            continue
        try:
            value = json.loads(
                text[start:end], parse_int=_safe_int, parse_constant=_refuse_constant
            )
        except (ValueError, RecursionError) as exc:
            error = f"malformed JSON object ({type(exc).__name__})"
            continue
        if isinstance(value, dict):
            return value, ""
    return None, error


def guarded(parse: Callable[..., Any], invalid: Callable[[str], Any]) -> Callable[..., Any]:
    """``parse`` made total: any exception becomes ``invalid(reason)``.

    The parsers are written not to raise; this is the belt to those braces, so that a bug found
    by a model in production costs one invalid reply, never a run.
    """

    def wrapper(*args, **kwargs):
        try:
            return parse(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - totality is the point
            return invalid(f"parser error: {type(exc).__name__}: {str(exc)[:200]}")

    wrapper.__name__ = getattr(parse, "__name__", "parse")
    wrapper.__doc__ = parse.__doc__
    return wrapper


def as_action(value: Any, names: dict[str, int], num_actions: int) -> tuple[int | None, str]:
    """(the action a JSON field or a token names, error): an integer, digits, or a name.

    ``names`` maps upper-case names without spaces, dashes or underscores to actions.
    """
    if isinstance(value, bool) or value is None:
        return None, f"action {value!r} is not a number or a name"
    if isinstance(value, float):
        if value != value or not value.is_integer():
            return None, f"action {value!r} is not a whole number"
        value = int(value)
    if isinstance(value, int):
        if 0 <= value < num_actions:
            return value, ""
        return None, f"action {value} is outside 0..{num_actions - 1}"
    if not isinstance(value, str):
        return None, f"action of type {type(value).__name__} is not a number or a name"
    number = parse_int(value)
    if number is not None:
        return as_action(number, names, num_actions)
    key = "".join(words(value[:64]))
    if key in names:
        return names[key], ""
    return None, f"unknown action {value[:40]!r}"


def keyword_line(text: str, keyword: str) -> tuple[list[str] | None, int]:
    """(the word tokens after the LAST line whose first word is ``keyword``, its line index).

    ``keyword`` is upper case. Markdown decoration around the line (``**``, ``#``, backticks)
    is ignored because only letter/digit runs are read.
    """
    lines = text.split("\n")
    for k in range(len(lines) - 1, -1, -1):
        if keyword not in lines[k].upper():
            continue
        tokens = words(lines[k][:400])
        if tokens and tokens[0] == keyword:
            return tokens[1:], k
    return None, -1
