"""What the 13 designs of ``dilemmax experiment --list`` cost a hosted model, before and after the
prompt layout for prefix caching (issue #45 item 6).

Per design: its calls (the plan's at the papers' sizes, as ``--list`` counts them), prompt and
completion tokens, dollars at two price points with and without a prefix cache, and the
shared-prefix shares, for ``layout="paper"`` (the prompts before protocol version 1) and
``layout="cached"`` (the default now).

How it is measured:

- Prompts are rendered by :func:`dilemmax.envs.text_sample.render_calls`: real env states of the
  design's own parts (their envs, configurations, protocol and seat options), every seat answered
  by the stand-in model a run's plan seats too (a random legal move written as the protocol's own
  reply, :func:`dilemmax.envs.text_sample.stand_in_reply`); both layouts see the same states and
  replies.
- Short games (consequence, moral_hazard): up to ``--configs`` configurations of each part, each
  played ``--replicates`` times in a row (as the designs play replicates), every step.
- Grid games: one full seed (5 trials x 400 steps, 10,020 calls) of the homogeneous team is
  rendered whole, so prompts grow over steps and trials as they do in a run. The revealed arm
  and the Schelling teams (a mixed team of cooperators and defectors stands for the k = 0..5
  teams) are rendered on their first trial only and scaled: their prompt length by the full
  seed's mean over its first trial's mean, their shared-prefix shares by the full seed's minus
  its first trial's (the growth the first trial does not see).
- Tokens: the plan's characters-per-token rule (``dilemmax.llm.plan.chars_rule``, 4 characters a
  token): an estimate, no tokenizer of a hosted model is here. Completion tokens are the
  stand-in replies' (the reply format's length; a model that writes more costs more).
- Prefix cache: a call's cached prompt is the longest leading text it shares with its seat's
  previous call or with the call before it at the same step (what a server that keeps both
  reuses), counted whole (real caches reuse from 1,024 tokens on, in blocks: OpenAI); priced at
  10% of the input price. Shares: ``same_seat`` and ``cross_seat`` of
  :func:`dilemmax.envs.text_sample.prefix_shares`.

    python benchmarks/llm_cost.py [--configs 3] [--replicates 2] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass

import jax
import numpy as np

from dilemmax.envs.text_sample import Call, common_prefix, prefix_shares, render_calls
from dilemmax.experiments import registry, runner
from dilemmax.experiments.cli import parse_design_argv
from dilemmax.llm.plan import CHARS_PER_TOKEN, chars_rule
from dilemmax.llm.pricing import Price, cost

LAYOUTS = ("paper", "cached")
PRICES = {  # dollars per million tokens: input, cached input (10% of input), output
    "small": Price(0.15, 0.015, 0.60),
    "frontier": Price(3.0, 0.30, 15.0),
}
TRIAL_CALLS = 5 * 400  # calls of one grid-game trial (5 agents x 400 steps)


@dataclass
class Sample:
    """Per-call means of one rendered sample, for one layout."""

    prompt: float  # prompt tokens per call
    completion: float
    cached: float  # prompt tokens a prefix cache reuses, per call
    same_seat: float
    cross_seat: float

    def scaled(self, size: float, shares: tuple[float, float]) -> Sample:
        """The prompt (and its cached part) ``size`` times as long, the shares moved by
        ``shares``; replies do not grow."""
        same, cross = self.same_seat + shares[0], self.cross_seat + shares[1]
        return Sample(self.prompt * size, self.completion, self.cached * size, same, cross)


def cached_chars(calls: list[Call]) -> list[int]:
    """Per call: the longest leading text shared with the seat's previous call or with the call
    before it at the same step."""
    last: dict[str, str] = {}
    before: tuple[int, str] | None = None
    out = []
    for call in calls:
        best = common_prefix(last[call.seat], call.text) if call.seat in last else 0
        if before is not None and before[0] == call.step:
            best = max(best, common_prefix(before[1], call.text))
        out.append(best)
        last[call.seat] = call.text
        before = (call.step, call.text)
    return out


def summarise(calls: list[Call], seats: set[str] | None = None) -> Sample:
    """Per-call means of ``calls`` (only ``seats``' calls, the model seats, when given)."""
    chosen = [c for c in calls if seats is None or c.seat in seats]
    if not chosen:
        return Sample(*[float("nan")] * 5)
    shares = prefix_shares(chosen)
    return Sample(
        float(np.mean([chars_rule(c.text) for c in chosen])),
        float(np.mean([chars_rule(c.reply) for c in chosen])),
        float(np.mean(cached_chars(chosen))) / CHARS_PER_TOKEN,
        shares["same_seat"],
        shares["cross_seat"],
    )


def part_calls(part) -> float:
    """The model calls the plan counts for ``part`` (as ``Plan.calls`` does)."""
    configs = 1 if part.config_names is None else len(part.config_names)
    rotations = part.env.num_agents if part.rotate else 1
    return part.episodes * configs * rotations * part.calls_per_episode


def protocols(part, layout: str) -> dict:
    """agent -> the protocol of that seat in ``part`` under ``layout``."""
    own = part.seat_protocol_options
    return {
        agent: part.env.text_protocol(
            **{**part.protocol_options, **own.get(agent, {}), "layout": layout}
        )  # fmt: skip
        for agent in part.env.agents
    }


def render(part, args, max_steps=None, one=False) -> dict[str, list[Call]]:
    """layout -> calls of a sample of ``part``: ``args.configs`` configurations x
    ``args.replicates`` episodes, or (``one``) one episode of its first configuration."""
    layouts = {layout: protocols(part, layout) for layout in LAYOUTS}
    configs, episodes = part.configs, 1 if one else args.replicates
    if configs is not None:
        count = len(jax.tree.leaves(configs)[0])
        pick = np.linspace(0, count - 1, 1 if one else min(count, args.configs))
        pick = pick.round().astype(int)
        repeat = 1 if one else args.replicates
        configs = jax.tree.map(lambda x: np.repeat(np.asarray(x)[pick], repeat, 0), configs)
        episodes = len(pick) * repeat
    return render_calls(part.env, layouts, episodes, args.seed, configs, max_steps)


def model_seats(part) -> set[str]:
    return {a for a in part.env.agents if a not in part.seats}


def short_design(plan, args) -> dict[str, tuple[float, Sample]]:
    """layout -> (calls, per-call sample) of a consequence or moral_hazard design."""
    totals = {layout: [] for layout in LAYOUTS}
    for part in plan.parts:
        calls = render(part, args)
        for layout in LAYOUTS:
            totals[layout].append((part_calls(part), summarise(calls[layout], model_seats(part))))
    return {layout: _weighted(rows) for layout, rows in totals.items()}


def _weighted(rows: list[tuple[float, Sample]]) -> tuple[float, Sample]:
    """The call-weighted mean of parts' samples (a part with no model call, such as a random
    control, adds nothing; a share no part has stays nan)."""
    rows = [(n, s) for n, s in rows if n > 0 and not np.isnan(s.prompt)]
    calls = sum(n for n, _ in rows)
    mean = {}
    for f in ("prompt", "completion", "cached", "same_seat", "cross_seat"):
        known = [(n, getattr(s, f)) for n, s in rows if not np.isnan(getattr(s, f))]
        weight = sum(n for n, _ in known)
        mean[f] = sum(n * v for n, v in known) / weight if weight else float("nan")
    return calls, Sample(**mean)


class GridGame:
    """One grid game's full-seed render and its first trial, reused by its four designs."""

    def __init__(self, part, args):
        start = time.time()
        self.full = render(part, args, one=True)
        self.first = {k: v[:TRIAL_CALLS] for k, v in self.full.items()}
        self.seconds = time.time() - start

    def growth(self, layout: str) -> tuple[float, tuple[float, float]]:
        full, first = summarise(self.full[layout]), summarise(self.first[layout])
        shares = (full.same_seat - first.same_seat, full.cross_seat - first.cross_seat)
        return full.prompt / first.prompt, shares

    def sampled(self, layout_calls) -> dict[str, Sample]:
        """A first-trial render of ``part`` scaled by this game's growth."""
        out = {}
        for layout in LAYOUTS:
            size, shares = self.growth(layout)
            out[layout] = summarise(layout_calls[layout]).scaled(size, shares)
        return out


def grid_design(name: str, plan, game: GridGame, args) -> dict[str, tuple[float, Sample]]:
    calls = sum(part_calls(p) for p in plan.parts)
    if name.endswith(("homogeneous", "arena")):
        return {layout: (calls, summarise(game.full[layout])) for layout in LAYOUTS}
    rows = {layout: [] for layout in LAYOUTS}
    for part in _representatives(name, plan):
        if part.protocol_options.get("reveal") or part.seat_protocol_options:
            sample = game.sampled(render(part, args, max_steps=400, one=True))
        else:  # the hidden arm: the full seed itself
            sample = {layout: summarise(game.full[layout]) for layout in LAYOUTS}
        for layout in LAYOUTS:
            rows[layout].append((calls / len(_representatives(name, plan)), sample[layout]))
    return {layout: _weighted(r) for layout, r in rows.items()}


def _representatives(name: str, plan) -> list:
    """reveal: the hidden and the revealed arm's first seed; schelling: one mixed team."""
    if name.endswith("reveal"):
        arms = {bool(p.protocol_options.get("reveal")): p for p in plan.parts}
        return [arms[False], arms[True]]
    mixed = [p for p in plan.parts if len({str(o) for o in p.seat_protocol_options.values()}) > 1]
    return [mixed[0] if mixed else plan.parts[0]]


def dollars(sample: Sample, calls: float, price: Price, cache: bool) -> float:
    prompt, completion = sample.prompt * calls, sample.completion * calls
    cached = sample.cached * calls if cache else 0.0
    return cost(price, round(prompt), round(cached), round(completion))


def row(name: str, layout: str, calls: float, s: Sample) -> dict:
    out = {
        "design": name, "layout": layout, "calls": round(calls),
        "prompt_tokens": round(s.prompt * calls), "completion_tokens": round(s.completion * calls),
        "cached_tokens": round(s.cached * calls),
        "same_seat": round(s.same_seat, 3), "cross_seat": round(s.cross_seat, 3),
    }  # fmt: skip
    for label, price in PRICES.items():
        out[f"usd_{label}"] = round(dollars(s, calls, price, False), 2)
        out[f"usd_{label}_cached"] = round(dollars(s, calls, price, True), 2)
    return out


def table(rows: list[dict]) -> str:
    head = (
        "| design | layout | calls | prompt tokens | completion tokens | same-seat | cross-seat "
        "| $ small | $ small, cached | $ frontier | $ frontier, cached |"
    )
    lines = [head, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        same = "-" if np.isnan(r["same_seat"]) else f"{r['same_seat']:.2f}"
        cross = "-" if np.isnan(r["cross_seat"]) else f"{r['cross_seat']:.2f}"
        lines.append(
            f"| {r['design']} | {r['layout']} | {r['calls']:,} | {r['prompt_tokens']:,} | "
            f"{r['completion_tokens']:,} | {same} | {cross} | "
            f"{r['usd_small']:,.2f} | {r['usd_small_cached']:,.2f} | {r['usd_frontier']:,.2f} | "
            f"{r['usd_frontier_cached']:,.2f} |"
        )
    return "\n".join(lines)


def totals(rows: list[dict]) -> list[dict]:
    out = []
    for layout in LAYOUTS:
        mine = [r for r in rows if r["layout"] == layout]
        keys = [k for k in mine[0] if k.startswith(("usd", "calls", "prompt", "completion"))]
        total = {k: round(sum(r[k] for r in mine), 2) for k in keys}
        out.append({"design": "all designs", "layout": layout, **total,
                    "same_seat": float("nan"), "cross_seat": float("nan")})  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=3, help="configurations per short part")
    parser.add_argument("--replicates", type=int, default=2, help="episodes per configuration")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--designs", default="", help="comma-separated subset (default: all)")
    parser.add_argument("--write", action="store_true", help="write benchmarks/results/")
    args = parser.parse_args()
    start, load = time.time(), os.getloadavg()
    designs = registry.designs()
    chosen = [d for d in args.designs.split(",") if d] or list(designs)
    rows, games = [], {}
    for name in chosen:
        design = designs[name]
        plan = runner.plan_of(design, *parse_design_argv(design, []))
        game = name.split("/")[0]
        if game in ("open_cleanup", "open_harvest"):
            if game not in games:
                hidden = [p for p in plan.parts if not p.protocol_options.get("reveal")]
                team = [p for p in hidden if not p.seat_protocol_options] or hidden
                games[game] = GridGame(team[0], args)
            result = grid_design(name, plan, games[game], args)
        else:
            result = short_design(plan, args)
        for layout, (calls, sample) in result.items():
            rows.append(row(name, layout, calls, sample))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    rows += totals(rows)
    text = table(rows)
    seconds = time.time() - start
    note = (
        f"Rendered in {seconds / 60:.1f} min (load average at start {load[0]:.1f}, shared 2-core "
        f"CPU); grid full seeds: "
        + ", ".join(f"{g} {v.seconds:.0f} s" for g, v in games.items())
        + ". Tokens: characters / 4 (an estimate). Prices per million input / output tokens: "
        "small $0.15 / $0.60, frontier $3 / $15; cached input at 10% of the input price."
    )
    print("\n" + text + "\n\n" + note)
    if args.write:
        with open("benchmarks/results/llm_cost.md", "w") as f:
            f.write("# What the designs cost a hosted model, by prompt layout\n\n")
            f.write("Command: `python benchmarks/llm_cost.py --write` (how it is measured: the "
                    "script's docstring)\n\n")  # fmt: skip
            f.write(text + "\n\n" + note + "\n")
        with open("benchmarks/results/llm_cost.json", "w") as f:
            json.dump({"rows": rows, "note": note, "args": vars(args)}, f, indent=1)


if __name__ == "__main__":
    main()
