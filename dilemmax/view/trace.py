"""One episode as the page draws it: replayed, then stored compactly.

An episode is replayed from its start and actions (:func:`dilemmax.envs.replay.replay_states`)
and turned into plain arrays: every seat's action, reward and legal actions per step, the game's
key events per step, and its state panel: for the grid games the cell codes of the first step
run-length encoded, then only the cells each step changed, with the agents' positions, facings
and frozen flags (the page draws the frame from these with the game's own palette and agent
colours, as ``render_rgb`` does); for the other games the board ``render(state, "ansi")`` writes
and the state's fields. The payload of one episode is JSON compressed with zlib and base64
encoded; the page inflates an episode only when it is picked.
"""

from __future__ import annotations

import base64
import json
import math
import zlib
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.game_declaration import GameDeclaration
from dilemmax.envs.metrics import PER_TRIAL_AGENT, axes_text
from dilemmax.envs.osj import explore_share
from dilemmax.envs.osj.view import agent_letter
from dilemmax.envs.registry import declaration, registered_envs
from dilemmax.envs.replay import replay_states
from dilemmax.view.runs import Episode

# The most key events a page plots; a game that declares none (its declaration's
# ``key_events``) shows every numeric per-step info of shape [T] or [T, A].
MAX_EVENTS = 12
# What an env no game declares shows: numbers for actions, every info, the board as text.
_UNDECLARED = GameDeclaration("dilemmax.envs.base:MultiAgentEnv", "an env no game declares")


def game_of(env: MultiAgentEnv) -> str:
    return (getattr(env, "made_as", None) or {}).get("env") or type(env).__name__


def declared(game: str) -> GameDeclaration:
    """What ``game`` declares for the page: its key events, trial figures, action names and
    whether (and how) its frames are drawn as a grid."""
    return declaration(game) if game in registered_envs(games_only=False) else _UNDECLARED


def env_info(env: MultiAgentEnv, first_state) -> dict[str, Any]:
    """What the page needs once per env: agents, their letters, action names, what each metric's
    axes are (``env.metric_axes``, as the metrics table shows them), and for a grid game its
    palette and agent colours."""
    game = game_of(env)
    game_declared = declared(game)
    info = {
        "game": game,
        "agents": list(env.agents),
        "letters": [agent_letter(i) for i in range(env.num_agents)],
        "actions": game_declared.action_names_for(int(env.action_space(env.agents[0]).n)),
        "grid": game_declared.is_grid,
        "metric_axes": {name: axes_text(axes) for name, axes in env.metric_axes.items()},
    }
    if info["grid"]:
        info["palette"] = np.asarray(game_declared.load_grid_view().palette()).tolist()
        info["colours"] = agent_colours(env, first_state).tolist()
    return info


def agent_colours(env: MultiAgentEnv, state) -> np.ndarray:
    """uint8[A, 3]: each agent's colour as ``render_rgb`` draws it (read off the frame at the
    centre of the agent's cell, which its arrowhead always covers)."""
    view = declared(game_of(env)).load_grid_view()
    frame = np.asarray(env.render(state, "rgb_array"))
    scale = frame.shape[0] // np.asarray(view.codes(state)).shape[0]
    positions, _, _ = view.agents(state)
    centre = scale // 2
    return np.stack(
        [frame[r * scale + centre, c * scale + centre] for r, c in np.asarray(positions)]
    )


# --------------------------------------------------------------------------- one episode
def trace(episode: Episode) -> tuple[dict, dict, Any]:
    """(the page's payload of ``episode``, its per-step infos, the first state)."""
    env = episode.env
    game = game_of(env)
    states, rewards, dones, infos = replay_states(env, episode.key, episode.config, episode.actions)
    states, rewards, infos = jax.device_get((states, rewards, infos))
    rewards = np.asarray(rewards, np.float64)
    steps = int(episode.actions.shape[0])
    masks = jax.device_get(jax.vmap(env.action_mask)(states))
    payload = {
        "steps": steps,
        "actions": episode.actions.T.tolist(),
        "rewards": _rounded(rewards.T),
        "legal": [_mask_words(np.asarray(masks[a])[:steps]) for a in env.agents],
        "events": events(game, env, infos, steps),
        "calls": [_call(row) for row in episode.calls],
        "trials": finite(trial_figures(game, env, episode, infos)),
    }
    if "trial" in infos:
        payload["trial"] = np.asarray(infos["trial"])[:steps].astype(np.int64).tolist()
    if declared(game).is_grid:
        payload["grid"] = grid_trace(game, states)
    else:
        payload["board"] = board_trace(env, states, steps)
    first = jax.tree.map(lambda x: x[0], states)
    return payload, infos, first


def _rounded(values: np.ndarray) -> list:
    """Floats to 6 significant digits (integers stay integers in the JSON)."""
    out = np.round(values, 6)
    if np.all(out == np.round(out)):
        return out.astype(np.int64).tolist()
    return out.tolist()


def _mask_words(mask: np.ndarray) -> list[str]:
    """bool[T, N] legal actions as one hex word per step (bit a = action a)."""
    mask = np.asarray(mask, bool)
    if mask.shape[1] < 63:
        words = (mask.astype(np.int64) << np.arange(mask.shape[1], dtype=np.int64)).sum(1)
        return [format(int(w), "x") for w in words]
    weights = 1 << np.arange(mask.shape[1], dtype=object)
    return [format(int(np.dot(row.astype(object), weights)), "x") for row in mask]


