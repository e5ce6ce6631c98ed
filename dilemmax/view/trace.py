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

from dilemmax.envs import grid
from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.metrics import PER_TRIAL_AGENT, axes_text
from dilemmax.envs.moral_hazard import constants as hazard_constants
from dilemmax.envs.open_cleanup import constants as cleanup_constants
from dilemmax.envs.open_cleanup import rendering as cleanup_rendering
from dilemmax.envs.open_harvest import constants as harvest_constants
from dilemmax.envs.open_harvest import rendering as harvest_rendering
from dilemmax.envs.open_harvest.observation import terrain_codes
from dilemmax.envs.osj import explore_share
from dilemmax.envs.osj.view import agent_letter
from dilemmax.envs.replay import replay_states
from dilemmax.view.runs import Episode

GRID_GAMES = ("open_cleanup", "open_harvest")

# The game's key events (infos per step, summed over agents in the time series); a game not
# named here shows every numeric per-step info of shape [T] or [T, A].
KEY_EVENTS = {
    "open_cleanup": ("cleared", "ate", "fired", "zapped", "pollution"),
    "open_harvest": ("ate", "zap_fired", "zapped", "num_apples"),
    "moral_hazard": ("query", "note_posted", "local", "decided", "final_correct"),
    "consequence": ("contributions", "eliminated", "fund", "rule_elimination"),
}
MAX_EVENTS = 12

# The papers' trial-level figures of the grid games (metrics the game declares per trial and
# agent, [K, A]); explore share is added for model seats.
TRIAL_FIGURES = {
    "open_cleanup": ("cleaning_per_trial", "apples_per_trial", "recipes_known"),
    "open_harvest": ("apples_per_trial", "return_per_trial", "payoffs_known_per_trial"),
}

# Names of the actions where the game has them (the others show numbers).
ACTION_NAMES = {
    "open_cleanup": cleanup_constants.ACTION_NAMES,
    "open_harvest": harvest_constants.ACTION_NAMES,
}


def hazard_action_names(num_actions: int) -> list[str]:
    """The moral hazard game's moves as its protocol writes them (notes by case offset)."""
    c = hazard_constants
    names = ["no move", *(f"LOCAL {x}" for x in c.LABELS), "QUERY"]
    names += [f"FINAL {x}" for x in c.LABELS] + ["NO NOTE"]
    names += [f"NOTE +{d} {x}" for d in range(num_actions) for x in c.LABELS]
    return names[:num_actions]


def game_of(env: MultiAgentEnv) -> str:
    return (getattr(env, "made_as", None) or {}).get("env") or type(env).__name__


def env_info(env: MultiAgentEnv, first_state) -> dict[str, Any]:
    """What the page needs once per env: agents, their letters, action names, what each metric's
    axes are (``env.metric_axes``, as the metrics table shows them), and for a grid game its
    palette and agent colours."""
    game = game_of(env)
    num_actions = int(env.action_space(env.agents[0]).n)
    names = ACTION_NAMES.get(game, ())
    if game == "moral_hazard":
        names = hazard_action_names(num_actions)
    info = {
        "game": game,
        "agents": list(env.agents),
        "letters": [agent_letter(i) for i in range(env.num_agents)],
        "actions": [names[a] if a < len(names) else str(a) for a in range(num_actions)],
        "grid": game in GRID_GAMES,
        "metric_axes": {name: axes_text(axes) for name, axes in env.metric_axes.items()},
    }
    if info["grid"]:
        info["palette"] = _palette(game).tolist()
        info["colours"] = agent_colours(env, first_state).tolist()
    return info


def _palette(game: str) -> np.ndarray:
    if game == "open_cleanup":
        return cleanup_rendering.PALETTE
    return harvest_rendering.code_palette()


def agent_colours(env: MultiAgentEnv, state) -> np.ndarray:
    """uint8[A, 3]: each agent's colour as ``render_rgb`` draws it (read off the frame at the
    centre of the agent's cell, which its arrowhead always covers)."""
    frame = np.asarray(env.render(state, "rgb_array"))
    scale = frame.shape[0] // np.asarray(_codes(game_of(env), state)).shape[0]
    positions, _, _ = _agents(game_of(env), state)
    centre = scale // 2
    return np.stack(
        [frame[r * scale + centre, c * scale + centre] for r, c in np.asarray(positions)]
    )


def _codes(game: str, states):
    return states.grid if game == "open_cleanup" else _terrain(states)


def _terrain(states):
    leaves = jax.tree.leaves(states.agent_pos)
    if leaves[0].ndim == 2:
        return terrain_codes(states)
    return jax.vmap(terrain_codes)(states)


def _agents(game: str, states):
    if game == "open_cleanup":
        return states.positions, states.orientations, states.frozen
    return states.agent_pos, states.agent_dir, states.frozen


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
    if game in GRID_GAMES:
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
    names = KEY_EVENTS.get(game) or sorted(infos)
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
    codes = np.asarray(_codes(game, states), np.int64)
    total, height, width = codes.shape
    flat = codes.reshape(total, -1)
    changes = []
    for t in range(1, total):
        where = np.flatnonzero(flat[t] != flat[t - 1])
        changes.append(np.stack([where, flat[t, where]], 1).reshape(-1).tolist())
    positions, facings, frozen = (np.asarray(x) for x in _agents(game, states))
    lit = beam_cells(game, states, (height, width)).reshape(total, -1)
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


def beam_cells(game: str, states, shape: tuple[int, int]) -> np.ndarray:
    """bool[T + 1, H, W]: the cells ``render_rgb`` tints in each state (the beams fired on the
    step before it), found as the game's renderer finds them."""
    if game == "open_cleanup":
        last = np.asarray(states.shot_time) == np.asarray(states.trial_step)[:, None] - 1
        cells = np.asarray(states.shot_cells)  # [T + 1, A, 4, 2]
        lit = np.zeros((cells.shape[0], *shape), bool)
        t, _, _ = np.nonzero(np.broadcast_to(last[:, :, None], cells.shape[:3]))
        rows, cols = cells[last].reshape(-1, 2).T
        inside = (rows >= 0) & (rows < shape[0]) & (cols >= 0) & (cols < shape[1])
        lit[t[inside], rows[inside], cols[inside]] = True
        return lit
    firing = np.asarray(states.last_action) == harvest_constants.ZAP
    mask = jax.vmap(lambda p, d, f: grid.beam_mask(p, d, f, shape))
    return np.asarray(mask(states.agent_pos, states.agent_dir, firing))


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
    """The papers' trial-level figures of a grid-game episode: per-trial metrics [K, A] (tiles
    cleaned, apples, returns) and, for model seats, the share of replies in explore mode."""
    if game not in GRID_GAMES:
        return {}
    out = {}
    for name in TRIAL_FIGURES[game]:
        value = episode.metrics.get(name)
        value = np.asarray(value, dtype=np.float64) if _numeric(value) else None
        declared = env.metric_axes.get(name) == PER_TRIAL_AGENT
        # A recorded value of another shape (a foreign or damaged file) draws no figure.
        if declared and value is not None and value.ndim == 2 and value.shape[1] == env.num_agents:
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
