"""What a run will ask of its models, before any call: a :class:`CallPlan`.

``dilemmax play``, ``experiment`` and ``scenarios evaluate`` print it at the start of every run
that seats a model, and with ``--plan`` print it and stop (``plan=True`` from Python returns it):
per model seat and in total, the calls, prompt tokens, completion tokens and cost.

How it is estimated: the run's own parts are played through the batched harness, on the run's
own episode keys and configurations, with every model seat answered by a stand-in policy
(:class:`StandInPolicy`: a random legal move written as the protocol's own well-formed reply,
the stand-in model of :mod:`dilemmax.envs.text_sample`) instead of a client. Nothing is sent
anywhere. A part too long to render whole is sampled: at most :data:`SAMPLE_CONFIGS`
configurations spread over the part's, and as many episodes of each as :data:`SAMPLE_STEPS` env
steps allow (at least one), every rotation; its counts are scaled to the part's episodes. Each
sampled episode is played to its end, so prompts that grow over steps and trials (notes, earlier
trials, earlier rounds) are counted as they grow.

Tokens are counted by the model's own tokenizer where one is here (a seat whose model is a
local folder with a Transformers tokenizer: ``hf:./model``, or ``openai:./model`` served from
that folder), else by the rule :data:`CHARS_PER_TOKEN` characters to a token, which the plan
labels an estimate. A call's prompt tokens are the sum over its messages' contents (a server's
chat template adds a few per message). Completion tokens are the stand-in reply's, at most
``max_tokens``; a model that writes more than the reply format asks is under-counted, so the
plan also gives the ceiling ``max_tokens`` puts on them.

Costs come from :mod:`dilemmax.llm.pricing` (``--prices FILE``, a seat's ``price=``); a seat
without a price shows its tokens and "cost unknown".
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np

from dilemmax.envs.rollout import num_configs_of
from dilemmax.envs.seat_spec import parse_seat, seat_kind
from dilemmax.envs.text import Prompt, TextProtocol
from dilemmax.envs.text_sample import stand_in_action, stand_in_reply
from dilemmax.llm.client import ChatRequest, Completion, OnResult
from dilemmax.llm.play import Seat
from dilemmax.llm.policy import LLMPolicy
from dilemmax.llm.pricing import Price, cost, format_cost, seat_price
from dilemmax.llm.seats import protocol_options
from dilemmax.llm.session import Part, PartPlayer, part_protocol, run_options, user_specs
from dilemmax.llm.session_options import SessionOptions, Shard

CHARS_PER_TOKEN = 4  # the rule where no tokenizer of the model is here (OpenAI's rule of thumb)
SAMPLE_STEPS = 400  # env steps a part's sample may play (every episode of a short game's run)
SAMPLE_CONFIGS = 4  # configurations of a part's sample (evenly spread over the part's)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


# --------------------------------------------------------------------------- counting tokens
@dataclass(frozen=True)
class TokenCounter:
    """How a seat's tokens are counted: ``count(text) -> tokens``; ``exact`` when it is the
    model's own tokenizer, False for the characters-per-token rule (an estimate)."""

    name: str
    exact: bool
    count: Callable[[str], int]


