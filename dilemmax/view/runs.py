"""The runs ``dilemmax view`` reads, each as a list of :class:`Episode` to replay.

- a ``dilemmax rollout --out`` file: JSON lines ``{"episode": e, "start": {...}}`` (the env and
  the episode's key, :func:`dilemmax.envs.replay.episode_start`), ``{"episode": e, "t": t,
  "actions": {...}, "rewards": {...}, ...}`` per step and ``{"episode": e, "metrics": {...}}``;
- a ``dilemmax play`` / ``dilemmax experiment`` run folder (or its ``transcript.jsonl``): the
  run line, one ``call`` line per model call and one ``episode`` line per episode with its
  metrics, ``start`` and every seat's ``actions``;
- a training run folder (``dilemmax train``; ``dilemmax evaluate`` writes its ``eval.json``
  into the same folder): its checkpoint seated in its evaluation env for a few episodes,
  played here (the trainer keeps only averaged evaluation metrics, no episodes).

Every episode is then replayed from its start and actions (:func:`replay_states`), so the page
shows states no writer had to store. docs/transcripts.md describes the formats.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np

import dilemmax
from dilemmax.agents.trained import TrainedPolicy, run_config
from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.option_spec import shown
from dilemmax.envs.registry import check_version, registered_envs, split_version
from dilemmax.envs.replay import start_config, start_key
from dilemmax.envs.rollout import episode_jobs, run_episodes
from dilemmax.envs.seat_spec import parse_seat, resolve_seat
from dilemmax.errors import UsageError
from dilemmax.view.records import (
    check_actions,
    check_rollout_lines,
    check_transcript_lines,
    rollout_actions,
)

TRANSCRIPT = "transcript.jsonl"


@dataclass
class Episode:
    """One episode to replay.

    Attributes:
        label: how the picker names it (``main|e3``, ``episode 3``).
        env: the env it was played in.
        key: its episode key; config: its configuration (None: sampled from the key).
        actions: int32[T, A], every seat's action at every step played.
        metrics: the env's per-episode metrics (lists), as the run recorded them.
        seats: agent -> seat name.
        calls: the transcript's call lines of this episode, in order.
        group: the env's id and part, for the picker's first menu.
    """

    label: str
    env: MultiAgentEnv
    key: Any
    config: Any
    actions: np.ndarray
    metrics: dict = field(default_factory=dict)
    seats: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)
    group: str = ""


@dataclass
class Run:
    """What the page shows: a title, what kind of run it is, and its episodes."""

    title: str
    kind: str
    episodes: list[Episode]


def read_run(path: str | Path, episodes: int = 4, seed: int = 0) -> Run:
    """The run at ``path`` (see the module docstring); ``episodes`` and ``seed`` are for a
    training run, whose episodes are played here. A path that is none of these is a UsageError."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path}: no such file or folder")
    if path.is_dir():
        if (path / TRANSCRIPT).is_file():
            return _read_transcript(path / TRANSCRIPT)
        if (path / "config.json").is_file():
            return _play_trained(path, episodes, seed)
        raise UsageError(
            f"{path}: a folder without {TRANSCRIPT} (play / experiment) or config.json (train); "
            "nothing to view"
        )
    numbered = list(_json_rows(path))
    if not numbered:
        raise UsageError(f"{path}: holds no JSON lines to view")
    if numbered[0][1].get("type") == "run":
        return _read_transcript(path, numbered)
    if all("episode" in row for _, row in numbered):
        return _read_rollout(path, numbered)
    raise UsageError(
        f"{path}: neither a play transcript (first line a run line) nor a rollout file (every "
        "line with an episode); see docs/transcripts.md"
    )


