"""What the open_grid tables read of one played episode: its metrics, its per-step events and the
modes its agents reported.

The env's ``episode_metrics`` cover most columns. The rest come from the episode's per-step
``infos`` (pick-ups, working tools, cells lightened: re-crafts and craft steps per cell) and from
the replies' ``mode`` field (explore share, craft steps). A :class:`PlayResult` that carries them
(``infos`` / ``valid`` and ``replies``, filled by the batched harness) is read first; without
them the modes are read from the run's ``transcript.jsonl`` (every act call's ``fields``) and
the columns that need per-step events are left empty (None).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dilemmax.envs.open_cleanup import constants as C
from dilemmax.llm.play import PlayResult
from dilemmax.llm.transcript import read_lines


@dataclass
class Episode:
    """One played episode as the tables read it.

    Attributes:
        seats: agent -> seat name (the model a row is about).
        metrics: metric -> this episode's value (``env.episode_metrics``, numpy).
        infos: the per-step events, each leaf [T, ...] (None when the result has none).
        valid: bool[T], the played steps (None with ``infos`` None).
        modes: agent -> one (trial, mode) per answered act step (mode "" when unreadable).
        trial_steps: steps of a full trial (a step's trial is ``step // trial_steps`` where
            trials have a fixed length; OpenHarvest's come from ``infos``).
    """

    seats: dict[str, str]
    metrics: dict[str, np.ndarray]
    infos: dict[str, np.ndarray] | None = None
    valid: np.ndarray | None = None
    modes: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    trial_steps: int = C.TRIAL_STEPS


def episodes_of(result: PlayResult, env, transcript: Path | None = None) -> list[Episode]:
    """The episodes of one part's result, in order."""
    infos = getattr(result, "infos", None) or None
    valid = getattr(result, "valid", None)
    replies = getattr(result, "replies", None) or None
    from_transcript = _transcript_modes(transcript) if replies is None and transcript else {}
    out = []
    for e, info in enumerate(result.episodes):
        metrics = {k: np.asarray(v[e]) for k, v in result.metrics.items()}
        step_infos = None if infos is None else {k: np.asarray(v[e]) for k, v in infos.items()}
        step_valid = None if valid is None or infos is None else np.asarray(valid[e])
        if replies is not None:
            modes = _modes(replies[e], env.trial_steps, step_infos)
        else:
            modes = from_transcript.get((info.get("part"), info.get("episode")), {})
            modes = {a: [(t // env.trial_steps, m) for t, m in v] for a, v in modes.items()}
        seats = dict(info.get("seats", {}))
        out.append(Episode(seats, metrics, step_infos, step_valid, modes, env.trial_steps))
    return out


def _mode_of(fields: Any) -> str:
    mode = fields.get("mode") if isinstance(fields, Mapping) else None
    return mode if isinstance(mode, str) else ""


def _modes(rows: Sequence[Mapping], trial_steps: int, infos) -> dict[str, list[tuple[int, str]]]:
    """agent -> (trial, mode) of each act reply; the trial from the step's event when known."""
    trial_of = None if infos is None else np.asarray(infos["trial"])
    modes: dict[str, list[tuple[int, str]]] = {}
    for row in rows:
        t = int(row.get("step", 0))
        trial = int(trial_of[t]) if trial_of is not None and t < len(trial_of) else t // trial_steps
        modes.setdefault(str(row.get("agent")), []).append((trial, _mode_of(row.get("fields"))))
    return modes


def _transcript_modes(path: Path) -> dict[tuple, dict[str, list[tuple[int, str]]]]:
    """(part, episode) -> agent -> (step, mode) of every act call recorded in ``path``. Rows
    that are not act calls, or lack a part, episode, agent or integer step, are skipped."""
    rows, _ = read_lines(Path(path))
    out: dict[tuple, dict[str, list[tuple[int, str]]]] = {}
    for row in rows:
        if row.get("type", "call") != "call" or row.get("kind") != "act":
            continue
        step = row.get("step")
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            continue
        key = (row.get("part"), row.get("episode"))
        agents = out.setdefault(key, {})
        agents.setdefault(str(row.get("agent")), []).append((step, _mode_of(row.get("fields"))))
    for agents in out.values():
        for steps in agents.values():
            steps.sort(key=lambda pair: pair[0])
    return out


# ----------------------------------------------------------------------------- OpenCleanup events
def per_trial(values: np.ndarray, infos, valid, num_trials: int) -> np.ndarray:
    """[K, A] sums of a per-step, per-agent event over each trial's played steps."""
    trial = np.asarray(infos["trial"])
    played = np.asarray(valid, bool)
    out = np.zeros((num_trials, values.shape[1]), np.float64)
    for k in range(num_trials):
        out[k] = values[played & (trial == k)].sum(axis=0)
    return out


def recrafts(infos, valid, num_trials: int) -> tuple[np.ndarray, np.ndarray]:
    """(re-crafts [K, A], working tools made [K, A]).

    A pick-up that makes a working tool is a re-craft when the tool is the one the agent held
    last and lost (a later pick-up slid its window off that recipe). The window is rebuilt from
    the agent's own pick-ups; it starts empty at each trial start, as the env's does.
    """
    picked = np.asarray(infos["picked_up"])  # [T, A], tool or -1
    made = np.asarray(infos["made_tool"], bool)  # [T, A]
    trial = np.asarray(infos["trial"])
    played = np.asarray(valid, bool)
    num_agents = picked.shape[1]
    again = np.zeros((num_trials, num_agents))
    tools = np.zeros((num_trials, num_agents))
    for a in range(num_agents):
        window: list[int] = []
        holding = lost = None  # the working pair held now / the one lost last
        current = None
        for t in np.flatnonzero(played):
            k = int(trial[t])
            if k != current:
                window, holding, lost, current = [], None, None, k
            if picked[t, a] < 0:
                continue
            window = (window + [int(picked[t, a])])[-C.WINDOW :]
            pair = tuple(window) if len(window) == C.WINDOW else None
            if holding is not None and pair != holding:
                lost = holding
            holding = pair if made[t, a] else None
            if made[t, a]:
                tools[k, a] += 1
                again[k, a] += pair == lost
    return again, tools