def chars_rule(text: str) -> int:
    """Tokens of ``text`` by the rule: one per :data:`CHARS_PER_TOKEN` characters, rounded up."""
    return -(-len(text) // CHARS_PER_TOKEN)


CHARS_RULE = TokenCounter(f"chars/{CHARS_PER_TOKEN}", False, chars_rule)


def counter_for(seat: str) -> TokenCounter:
    """The counter of a model seat: the Transformers tokenizer of its model folder when the
    seat's target is a local folder holding one, else :data:`CHARS_RULE`."""
    spec = parse_seat(seat)
    folder = Path(spec.target)
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return CHARS_RULE
    from transformers import AutoTokenizer  # optional llm extra: only for a local model folder

    tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return TokenCounter(
        f"the tokenizer of {folder}",
        True,
        lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"]),
    )


def message_tokens(messages: Sequence[Mapping[str, Any]], counter: TokenCounter) -> int:
    """A call's prompt tokens: the sum over its messages' contents."""
    return sum(counter.count(str(m.get("content", ""))) for m in messages)


def messages_key(messages: Sequence[Mapping[str, Any]]) -> str:
    """A hash of a request's messages (role and content), as a server receives them."""
    text = json.dumps([[m.get("role"), m.get("content")] for m in messages])
    return hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------- the stand-in
@dataclass(eq=False)
class StandInPolicy(LLMPolicy):
    """A model seat answered without a model: each prompt gets the stand-in model's reply
    (:func:`~dilemmax.envs.text_sample.stand_in_reply`: its protocol's well-formed reply playing
    a random legal move, the one ``benchmarks/llm_cost.py`` renders too), and its tokens counted
    by ``counter``.

    Attributes:
        protocol: the protocol whose reply format it writes (set for each part).
        replies: messages hash (:func:`messages_key`) -> the reply given; what a local test
            server serves back so a real run plays the same moves.
    """

    counter: TokenCounter = CHARS_RULE
    max_tokens: int | None = None
    protocol: TextProtocol | None = None
    rng: Any = None
    replies: dict[str, str] = field(default_factory=dict)

    def ask(self, prompts: Sequence[Prompt], on_result: OnResult | None = None) -> list[Completion]:
        completions = []
        for index, prompt in enumerate(prompts):
            action = stand_in_action(prompt, self.rng)
            reply = stand_in_reply(self.protocol, prompt, action, self.rng)
            messages = ChatRequest.from_prompt(prompt).messages
            self.replies[messages_key(messages)] = reply
            written = self.counter.count(reply)
            if self.max_tokens is not None:
                written = min(written, self.max_tokens)
            completion = Completion(reply, message_tokens(messages, self.counter), written)
            completions.append(completion)
            if on_result is not None:
                on_result(index, completion)
        return completions


# --------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class SeatPlan:
    """One model seat's share of a run, as planned (counts scaled from a sample are floats)."""

    seat: str
    calls: float
    prompt_tokens: float
    completion_tokens: float
    max_completion_tokens: float | None  # calls x max_tokens (None: no max_tokens)
    price: Price | None
    counted_by: str  # the tokenizer, or the characters-per-token rule
    exact: bool  # counted by the model's own tokenizer

    @property
    def cost(self) -> float | None:
        """Dollars at the seat's price with no prompt cache (None: no price)."""
        if self.price is None:
            return None
        return cost(self.price, round(self.prompt_tokens), 0, round(self.completion_tokens))

    def to_json(self) -> dict[str, Any]:
        return {
            "calls": round(self.calls),
            "prompt_tokens": round(self.prompt_tokens),
            "completion_tokens": round(self.completion_tokens),
            "max_completion_tokens": _rounded(self.max_completion_tokens),
            "cost_usd": self.cost,
            "price": None if self.price is None else dataclasses.asdict(self.price),
            "counted_by": self.counted_by,
            "estimate": not self.exact,
        }


@dataclass(frozen=True)
class CallPlan:
    """What a run will ask of its model seats (:func:`plan_parts`).

    Attributes:
        seats: one :class:`SeatPlan` per model seat, in the order they first play.
        episodes: episodes of the run (of this shard, for a shard).
        rendered: episodes the plan played with the stand-in to count them.
        replies: the stand-in's reply to each prompt it answered, by :func:`messages_key`:
            what a local test server serves back, so a real run plays the plan's moves.
    """

    seats: tuple[SeatPlan, ...]
    episodes: int
    rendered: int
    replies: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def calls(self) -> float:
        return sum(s.calls for s in self.seats)

    @property
    def prompt_tokens(self) -> float:
        return sum(s.prompt_tokens for s in self.seats)

    @property
    def completion_tokens(self) -> float:
        return sum(s.completion_tokens for s in self.seats)

    @property
    def cost(self) -> float | None:
        """Dollars of every seat (None when a seat has no price)."""
        costs = [s.cost for s in self.seats]
        return None if any(c is None for c in costs) else sum(costs)

    @property
    def exact(self) -> bool:
        """Whether every seat's tokens are counted by its model's own tokenizer."""
        return all(s.exact for s in self.seats)

    def to_json(self) -> dict[str, Any]:
        return {
            "seats": {s.seat: s.to_json() for s in self.seats},
            "calls": round(self.calls),
            "prompt_tokens": round(self.prompt_tokens),
            "completion_tokens": round(self.completion_tokens),
            "cost_usd": self.cost,
            "episodes": self.episodes,
            "rendered_episodes": self.rendered,
            "estimate": not self.exact or self.rendered < self.episodes,
        }

    def format(self) -> str:
        """The plan as printed before a run (and by ``--plan``)."""
        if not self.seats:
            return "plan: no model seat, no model calls"
        sampled = (
            f"rendered on {self.rendered} of {self.episodes} episodes and scaled"
            if self.rendered < self.episodes
            else f"rendered on all {self.episodes} episodes"
        )
        lines = [
            f"plan, before any call ({sampled}, with a stand-in model):",
            f"  {'seat':36s} {'calls':>10s} {'prompt tokens':>15s} {'completion tokens':>18s} "
            f"{'cost':>12s}",
        ]
        rows = [(s.seat, s.calls, s.prompt_tokens, s.completion_tokens, s.cost) for s in self.seats]
        if len(self.seats) > 1:
            total = ("total", self.calls, self.prompt_tokens, self.completion_tokens, self.cost)
            rows.append(total)
        for name, calls, prompt, completion, dollars in rows:
            lines.append(
                f"  {name[:36]:36s} {calls:>10,.0f} {prompt:>15,.0f} {completion:>18,.0f} "
                f"{format_cost(dollars):>12s}"
            )
        lines += self._notes()
        return "\n".join(lines)

    def _notes(self) -> list[str]:
        notes = []
        counters = sorted({s.counted_by for s in self.seats if not s.exact})
        if counters:
            notes.append(
                f"  tokens counted by {', '.join(counters)}: an estimate (no tokenizer of the "
                "model here)"
            )
        capped = [s for s in self.seats if s.max_completion_tokens is not None]
        if capped:
            ceiling = sum(s.max_completion_tokens for s in capped)
            notes.append(
                f"  completion tokens are the reply format's; max_tokens caps them at "
                f"{ceiling:,.0f}"
            )
        unpriced = [s.seat for s in self.seats if s.price is None]
        if unpriced:
            notes.append(
                f"  cost unknown for {', '.join(unpriced)}: give --prices FILE or the seat's "
                "price=IN/OUT (dollars per million tokens)"
            )
        return notes


def _rounded(value: float | None) -> int | None:
    return None if value is None else round(value)


# --------------------------------------------------------------------------- planning a run
def plan_parts(
    parts: Sequence[Part],
    options: SessionOptions,
    prices: Mapping[str, Price] | None = None,
    sample: bool = True,
) -> CallPlan:
    """The :class:`CallPlan` of playing ``parts`` under ``options``, with no call made and
    nothing written. ``prices``: model -> price (default ``options.prices``); ``sample``:
    False renders every episode instead of a sample of each part."""
    prices = options.prices if prices is None else prices
    specs = user_specs(parts, options)
    dry = dataclasses.replace(options, out=None, resume=False, progress=False, shard=Shard())
    player = PartPlayer(dry, specs, None, None)
    stand_ins: dict[str, StandInPolicy] = {}
    totals: dict[str, np.ndarray] = {}  # seat -> [calls, prompt tokens, completion tokens]
    rendered = episodes = 0
    for part in parts:
        small, scale = _sampled(part, options.max_steps) if sample else (part, 1.0)
        models = _seat_models(part, specs, options.default_seat)
        if not models:
            continue
        protocol = part_protocol(part, run_options(part, options.protocol))
        for seat in models:
            policy = stand_ins.setdefault(seat, _stand_in(seat, options))
            policy.protocol, policy.rng = protocol, np.random.default_rng(options.seed)
            player.cache[seat] = Seat(seat, policy, protocol_options(parse_seat(seat)))
        result, _ = player.play(small)
        for seat, stats in result.stats.items():
            counts = np.array([stats.calls, stats.prompt_tokens, stats.completion_tokens], float)
            totals[seat] = totals.get(seat, 0.0) + counts * scale
        rendered += small.num_jobs * small.rotations
        episodes += part.num_jobs * part.rotations
    share = 1.0 / options.shard.count  # a shard plays every count-th episode
    seats = tuple(
        _seat_plan(seat, counts * share, stand_ins[seat], prices) for seat, counts in totals.items()
    )
    replies = {k: v for policy in stand_ins.values() for k, v in policy.replies.items()}
    return CallPlan(seats, round(episodes * share), rendered, replies)


def _seat_models(part: Part, specs: Mapping[str, str], default: str | None) -> list[str]:
    """The model seat specs (as parsed, their ``text``) of ``part``'s agents."""
    seated = {**specs, **part.seats}
    named = [seated.get(agent, default) for agent in part.env.agents]
    parsed = [parse_seat(spec) for spec in named if spec is not None]
    return list(dict.fromkeys(p.text for p in parsed if seat_kind(p.kind).model))


def _stand_in(seat: str, options: SessionOptions) -> StandInPolicy:
    """The stand-in of model seat ``seat``: its tokenizer, its ``max_tokens``."""
    spec = parse_seat(seat)
    own = spec.options.get("max_tokens", spec.options.get("max_new_tokens"))
    max_tokens = options.generate.max_tokens if own is None else int(own)
    return StandInPolicy(None, seat, counter=counter_for(seat), max_tokens=max_tokens)


def _seat_plan(seat: str, counts: np.ndarray, stand_in: StandInPolicy, prices) -> SeatPlan:
    calls, prompt, completion = (float(x) for x in counts)
    ceiling = None if stand_in.max_tokens is None else calls * stand_in.max_tokens
    counter = stand_in.counter
    return SeatPlan(
        seat, calls, prompt, completion, ceiling, seat_price(seat, prices), counter.name,
        counter.exact,
    )  # fmt: skip


def _sampled(part: Part, max_steps: int | None) -> tuple[Part, float]:
    """(the part's sample, what its counts are multiplied by): at most :data:`SAMPLE_CONFIGS`
    configurations spread over the part's, and as many episodes of each as
    :data:`SAMPLE_STEPS` env steps allow (at least one)."""
    count = num_configs_of(part.configs)
    configs, names = part.configs, part.config_names
    if count is not None and count > SAMPLE_CONFIGS:
        index = np.linspace(0, count - 1, SAMPLE_CONFIGS).round().astype(int)
        configs = jax.tree.map(lambda x: x[index], part.configs)
        names = None if names is None else [names[i] for i in index]
    steps = part.env.max_steps if max_steps is None else min(max_steps, part.env.max_steps)
    per_config = steps * part.rotations * (1 if count is None else min(count, SAMPLE_CONFIGS))
    episodes = max(1, min(part.episodes, SAMPLE_STEPS // max(per_config, 1)))
    small = dataclasses.replace(
        part, configs=configs, config_names=names, episodes=episodes, keep_steps=False
    )
    return small, part.num_jobs / small.num_jobs