def _json_rows(path: Path) -> Iterator[tuple[int, dict]]:
    """The complete JSON-object lines of ``path`` with their line numbers (from 1; a partial
    last line is a write cut off)."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise UsageError(f"{path}: unreadable ({err.strerror or err})") from None
    for number, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except ValueError:
            if not data.endswith(b"\n") and raw == data.split(b"\n")[-1]:
                return  # the last write, cut off
            raise UsageError(f"{path} line {number}: not JSON") from None
        if isinstance(row, dict):
            yield number, row


_ENVS: dict[str, MultiAgentEnv] = {}


def env_of(start: dict, where: str) -> MultiAgentEnv:
    """The env an episode start names (one instance per id and options)."""
    if not isinstance(start, dict) or not start.get("env"):
        raise UsageError(f"{where}: its start names no registered env, so it cannot be replayed")
    name = json.dumps([start["env"], start.get("options") or {}], sort_keys=True)
    if name not in _ENVS:
        try:
            _ENVS[name] = dilemmax.make(start["env"], **(start.get("options") or {}))
        except (TypeError, ValueError) as err:
            raise UsageError(f"{where}: its env cannot be built ({err})") from None
    return _ENVS[name]


def _episode_from(start, actions_by_agent, where: str, **fields) -> Episode:
    env = env_of(start, where)
    try:
        key = start_key(start)
        config = start_config(env, start)
        actions = np.stack(
            [np.asarray(actions_by_agent[a], np.int64) for a in env.agents], axis=1
        ).astype(np.int32)
    except (KeyError, TypeError, ValueError) as err:
        raise UsageError(
            f"{where}: its start or actions do not fit {start['env']} ({err})"
        ) from None
    return Episode(
        env=env, key=key, config=config, actions=actions.reshape(-1, env.num_agents), **fields
    )


# --------------------------------------------------------------------------- rollout files
def _read_rollout(path: Path, numbered: list[tuple[int, dict]]) -> Run:
    check_rollout_lines(path, numbered)
    by_episode: dict[int, dict] = {}
    for number, row in numbered:
        entry = by_episode.setdefault(row["episode"], {"steps": [], "metrics": {}, "start": None})
        if "start" in row:
            entry["start"] = row["start"]
        elif "t" in row:
            entry["steps"].append((number, row))
        elif "metrics" in row:
            entry["metrics"] = row["metrics"]
    episodes = []
    for e, entry in sorted(by_episode.items()):
        where = f"{path} episode {e}"
        if entry["start"] is None:
            raise UsageError(
                f"{where}: no start line (written before rollouts recorded their episode "
                "starts); run the rollout again to view it"
            )
        actions = rollout_actions(env_of(entry["start"], where), path, e, entry["steps"])
        episode = _episode_from(
            entry["start"], actions, where, label=f"episode {e}", metrics=entry["metrics"]
        )
        episode.group = entry["start"]["env"]
        episodes.append(episode)
    return Run(f"rollout {path.name}", "rollout", episodes)


# --------------------------------------------------------------------------- play transcripts
def _read_transcript(path: Path, numbered: list[tuple[int, dict]] | None = None) -> Run:
    numbered = list(_json_rows(path)) if numbered is None else numbered
    rows = [row for _, row in numbered]
    head = rows[0] if rows else {}
    if head.get("type") != "run":
        raise UsageError(f"{path}: line 1 is not a run line, so not a play transcript")
    check_transcript_lines(path, numbered)
    _check_versions(path, head, rows)
    calls: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("type") == "call":
            calls.setdefault(f"{row.get('part')}|e{row.get('episode')}", []).append(row)
    episodes = []
    for number, row in numbered:
        if row.get("type") != "episode":
            continue
        where = f"{path} line {number} (episode {row.get('id')})"
        if "start" not in row or "actions" not in row:
            raise UsageError(
                f"{where}: no start and actions (written before play recorded them); play the "
                "run again to view it"
            )
        check_actions(env_of(row["start"], where), row["actions"], where, row.get("steps"))
        episode = _episode_from(
            row["start"],
            row["actions"],
            where,
            label=str(row.get("id")),
            metrics=row.get("metrics") or {},
            seats=row.get("seats") or {},
            calls=sorted(calls.get(str(row.get("id")), []), key=_call_order),
        )
        episode.group = f"{row['start']['env']} {row.get('part', '')}".strip()
        episodes.append(episode)
    if not episodes:
        raise UsageError(f"{path}: no episode has finished in this run yet; nothing to view")
    identity = head.get("identity") or {}
    what = identity.get("design") or identity.get("env") or "play"
    return Run(f"{what}: {path.parent.name}/{path.name}", "play", episodes)


def _check_versions(path: Path, head: dict, rows: list[dict]) -> None:
    """Refuses a transcript recorded under another version of a game it plays (its run line's
    ``"games": ["moral_hazard-v0"]``): replayed under this version, its actions would show
    other states and rewards than were played. A run line without games predates versions:
    each episode's env was at version 0."""
    if "games" not in head:
        starts = [r.get("start") for r in rows if r.get("type") == "episode"]
        envs = {
            s.get("env") for s in starts if isinstance(s, dict) and isinstance(s.get("env"), str)
        }
        for env_id in envs & set(registered_envs()):
            check_version(env_id, 0, str(path))
        return
    games = head["games"]
    if not isinstance(games, list) or not all(isinstance(g, str) for g in games):
        raise UsageError(
            f"{path} line 1: games is {shown(games, 80)}, not a list of game ids "
            "(moral_hazard-v0); see docs/transcripts.md"
        )
    for label in games:
        name, version = split_version(label)
        if version is not None:
            check_version(name, version, str(path))