def events(game: str, env: MultiAgentEnv, infos: dict, steps: int) -> dict[str, list]:
    """name -> per-step values ([T], or [A][T] per agent) of the game's key events."""
    names = declared(game).key_events or sorted(infos)
    out = {}
    for name in names:
        if name not in infos or len(out) >= MAX_EVENTS:
            continue
        value = np.asarray(infos[name])[:steps]
        if value.dtype.kind not in "biuf" or value.ndim not in (1, 2):
            continue
        if value.ndim == 2 and value.shape[1] != env.num_agents:
            continue
        out[name] = _rounded(value.astype(np.float64).T)
    return out


def grid_trace(game: str, states) -> dict:
    """The grid run-length encoded at the start, then the changed cells of each step."""
    view = declared(game).load_grid_view()
    codes = np.asarray(view.codes(states), np.int64)
    total, height, width = codes.shape
    flat = codes.reshape(total, -1)
    changes = []
    for t in range(1, total):
        where = np.flatnonzero(flat[t] != flat[t - 1])
        changes.append(np.stack([where, flat[t, where]], 1).reshape(-1).tolist())
    positions, facings, frozen = (np.asarray(x) for x in view.agents(states))
    lit = np.asarray(view.beams(states, (height, width))).reshape(total, -1)
    return {
        "height": int(height),
        "width": int(width),
        "start": run_length(flat[0]),
        "changes": changes,
        "positions": positions.reshape(total, -1).tolist(),
        "facings": facings.tolist(),
        "frozen": (frozen > 0).astype(np.int8).tolist(),
        "beams": [np.flatnonzero(row).tolist() for row in lit],
    }


def run_length(values: Sequence[int]) -> list[int]:
    """[value, count, value, count, ...] of ``values``."""
    values = np.asarray(values)
    if values.size == 0:
        return []
    edges = np.flatnonzero(np.diff(values)) + 1
    starts = np.concatenate([[0], edges])
    counts = np.diff(np.concatenate([starts, [values.size]]))
    return np.stack([values[starts], counts], 1).reshape(-1).tolist()


def board_trace(env: MultiAgentEnv, states, steps: int) -> dict:
    """The board text and the state's fields at every step (small games: a few steps)."""
    texts, fields = [], []
    for t in range(steps + 1):
        state = jax.tree.map(lambda x, t=t: x[t], states)
        texts.append(str(env.render(state, "ansi")))
        fields.append(state_fields(state))
    return {"text": texts, "fields": fields}


def state_fields(state) -> dict[str, Any]:
    """name -> value of every small field of a state (and of its configuration)."""
    out = {}
    for prefix, node in (("", state), ("config.", getattr(state, "config", None))):
        if node is None or not hasattr(node, "__dataclass_fields__"):
            continue
        for name in node.__dataclass_fields__:
            value = getattr(node, name)
            if name == "config" or not hasattr(value, "shape"):
                continue
            value = np.asarray(value)
            if value.size <= 64:
                out[prefix + name] = _plain(value)
    return out


def _plain(value: np.ndarray):
    if value.dtype.kind == "f":
        return np.round(value.astype(np.float64), 4).tolist()
    return value.tolist()


def _call(row: dict) -> dict:
    """A transcript call as the page shows it."""
    keep = (
        "step", "agent", "seat", "kind", "system", "prompt", "reply", "action", "valid",
        "recovered", "parse_error", "fields", "error", "prompt_tokens", "completion_tokens",
        "reasoning_tokens", "latency_s", "retries",
    )  # fmt: skip
    return {k: row.get(k) for k in keep if k in row}


def trial_figures(game: str, env: MultiAgentEnv, episode: Episode, infos: dict) -> dict:
    """The trial-level figures a game declares (its declaration's ``trial_figures``: per-trial
    metrics [K, A] such as tiles cleaned, apples, returns) and, for model seats, the share of
    replies in explore mode."""
    figures = declared(game).trial_figures
    if not figures:
        return {}
    out = {}
    for name in figures:
        value = episode.metrics.get(name)
        value = np.asarray(value, dtype=np.float64) if _numeric(value) else None
        per_trial = env.metric_axes.get(name) == PER_TRIAL_AGENT
        # A recorded value of another shape (a foreign or damaged file) draws no figure.
        if per_trial and value is not None and value.ndim == 2 and value.shape[1] == env.num_agents:
            out[name] = _rounded(value)
    trial = np.asarray(infos.get("trial", np.zeros(episode.actions.shape[0])))
    acts = [c for c in episode.calls if c.get("kind") == "act"]
    if acts:
        num_trials = int(trial.max()) + 1 if trial.size else 1
        shares = np.full((num_trials, env.num_agents), np.nan)
        for k in range(num_trials):
            for i, agent in enumerate(env.agents):
                fields = [
                    c.get("fields") or {}
                    for c in acts
                    if c.get("agent") == agent and _trial_at(trial, c.get("step")) == k
                ]
                if fields:
                    shares[k, i] = explore_share(fields)
        out["explore_share"] = [
            [None if math.isnan(v) else round(v, 4) for v in row] for row in shares
        ]
    return out


def _trial_at(trial: np.ndarray, step) -> int:
    step = int(step or 0)
    return int(trial[min(step, trial.size - 1)]) if trial.size else 0


def _numeric(value) -> bool:
    try:
        np.asarray(value, dtype=np.float64)
        return True
    except (TypeError, ValueError):
        return False


def finite(value):
    """``value`` (nested lists and dicts) with NaN and infinities as None: JSON has neither."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def pack(payload: dict) -> str:
    """An episode's payload as the page stores it: JSON, zlib-compressed, base64."""
    text = json.dumps(payload, separators=(",", ":"), allow_nan=False, default=_default)
    return base64.b64encode(zlib.compress(text.encode(), 6)).decode("ascii")


def _default(value):
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON")
