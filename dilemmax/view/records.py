"""What a rollout file or play transcript must hold before ``dilemmax view`` replays it.

Both formats are documented (docs/transcripts.md) so other tools write them, and a file from
elsewhere may hold anything. Every line is checked before an episode is replayed: each field's
kind (the transcript's lines by :data:`dilemmax.llm.transcript.LINE_FIELDS`, a rollout file's by
:data:`ROLLOUT_FIELDS`, an episode start by :func:`dilemmax.envs.replay.start_problem`), and
each episode's actions against its env: one list per agent of the env, as many steps as the
lines say and no more than the env's episode length, each action one of the agent's. A mistake
is one line naming the file, the line and the field, never a traceback from JAX or ``int()``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.option_spec import shown
from dilemmax.envs.replay import start_problem
from dilemmax.envs.typecheck import field_problem
from dilemmax.errors import UsageError
from dilemmax.llm.transcript import check_lines

Numbered = Sequence[tuple[int, Mapping[str, Any]]]  # (line number from 1, the line's JSON)

# The fields of a rollout file's lines (a start, a step or an episode's metrics) and what each
# holds; a field a line leaves out is not checked here (a step without actions is, below).
ROLLOUT_FIELDS: dict[str, Any] = {
    "episode": int,
    "start": Any,  # checked by start_problem
    "t": int,
    "actions": Mapping[str, int],
    "rewards": Mapping[str, float],
    "dones": Mapping[str, bool],
    "infos": Mapping[str, Any],
    "metrics": Mapping[str, Any],
}


class RecordError(UsageError, ValueError):
    """A line of a rollout file or transcript that does not hold what its format says."""


def _refuse(path: Path, number: int, problem: str) -> RecordError:
    return RecordError(f"{path} line {number}: {problem} (docs/transcripts.md)")


def check_rollout_lines(path: Path, numbered: Numbered) -> None:
    """Every line's fields, one start per episode, each step ``t`` once and ``t >= 0``."""
    starts: set[int] = set()
    steps: set[tuple[int, int]] = set()
    for number, row in numbered:
        problem = _fields_problem(row, ROLLOUT_FIELDS) or _rollout_line_problem(row)
        if problem:
            raise _refuse(path, number, problem)
        e = row["episode"]
        if "start" in row:
            if e in starts:
                raise _refuse(path, number, f"a second start line of episode {e}")
            starts.add(e)
        elif "t" in row:
            if (e, row["t"]) in steps:
                raise _refuse(path, number, f"a second line of episode {e}'s step t={row['t']}")
            steps.add((e, row["t"]))


def _rollout_line_problem(row: Mapping[str, Any]) -> str | None:
    if row["episode"] < 0:
        return f"episode={row['episode']} is not allowed: expected an integer >= 0"
    if "start" in row:
        return start_problem(row["start"])
    if "t" in row and row["t"] < 0:
        return f"t={row['t']} is not allowed: expected an integer >= 0"
    if "t" in row and "actions" not in row:
        return "a step line without actions"
    return None


def check_transcript_lines(path: Path, numbered: Numbered) -> None:
    """Every line's fields (:func:`dilemmax.llm.transcript.check_lines`) and every episode
    line's start."""
    try:
        check_lines(path, numbered)
    except UsageError as error:
        raise RecordError(str(error)) from None
    for number, row in numbered:
        if row.get("type") == "episode" and "start" in row:
            problem = start_problem(row["start"])
            if problem:
                raise _refuse(path, number, problem)


def _fields_problem(row: Mapping[str, Any], fields: Mapping[str, Any]) -> str | None:
    for name, hint in fields.items():
        problem = field_problem(name, row[name], hint) if name in row else None
        if problem:
            return problem
    if "episode" not in row:
        return "no episode field"
    return None


def rollout_actions(
    env: MultiAgentEnv, path: Path, episode: int, steps: Numbered
) -> dict[str, list[int]]:
    """agent -> the actions of a rollout episode's step lines, checked: the steps are t = 0, 1,
    ... with none left out, no more than the env's episode length, each line's actions one per
    agent of the env and each one of the agent's."""
    steps = sorted(steps, key=lambda step: step[1]["t"])
    game = _game(env)
    for k, (number, row) in enumerate(steps):
        where = f"{path} line {number}"
        if k >= env.max_steps:
            raise RecordError(
                f"{where}: episode {episode} has {len(steps)} step lines, more than an episode "
                f"of {game} has ({env.max_steps})"
            )
        if row["t"] != k:
            raise RecordError(
                f"{where}: t={row['t']}, but episode {episode} has no step t={k} (its steps are "
                "t = 0, 1, ... with none left out)"
            )
        problem = _actions_problem(env, {a: [v] for a, v in row["actions"].items()}, game, k)
        if problem:
            raise RecordError(f"{where}: {problem}")
    return {a: [row["actions"][a] for _, row in steps] for a in env.agents}


def check_actions(
    env: MultiAgentEnv, actions: Mapping[str, Sequence[int]], where: str, steps: Any = None
) -> None:
    """A transcript episode's actions (agent -> one action per step) fit ``env``: every agent
    of it and no other, the same number of steps each (``steps`` when the line gives it), at
    most the env's episode length, each action one of the agent's. ``where`` names the file
    and line."""
    game = _game(env)
    lengths = sorted({len(actions[a]) for a in actions})
    if len(lengths) > 1:
        raise RecordError(f"{where}: the agents' actions have different lengths {lengths}")
    played = lengths[0] if lengths else 0
    if played > env.max_steps:
        raise RecordError(
            f"{where}: actions of {played} steps, more than an episode of {game} has "
            f"({env.max_steps})"
        )
    if steps is not None and steps != played:
        raise RecordError(f"{where}: steps={shown(steps)}, but its actions hold {played} steps")
    problem = _actions_problem(env, actions, game, 0)
    if problem:
        raise RecordError(f"{where}: {problem}")


def _actions_problem(env, actions: Mapping[str, Sequence[int]], game: str, first: int):
    """What is wrong with agent -> actions from step ``first`` on, None when nothing."""
    if set(actions) != set(env.agents):
        return (
            f"actions name agents {shown(sorted(actions), 80)}; {game} has {', '.join(env.agents)}"
        )
    for agent in env.agents:
        count = int(getattr(env.action_space(agent), "n", 0))
        for t, action in enumerate(actions[agent], first):
            if not 0 <= action < count:
                return (
                    f"actions.{agent}={shown(action)} at step {t} is not allowed: expected one "
                    f"of its actions 0..{count - 1}"
                )
    return None


def _game(env: MultiAgentEnv) -> str:
    made = getattr(env, "made_as", None) or {}
    return str(made.get("env") or type(env).__name__)