def _call_order(row: dict) -> tuple:
    return (int(row.get("step") or 0), str(row.get("agent")), str(row.get("key")))


# --------------------------------------------------------------------------- episodes played here
def played_episodes(env, key, rollouts, metrics, seats: dict, group: str) -> list[Episode]:
    """The episodes :func:`run_episodes` played from ``key`` (no configurations), to view."""
    episodes = []
    for job in episode_jobs(key, int(rollouts.valid.shape[0]), None):
        e = job.episode
        played = int(np.asarray(rollouts.valid[e]).sum())
        actions = np.stack([np.asarray(rollouts.actions[a][e]) for a in env.agents], 1)
        episodes.append(
            Episode(
                f"episode {e}",
                env,
                job.key,
                None,
                actions[:played].astype(np.int32),
                {k: np.asarray(v[e]).tolist() for k, v in metrics.items()},
                dict(seats),
                group=group,
            )
        )
    return episodes


# --------------------------------------------------------------------------- training runs
def _play_trained(path: Path, num_episodes: int, seed: int) -> Run:
    """A few episodes of the run's checkpoint in its evaluation env, seats as it trained them
    (learners the trained policy, the others its scripted partner), from ``seed``."""
    config = run_config(path)
    options = {**(config.get("env_kwargs") or {}), **(config.get("eval_env_kwargs") or {})}
    env = env_of({"env": config["env"], "options": options}, str(path))
    policy = TrainedPolicy.load(path, env=env)
    learners = config.get("learners")
    learners = range(env.num_agents) if learners is None else learners
    partner = config.get("partner_policy") or "random"
    try:  # any seat spec a training run's partners may be (a bare name: scripted)
        partner_policy = resolve_seat(partner, env, where="training partners")
    except UsageError as error:
        raise UsageError(f"{path}: its partner policy: {error}") from error
    seats = [policy if i in learners else partner_policy for i in range(env.num_agents)]
    if parse_seat(partner).shorthand:
        partner = f"scripted:{partner}"
    key = jax.random.key(seed)
    rollouts, metrics = run_episodes(env, seats, key, num_episodes)
    names = {a: ("trained" if i in learners else partner) for i, a in enumerate(env.agents)}
    episodes = played_episodes(env, key, rollouts, metrics, names, config["env"])
    return Run(f"trained {config.get('algo', '')} run {path.name} (seed {seed})", "train", episodes)
