"""A play session: a list of parts played through the batched harness under one transcript.

The run core of ``dilemmax play``, ``dilemmax experiment`` and ``dilemmax scenarios evaluate``. A
:class:`Part` is one batch of episodes (an env, its configurations, the seats it fixes over the
user's, its protocol options, its rotations);
:class:`~dilemmax.llm.session_options.SessionOptions` is how the session plays them (the user's
seats, the model's :class:`~dilemmax.llm.config.GenerateConfig`, the protocol options, the run
folder, the shard). :func:`play_parts` checks every seat, takes the run folder's
lock, opens the transcript (or resumes it), plays each part with a progress bar over all of them
and gives one :class:`~dilemmax.llm.play.PlayResult` per part. A fresh folder where
nothing was recorded when the run failed is removed again, so the corrected command needs no
``--resume``.

Protocols: each part's run options are the user's ``--protocol`` under the part's own; each model
seat plays with ``env.text_protocol(**{**run_options, **seat_options})``, one instance per
distinct option set, where a seat's options are its spec's (``Seat.protocol_options``) under the
part's for its agent (``Part.seat_protocol_options``). The options travel with the seat, so a
rotated seat keeps its role.

Shards (``--shard i/N``): the episodes of every part and rotation, counted in play order, are
dealt round-robin (episode g goes to shard g mod N). A shard plays its own with the keys, call
keys and env slots they have in the whole run, so shards merged (:mod:`dilemmax.llm.shards`) give
the whole run's results.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import shutil
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
from tqdm import tqdm

from dilemmax.commandline import output_folder
from dilemmax.envs.memory import check_waves_fit
from dilemmax.envs.registry import env_label, options_key
from dilemmax.envs.rollout import num_configs_of
from dilemmax.envs.text import TextProtocol
from dilemmax.errors import UsageError  # a mistake in the command line: one line, exit 2
from dilemmax.llm.cache import RunCache
from dilemmax.llm.limits import LimitReached, budget_for
from dilemmax.llm.play import (
    BatchedPlay,
    PlayResult,
    Seat,
    concatenate,
    rotate_seats,
    seat_protocols,
)
from dilemmax.llm.results import seat_totals
from dilemmax.llm.seats import check_agents, check_specs, reply_identity, seats_for
from dilemmax.llm.session_options import SessionOptions, Shard
from dilemmax.llm.transcript import Transcript, protocol_label
from dilemmax.runlock import RunFolderError, RunLock


@dataclass(frozen=True)
class Part:
    """One batch of episodes a session plays with one env and one seating.

    Attributes:
        name: unique within a plan; the transcript's part key (``"k=0.10/w_T=0.3"``).
        env: the dilemmax env of this part.
        configs: batched env configurations (leading axis C) or None for the env's default.
        config_names: C names, one per configuration (None without configs).
        seats: agent -> seat spec (``"openai:m"``, ``"scripted:teacher"``) for seats the design
            fixes; the user's ``--seat`` / ``--seats`` fill the rest.
        episodes: episodes per configuration.
        protocol_options: text-protocol options of this part, over the user's ``--protocol``.
        seat_protocol_options: agent -> protocol options of that seat alone (a Schelling role).
        rotate: play every seating rotation (``dilemmax play --rotate``).
        calls_per_episode: model calls one episode is expected to make, for call counts.
        keep_steps: keep each episode's per-step infos and act replies (PlayResult.infos,
            .valid, .replies) for an analysis that reads more than the episode metrics.
    """

    name: str
    env: Any
    configs: Any = None
    config_names: Sequence[str] | None = None
    seats: Mapping[str, str] = field(default_factory=dict)
    episodes: int = 1
    protocol_options: Mapping[str, Any] = field(default_factory=dict)
    seat_protocol_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    rotate: bool = False
    calls_per_episode: float = 0.0
    keep_steps: bool = False

    @property
    def rotations(self) -> int:
        return self.env.num_agents if self.rotate else 1

    @property
    def num_jobs(self) -> int:
        """Episodes of one rotation: configurations x episodes."""
        return self.episodes * (num_configs_of(self.configs) or 1)


# --------------------------------------------------------------------------- checks
def output_paths(out: Path | None, resume: bool) -> tuple[Path | None, bool]:
    """(the run folder or None, whether this call created it), checked before any work: a file
    in the way, a place that cannot be written, or a resume with nothing to continue is
    refused."""
    if not out:
        return None, False
    out = Path(out)
    if resume and not (out / "transcript.jsonl").is_file():
        raise RunFolderError(
            f"--resume: {out} holds no transcript.jsonl, so there is no run to continue; "
            "drop --resume to start one"
        )
    return output_folder(out, "--out")


def user_specs(parts: Sequence[Part], options: SessionOptions) -> dict[str, str]:
    """agent -> spec of the user's seats, checked against the widest part's agents and, with
    every spec a part fixes, checked well formed before any folder is written."""
    widest = max((p.env for p in parts), key=lambda env: env.num_agents)
    specs = dict(options.seats)
    check_agents(widest, specs)
    for part in parts:
        check_specs(
            part.env,
            {**specs, **part.seats},
            options.default_seat,
            options.generate,
            options.protocol,
        )
    return specs


# --------------------------------------------------------------------------- the session
@dataclass
class SessionResult:
    """What a session played.

    Attributes:
        names: the parts' names, in plan order.
        results: one PlayResult per part, in plan order (rotations one after another).
        orders: per part, the position in the whole run's play order of each of its episodes
            (a shard's record: merging sorts by it).
        total: episodes of the whole (unsharded) run.
        out: the run folder (None without --out).
        transcript_run: the transcript's run key (None without --out).
        shard: the shard played (``Shard()``: the whole run).
        stopped: the spending limit that stopped the run (``results``: what finished), or None.
    """

    names: list[str]
    results: list[PlayResult]
    orders: list[list[int]]
    total: int
    out: Path | None
    transcript_run: str | None = None
    shard: Shard = field(default_factory=Shard)
    stopped: LimitReached | None = None


def play_parts(
    parts: Sequence[Part],
    options: SessionOptions,
    identity: Mapping[str, Any],
    command: str = "play",
) -> SessionResult:
    """Plays ``parts`` as one run under ``options``; ``identity`` is what the transcript is
    keyed by (the shard is added to it), ``command`` names the run in its folder's lock
    (``options`` were checked when they were made)."""
    shard = options.shard
    names = [p.name for p in parts]
    if len(set(names)) != len(names):  # the transcript keys calls by part name
        raise ValueError(f"the parts' names repeat ({names})")
    for part in parts:
        if part.episodes < 1:
            raise UsageError(f"part {part.name}: episodes must be >= 1, got {part.episodes}")
        part_protocol(part, run_options(part, options.protocol))  # refused before any folder
    specs = user_specs(parts, options)
    seated = [s for p in parts for s in (*specs.values(), *p.seats.values(), options.default_seat)]
    budget = budget_for(options.limits, seated, options.prices)  # --cost-limit's prices checked
    identity_of = functools.partial(reply_identity, generate=options.generate)  # (--cache)
    cache = options.cache and RunCache(options.cache, options.seed, identity_of)
    total = sum(p.num_jobs * p.rotations for p in parts)
    # Sizes this host cannot hold are refused with the estimate before any folder or call
    # (play, experiment and scenario runs alike): each game's footprint at the whole run.
    for env in {type(p.env): p.env for p in parts}.values():
        check_waves_fit(env, options.envs, total, command, "--envs or --episodes")
    out, created = output_paths(options.out, options.resume)
    identity = {**identity, **({"shard": str(shard)} if shard.sharded else {})}
    with contextlib.ExitStack() as stack:
        transcript = None
        if out is not None:
            stack.enter_context(RunLock(out, command))
            opened: list[Transcript] = []
            stack.enter_context(_removed_if_nothing_played(out, created, opened))
            transcript = stack.enter_context(
                Transcript(
                    out / "transcript.jsonl",
                    identity,
                    resume=options.resume,
                    games=[env_label(p.env) for p in parts],
                    protocols=_protocol_labels(parts, options),
                )
            )
            opened.append(transcript)
        mine = len(range(shard.index, total, shard.count))
        bar = stack.enter_context(
            tqdm(total=mine, unit="episode", disable=not options.progress, file=sys.stderr)
        )
        if budget is not None and transcript is not None:  # what the run spent before
            budget.add_recorded(transcript.recorded.values())
        player = PartPlayer(options, specs, transcript, bar, budget, cache)
        results, orders, stopped = [], [], None
        for part in parts:  # a spending limit reached keeps what finished, the rest empty
            try:
                result, order = player.play(part) if stopped is None else (PlayResult({}), [])
            except LimitReached as stop:  # every call made is recorded
                (result, order), stopped = stop.partial, stop
            results.append(result)
            orders.append(order)
        if transcript is not None:  # what the run spent, priced (a resume writes it anew)
            transcript.record_totals(seat_totals(results, options.prices))
    run = transcript.run if transcript is not None else None
    return SessionResult(names, results, orders, total, out, run, shard, stopped)


class PartPlayer:
    """Plays one part after another, counting the whole run's episodes for the shard. Its
    ``cache`` (spec -> Seat) may be filled beforehand: :mod:`dilemmax.llm.plan` seats its
    stand-in models there."""

    def __init__(self, options: SessionOptions, specs, transcript, bar, budget=None, cache=None):
        self.options, self.specs, self.transcript, self.bar = options, specs, transcript, bar
        self.budget, self.run_cache = budget, cache
        self.shard = options.shard
        self.cache: dict = {}  # spec -> Seat: one client per model spec, batched together
        self.built_for: dict[str, Any] = {}  # spec -> the env its scripted / trained seat is of
        self.played = 0  # episodes of the whole run before the part being played

    def play(self, part: Part) -> tuple[PlayResult, list[int]]:
        run = self.options
        options = run_options(part, run.protocol)
        protocol = part_protocol(part, options)
        made = {options_key(options): protocol}
        base = self._seats(part)
        rotations, order = [], []
        for shift in range(part.rotations):
            seats = rotate_seats(base, shift)
            protocols = self._protocols(part, seats, options, made, protocol)
            runner = BatchedPlay(
                part.env,
                seats,
                protocol,
                run.envs,
                run.max_steps,
                self.transcript,
                self.bar,
                on_call_error=run.on_call_error,
                protocols=protocols,
                keep_steps=part.keep_steps,
                budget=self.budget,
                cache=self.run_cache,
            )
            select = self._select(part.num_jobs)
            name = part.name if not part.rotate else f"{part.name}/rot{shift}"
            key = jax.random.key(run.seed)
            positions = range(part.num_jobs) if select is None else select
            try:
                rotations.append(runner.run(key, part.episodes, part.configs, name, select))
            except LimitReached as stop:  # what finished, in play order
                rotations.append(runner.played_so_far())
                done = [self.played + p for p in positions[: len(rotations[-1].episodes)]]
                stop.partial = (concatenate(rotations), order + done)
                raise
            order += [self.played + p for p in positions]
            self.played += part.num_jobs
        return concatenate(rotations), order

    def _seats(self, part: Part) -> list[Seat]:
        """The part's seats (its own over the user's), each with its agent's protocol options."""
        specs = {**self.specs, **part.seats}
        self._forget_seats_of_other_envs(part.env)
        run = self.options
        seats = seats_for(part.env, specs, run.default_seat, run.generate, run.protocol, self.cache)
        for seat in seats:
            if not seat.is_model:
                self.built_for[seat.name] = part.env
        for i, agent in enumerate(part.env.agents):
            extra = part.seat_protocol_options.get(agent)
            if extra:
                options = {**seats[i].protocol_options, **extra}
                seats[i] = dataclasses.replace(seats[i], protocol_options=options)
        return seats

    def _forget_seats_of_other_envs(self, env) -> None:
        """A scripted or trained seat is of the env it was built (and checked) for: another
        part's env gets its own. Model seats stay shared, so their clients are built once."""
        for spec, built in list(self.built_for.items()):
            if built is not env:
                self.cache.pop(spec, None)
                del self.built_for[spec]

    def _protocols(self, part, seats, run_options, made, protocol) -> dict[str, TextProtocol]:
        if not any(s.is_model for s in seats):
            return {}
        if protocol is None:
            raise UsageError(f"{part.env.name} has no text protocol; a model cannot play it")
        try:
            protocols = seat_protocols(part.env, seats, run_options, made)
        except (TypeError, ValueError) as error:
            named = [f"{s.name} {dict(s.protocol_options)}" for s in seats if s.protocol_options]
            raise UsageError(f"protocol options of seat(s) {named}: {error}") from error
        if self.shard.sharded and any(carries_memory(p) for p in protocols.values()):
            raise UsageError(
                f"--shard: in part {part.name} a model seat's prompts recall earlier episodes "
                "(memory_rounds), so a shard, which plays only some of them, would ask what the "
                "whole run never asks; run it unsharded"
            )
        return protocols

    def _select(self, num_jobs: int) -> list[int] | None:
        """This shard's positions among the next ``num_jobs`` episodes (None: all of them)."""
        if not self.shard.sharded:
            return None
        first = (self.shard.index - self.played) % self.shard.count
        return list(range(first, num_jobs, self.shard.count))


