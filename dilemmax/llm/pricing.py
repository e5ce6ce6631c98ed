"""What a model's tokens cost: :class:`Price`, a prices file, a seat's ``price=`` option.

A price is three rates in dollars per million tokens: fresh prompt tokens (``input``), prompt
tokens the server read from its cache (``cached_input``: OpenAI's and vLLM's
``usage.prompt_tokens_details.cached_tokens``, Anthropic's cache reads) and completion tokens
(``output``). The user gives them; dilemmax ships no price list, since providers change theirs.

A prices file (``--prices FILE``, JSON or YAML) maps a model name to its rates::

    {"gpt-4o-mini": {"input": 0.15, "cached_input": 0.075, "output": 0.60},
     "my-vllm-model": {"input": 0, "output": 0}}

``cached_input`` may be left out: the server then gives no discount (the input rate). A seat's
own option writes the same rates as ``input/output`` or ``input/cached_input/output``
(``openai:gpt-4o-mini,price=0.15/0.075/0.60``). Every value is checked here: a bad file or option
raises :class:`PriceError` (a one-line UsageError naming the file, the model and the field).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dilemmax.envs.option_spec import shown
from dilemmax.envs.seat_spec import SeatSpecError, parse_seat, seat_kind
from dilemmax.errors import UsageError

PER = 1_000_000  # prices are per million tokens
FIELDS = ("input", "cached_input", "output")
REQUIRED = ("input", "output")


class PriceError(UsageError, ValueError):
    """A prices file or ``price=`` option that cannot be read; the message names what is wrong."""


@dataclass(frozen=True)
class Price:
    """Dollars per million tokens: fresh prompt tokens, cached prompt tokens, completion tokens."""

    input: float
    cached_input: float
    output: float


def _rate(value: Any, where: str) -> float:
    """One rate, checked: a finite number >= 0 (a bool or a string is refused, not coerced)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PriceError(
            f"{where}: expected a number of dollars per million tokens, got {shown(value)}"
        )
    if not math.isfinite(value) or value < 0:
        raise PriceError(f"{where}: expected a finite number >= 0, got {shown(value)}")
    return float(value)


def price_from_mapping(rates: Any, where: str) -> Price:
    """A :class:`Price` from ``{input, cached_input?, output}``; ``where`` names the source in
    errors (``"prices.json: model 'm'"``)."""
    if not isinstance(rates, Mapping):
        raise PriceError(f"{where}: expected a mapping of {', '.join(FIELDS)}, got {shown(rates)}")
    unknown = sorted(str(key) for key in rates if key not in FIELDS)
    if unknown:
        raise PriceError(f"{where}: unknown field {unknown[0]!r} (allowed: {', '.join(FIELDS)})")
    missing = [name for name in REQUIRED if name not in rates]
    if missing:
        raise PriceError(f"{where}: field {missing[0]!r} is missing")
    read = {name: _rate(rates[name], f"{where}, field {name!r}") for name in rates}
    return Price(read["input"], read.get("cached_input", read["input"]), read["output"])


def parse_price(text: str, where: str = "price") -> Price:
    """A seat's ``price=`` value: ``input/output`` or ``input/cached_input/output``."""
    parts = text.split("/")
    if len(parts) not in (2, 3):
        raise PriceError(
            f"{where}: expected input/output or input/cached_input/output dollars per million "
            f"tokens (e.g. 0.15/0.60), got {shown(text)}"
        )
    numbers = []
    for name, part in zip(("input", "cached_input", "output")[-len(parts) :], parts, strict=True):
        try:
            number = float(part)
        except ValueError:
            raise PriceError(f"{where}: {name} {part!r} is not a number") from None
        numbers.append(_rate(number, f"{where}, {name}"))
    if len(numbers) == 2:
        numbers.insert(1, numbers[0])
    return Price(*numbers)


def _read(path: Path) -> Any:
    """The file's content: YAML for .yaml/.yml (PyYAML, which the ``llm`` extra brings), else
    JSON."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise PriceError(f"{path}: cannot read the prices file ({error})") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml  # optional: PyYAML comes with the llm extra (transformers)
        except ImportError:
            raise PriceError(f"{path}: reading YAML needs PyYAML; write the file as JSON") from None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as error:
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise PriceError(f"{path}: not valid YAML ({first})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise PriceError(f"{path}: not valid JSON ({error})") from None


def load_prices(path: str | Path) -> dict[str, Price]:
    """The prices file at ``path``: model name -> :class:`Price`, every entry checked."""
    path = Path(path)
    content = _read(path)
    if not isinstance(content, Mapping):
        raise PriceError(
            f"{path}: expected a mapping of model name to prices, got {shown(content)}"
        )
    prices = {}
    for model, rates in content.items():
        if not isinstance(model, str) or not model:
            raise PriceError(f"{path}: model names must be non-empty strings, got {shown(model)}")
        prices[model] = price_from_mapping(rates, f"{path}: model {model!r}")
    return prices


def price_for(model: str, prices: Mapping[str, Price]) -> Price | None:
    """The price of ``model``: the entry under its full name, else under the name after its
    provider (``openai:gpt-4o-mini`` and ``inspect:openai/gpt-4o-mini`` find ``gpt-4o-mini``);
    None when the file has neither (the cost is then unknown, never guessed)."""
    if model in prices:
        return prices[model]
    bare = model.split(":", 1)[-1]
    for name in (bare, bare.rsplit("/", 1)[-1]):
        if name in prices:
            return prices[name]
    return None


def cost(price: Price, prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> float:
    """Dollars for one call or a total: cached prompt tokens at ``cached_input``, the rest of the
    prompt tokens at ``input``, completion tokens at ``output``."""
    if min(prompt_tokens, cached_tokens, completion_tokens) < 0:
        raise ValueError("token counts must be >= 0")
    cached = min(cached_tokens, prompt_tokens)  # a server never caches more than it was sent
    fresh = prompt_tokens - cached
    return (
        fresh * price.input + cached * price.cached_input + completion_tokens * price.output
    ) / PER


def read_price_option(text: str, label: str) -> str:
    """A seat's ``price=`` option checked (a seat option reader): the text, kept as written."""
    parse_price(text, label)
    return text


def seat_price(seat: str, prices: Mapping[str, Price]) -> Price | None:
    """The price of a seat named by its spec: its own ``price=`` option, else the prices file's
    entry for its model (:func:`price_for` of ``kind:target``); None when neither gives one."""
    try:
        spec = parse_seat(seat)
    except SeatSpecError:  # a name that is no spec (a Python caller's own client)
        return price_for(seat, prices)
    if not seat_kind(spec.kind).model:  # scripted and trained seats call no model
        return None
    own = spec.options.get("price")
    if isinstance(own, str):
        return parse_price(own, f"seat {seat!r}: price")
    return price_for(f"{spec.kind}:{spec.target}", prices)


def format_cost(dollars: float | None) -> str:
    """Dollars as the tables show them ("unknown" without a price)."""
    if dollars is None:
        return "unknown"
    return f"${dollars:,.4f}" if dollars < 1 else f"${dollars:,.2f}"
