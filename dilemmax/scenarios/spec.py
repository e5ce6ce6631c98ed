"""Scenarios as data: what one tests, its content hash, and the env it builds.

A :class:`Scenario` names a game, the options the game is built with (its split of layouts and
rules), the focal seats and a background policy spec for every other seat, plus a sentence on
the social situation it tests. A :class:`ScenarioSet` is scenarios of one game with the same
options and focal seats; it builds one :class:`~dilemmax.scenarios.env.ScenarioEnv` in which
every scenario runs in the same vmapped program.

Each scenario's content is hashed (:meth:`Scenario.digest`): the game, its options, the focal
seats and each background spec, with the file digest of every checkpoint a trained background
loads, and the game's version from version 1 on. Results carry the hash, so a score is never
compared with one of a changed scenario or of another version of its game.

Background specs are seat specs (:mod:`dilemmax.envs.seat_spec`) of a kind that plays inside
JAX: ``scripted:<name>`` (any name of :func:`dilemmax.envs.policies.policies_for`, ``random``
included), ``trained:<run folder or checkpoint>[,seed=<k>][,greedy]``, or ``zoo:<game>/<name>``
(a trained population shipped with the package).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dilemmax.agents import zoo
from dilemmax.agents.trained import TrainedPolicy
from dilemmax.envs.registry import env_spec, make
from dilemmax.envs.seat_spec import parse_seat, resolve_seat
from dilemmax.errors import UsageError
from dilemmax.scenarios.env import ScenarioEnv

# zoo:<game>/<name> -> the run folder it names (default: dilemmax.agents.zoo.resolve).
ZooResolver = Callable[[str], Path]


@dataclass(frozen=True)
class Scenario:
    """One focal-vs-background situation of a game.

    Attributes:
        name: ``<game>/<short name>``, unique in the registry.
        game: the env id.
        options: the game's constructor options (``split="held_out"`` for test scenarios).
        focal: indices of the focal seats.
        background: seat index -> background spec, for every seat that is not focal.
        description: the social situation it tests, in a sentence.
    """

    name: str
    game: str
    options: Mapping[str, Any]
    focal: tuple[int, ...]
    background: Mapping[int, str]
    description: str

    def identity(self, resolve_zoo: ZooResolver | None = None) -> dict:
        """What the hash covers: every field that changes play, checkpoint digests included,
        and the game's version (docs/versions.md). Version 0 is left out of it, so the hashes
        recorded before versions existed (all under version 0) still hold; from version 1 on
        ``game_version`` is hashed, and a score under another version never matches."""
        version = env_spec(self.game).load().version
        return {
            **({"game_version": int(version)} if version else {}),
            "game": self.game,
            "options": {k: self.options[k] for k in sorted(self.options)},
            "focal": list(self.focal),
            "background": {str(i): self.background[i] for i in sorted(self.background)},
            "checkpoints": {
                str(i): checkpoint_digest(spec, resolve_zoo)
                for i, spec in sorted(self.background.items())
                if _loads_a_run(spec)
            },
        }

    def digest(self, resolve_zoo: ZooResolver | None = None) -> str:
        """sha256 (hex, 16 characters) of :meth:`identity` as canonical JSON."""
        text = json.dumps(self.identity(resolve_zoo), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


_BUILT: dict[tuple, ScenarioEnv] = {}  # (set name, scenario hashes) -> the env built from them


@dataclass(frozen=True)
class ScenarioSet:
    """Scenarios of one game sharing its options and focal seats (one vmapped program).

    Attributes:
        name: ``<game>/<train|test>``.
        scenarios: the scenarios, in the order of ``ScenarioConfig.scenario``.
    """

    name: str
    scenarios: tuple[Scenario, ...] = field(default_factory=tuple)

    def __post_init__(self):
        if not self.scenarios:
            raise ValueError(f"scenario set {self.name!r} is empty")
        first = self.scenarios[0]
        for s in self.scenarios[1:]:
            same = (s.game, dict(s.options), s.focal) == (
                first.game,
                dict(first.options),
                first.focal,
            )
            if not same:
                raise ValueError(
                    f"scenario set {self.name!r}: {s.name} differs from {first.name} in its game, "
                    "options or focal seats (a set runs as one program)"
                )

    @property
    def game(self) -> str:
        return self.scenarios[0].game

    def build(self, resolve_zoo: ZooResolver | None = None) -> ScenarioEnv:
        """The set's env: its game with the set's options and each scenario's background.

        Built once per content in a process: a second build of a set whose scenario hashes
        (every checkpoint's file digest included) are unchanged gives back the same env, so an
        evaluation, its resume and a notebook's next evaluation reuse its compiled programs."""
        key = (self.name, tuple(self.digests(resolve_zoo).items()))
        if key not in _BUILT:
            if len(_BUILT) >= 4:  # each holds its backgrounds' parameters
                _BUILT.pop(next(iter(_BUILT)))
            _BUILT[key] = self._build(resolve_zoo)
        return _BUILT[key]

    def _build(self, resolve_zoo: ZooResolver | None) -> ScenarioEnv:
        first = self.scenarios[0]
        game = make(first.game, **dict(first.options))
        backgrounds = [background_seats(game, s, resolve_zoo) for s in self.scenarios]
        return ScenarioEnv(game, first.focal, backgrounds, [s.name for s in self.scenarios])

    def digests(self, resolve_zoo: ZooResolver | None = None) -> dict[str, str]:
        return {s.name: s.digest(resolve_zoo) for s in self.scenarios}


def background_seats(game, scenario: Scenario, resolve_zoo: ZooResolver | None) -> list:
    """One policy per seat of ``game``: None at the focal seats, each background spec loaded."""
    seats: list = []
    for i in range(game.num_agents):
        if i in scenario.focal:
            seats.append(None)
        elif i not in scenario.background:
            raise UsageError(f"scenario {scenario.name}: seat {i} is neither focal nor background")
        else:
            try:
                seats.append(background_policy(game, scenario.background[i], resolve_zoo))
            except UsageError as error:
                raise UsageError(f"scenario {scenario.name}: {error}") from error
    return seats


def background_policy(game, spec: str, resolve_zoo: ZooResolver | None = None):
    """The jittable policy a background spec names (any seat kind that plays inside JAX),
    checked against ``game``."""
    seat = parse_seat(spec)
    if seat.kind == "zoo" and resolve_zoo is not None:  # the caller's zoo: seed 0 of its run
        greedy = bool(seat.options.get("greedy"))
        return TrainedPolicy.load(resolve_zoo(seat.target), seed=0, greedy=greedy, env=game)
    return resolve_seat(seat, game, where="scenario backgrounds")


def checkpoint_digest(spec: str, resolve_zoo: ZooResolver | None = None) -> str:
    """sha256 (hex) of every file of the run a trained or zoo background loads."""
    seat = parse_seat(spec)
    return zoo.run_digest(_trained_path(seat.kind, seat.target, resolve_zoo))


def _loads_a_run(spec: str) -> bool:
    return parse_seat(spec).kind in ("trained", "zoo")


def _trained_path(kind: str, target: str, resolve_zoo: ZooResolver | None) -> Path:
    if kind == "zoo":
        return (zoo.resolve if resolve_zoo is None else resolve_zoo)(target)
    path = Path(target)
    if not path.exists():
        raise UsageError(
            f"cannot load trained seat {target[:200]!r}: no such run folder or checkpoint"
        )
    return path


def by_name(scenarios: Sequence[Scenario]) -> dict[str, Scenario]:
    names = [s.name for s in scenarios]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"scenario names used twice: {duplicates}")
    return dict(zip(names, scenarios, strict=True))