def carries_memory(protocol: TextProtocol) -> bool:
    """Whether a protocol's prompts recall earlier episodes: its own ``next_memory``, or
    ``memory_rounds`` (the moral-hazard protocol's memory of rounds, kept per instance)."""
    own = type(protocol).next_memory is not TextProtocol.next_memory
    return own or bool(getattr(protocol, "memory_rounds", 0))


def run_options(part: Part, protocol: Mapping[str, Any]) -> dict[str, Any]:
    """The part's protocol options over the user's (``--protocol``)."""
    return {**protocol, **part.protocol_options}


def part_protocol(part: Part, run_options: Mapping[str, Any]) -> TextProtocol | None:
    """The part's protocol under its run options (None: the game has none)."""
    try:
        return part.env.text_protocol(**run_options)
    except NotImplementedError:
        return None
    except (TypeError, ValueError) as error:
        raise UsageError(f"--protocol: {error}") from error


def _protocol_labels(parts: Sequence[Part], options: SessionOptions) -> list[str]:
    """The text protocols the parts' prompts are rendered with, as the transcript records them."""
    made = ((p, part_protocol(p, run_options(p, options.protocol))) for p in parts)
    return [protocol_label(env_label(p.env), pr) for p, pr in made if pr is not None]


@contextlib.contextmanager
def _removed_if_nothing_played(out: Path, created: bool, opened: list) -> Iterator[None]:
    """Undoes a fresh start that fails before anything was recorded (a seat that does not load, a
    refused model): the folder this command created is removed, or else the new transcript, so
    the corrected command needs no --resume. Entered while the folder is locked, so nobody else
    is using it; ``opened`` holds the transcript once it is open."""
    try:
        yield
    except BaseException:
        transcript = opened[0] if opened else None
        if transcript is None or not transcript.resumable:
            if created:
                shutil.rmtree(out, ignore_errors=True)
            elif transcript is not None:
                transcript.path.unlink(missing_ok=True)
        raise
