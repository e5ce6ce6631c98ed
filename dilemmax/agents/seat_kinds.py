"""The trained seat kinds: ``trained:<run folder>[,seed=<k>][,greedy]`` and
``zoo:<game>/<population>[,greedy]``.

Declared as entry points of the ``dilemmax.seats`` group (dilemmax's ``pyproject.toml``), which
:mod:`dilemmax.envs.seat_spec` loads when a spec first names either kind (the grammar sits below
this package and names this module only as text). Both load through
:meth:`dilemmax.agents.trained.TrainedPolicy.load` with ``env=`` the game the seat is to play,
so a run of another game, version, number of agents or observation is refused in one line
before anything plays.
"""

from __future__ import annotations

from pathlib import Path

from dilemmax.agents import zoo
from dilemmax.agents.trained import TrainedPolicy
from dilemmax.envs.option_spec import INT32_MAX
from dilemmax.envs.seat_spec import FLAG, SeatContext, SeatKind, SeatSpec
from dilemmax.errors import UsageError


def _seed(text: str, label: str) -> int:
    """Which of the run's training seeds: an integer in 0..2**31-1."""
    if not (text.isascii() and text.isdigit() and len(text) <= 10 and int(text) <= INT32_MAX):
        raise UsageError(f"{label}={text[:40]!r}: expected an integer in 0..{INT32_MAX}")
    return int(text)


def _check_trained(spec: SeatSpec, env, context: SeatContext) -> None:
    if not Path(spec.target).exists():
        raise UsageError(
            f"cannot load trained seat {spec.target[:200]!r}: no such run folder or checkpoint"
        )


def _trained(spec: SeatSpec, env, context: SeatContext):
    """Training seed ``seed`` (default 0) of a run folder or checkpoint, checked against
    ``env`` (its id, agents, observations and actions) when one is given."""
    seed = spec.options.get("seed", 0)
    greedy = bool(spec.options.get("greedy"))
    try:
        return TrainedPolicy.load(spec.target, seed=seed, greedy=greedy, env=env)
    except (FileNotFoundError, ValueError, KeyError, OSError, UsageError) as error:
        raise UsageError(f"cannot load trained seat {spec.target[:200]!r}: {error}") from error


def _check_zoo(spec: SeatSpec, env, context: SeatContext) -> None:
    zoo.resolve(spec.target)  # in the manifest, its folder installed


def _zoo(spec: SeatSpec, env, context: SeatContext):
    """The zoo population: the run and seed its manifest names, digest verified."""
    return zoo.load(spec.target, env=env, greedy=bool(spec.options.get("greedy")))


TRAINED = SeatKind(
    "trained",
    "<run folder or checkpoint>",
    _trained,
    options={"seed": _seed, "greedy": FLAG},
    check=_check_trained,
)
ZOO = SeatKind(
    "zoo",
    "<game>/<population>",
    _zoo,
    options={"greedy": FLAG},
    check=_check_zoo,
    target_ok=lambda target: "/" in target.strip("/"),
)
