"""The arena: any mix of policies in any registered env, for N episodes, with the env's metrics.

Two paths, one result format:

- the JAX path (every seat jittable): all episodes in one vmapped, scanned program
  (:func:`dilemmax.envs.rollout.run_episodes`);
- the Python path (any seat not jittable, say a language model, or when a transcript or GIF is
  asked for): a step loop over the jitted env that can give each policy the text view of its
  observation, writes every step to a JSONL transcript as it goes (a crash loses nothing already
  played), and records frames.

Both paths split keys the same way, so with jittable policies they play identical episodes and
report identical metrics.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.agents.policy import is_jittable, reset_policy
from dilemmax.envs.base import MultiAgentEnv, Rollout
from dilemmax.envs.rollout import (  # PolicyError: re-exported, raised on both paths
    Observation,
    PolicyError,
    initial_carries,
    is_carried,
    record_step,
    run_episodes,
    seat_policies,
)


@dataclass
class ArenaResult:
    """Per-episode metrics (numpy arrays with a leading episode axis) and where things went."""

    metrics: dict[str, np.ndarray]
    transcript: Path | None = None
    frames: list[np.ndarray] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Mean over episodes of every metric (per-agent metrics stay per agent)."""
        return {k: np.mean(v.astype(np.float64), axis=0) for k, v in self.metrics.items()}


def _to_json(tree) -> Any:
    return jax.tree.map(lambda x: np.asarray(x).tolist(), tree)


def _pad_rollout(steps: list[tuple], final_state, length: int) -> Rollout:
    """Stacks recorded (actions, rewards, dones, infos) steps, padded to ``length``."""
    played = len(steps)
    padded = steps + [steps[-1]] * (length - played)
    actions, rewards, dones, infos = jax.tree.map(lambda *xs: jnp.stack(xs), *padded)
    valid = jnp.arange(length) < played
    return Rollout(actions, rewards, dones, infos, valid, final_state)


class Arena:
    """Seats ``policies`` (one for all, a list per seat, or a dict by agent) in ``env``.

    Args:
        env: a dilemmax env.
        policies: policies following :class:`dilemmax.agents.policy.Policy`.
        text_protocol: the game's text protocol whose ``render`` backs ``observation.text()`` in the
            Python path (default: ``env.text_protocol()`` when the game has one).
    """

    def __init__(self, env: MultiAgentEnv, policies, text_protocol=None):
        self.env = env
        self.seats = seat_policies(env, policies)
        self.jittable = all(is_jittable(p) for p in self.seats)
        if text_protocol is None:
            try:
                text_protocol = env.text_protocol()
            except NotImplementedError:
                text_protocol = None
        self.text_protocol = text_protocol
        unique = {id(p): p for p in self.seats}.values()
        for policy in unique:  # model seats read their turns from the protocol
            if callable(getattr(policy, "bind", None)):
                policy.bind(env, text_protocol)
        self._reset_to = jax.jit(env.reset_to)
        self._sample_config = jax.jit(env.sample_config)
        self._step = jax.jit(env.step_env)
        self._mask = jax.jit(env.action_mask)
        self._metrics = jax.jit(env.episode_metrics)
        self._jitted = {
            id(p): jax.jit(p) for p in self.seats if is_jittable(p) and not is_carried(p)
        }
        # Carried (recurrent) seats: their memories, reset at each episode start.
        self._carried_step = {id(p): jax.jit(p.step) for p in self.seats if is_carried(p)}
        self._record = jax.jit(lambda c, a, r, i, d: record_step(env, self.seats, c, a, r, i, d))
        self._carries: list = []
        self.on_step: Callable[[], None] | None = None  # called after each Python-path step

    def run(
        self,
        key: jax.Array,
        num_episodes: int,
        configs=None,
        record: str | Path | None = None,
        gif_episodes: int = 0,
        python_loop: bool | None = None,
    ) -> ArenaResult:
        """Plays ``num_episodes`` episodes (per configuration when ``configs`` is batched).

        Args:
            configs: None (each episode samples its configuration) or a batched configuration
                pytree with leading axis C; then metrics have axes [C * num_episodes, ...].
            record: a JSONL path; every step and each episode's metrics are appended as played.
            gif_episodes: collect ``render_rgb`` frames of this many first episodes.
            python_loop: force the Python path (default: only when needed).
        """
        if python_loop is None:
            python_loop = not self.jittable or record is not None or gif_episodes > 0
        if not python_loop:
            _, metrics = run_episodes(self.env, self.seats, key, num_episodes, configs)
            flat = jax.tree.map(
                lambda x: np.asarray(x).reshape((-1,) + x.shape[2 if configs is not None else 1 :]),
                metrics,
            )
            return ArenaResult(flat)
        return self._run_python(key, num_episodes, configs, record, gif_episodes)

    # -- the Python path --------------------------------------------------------------------------
    def _run_python(self, key, num_episodes, configs, record, gif_episodes) -> ArenaResult:
        path = Path(record) if record is not None else None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        per_episode: list[dict] = []
        frames: list[np.ndarray] = []
        jobs = self._episode_jobs(key, num_episodes, configs)
        with open(path, "a") if path is not None else _NullFile() as sink:
            for episode, (episode_key, config) in enumerate(jobs):
                write = lambda row, e=episode: sink.write(json.dumps({"episode": e, **row}) + "\n")
                capture = frames.append if episode < gif_episodes else None
                metrics = self._play(episode_key, config, write, capture)
                write({"metrics": _to_json(metrics)})
                sink.flush()
                per_episode.append(metrics)
        stacked = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *per_episode)
        return ArenaResult(stacked, path, frames)

    def _episode_jobs(self, key, num_episodes, configs):
        """(key, config) per episode, split exactly as :func:`run_episodes` splits them."""
        if configs is None:
            return [(k, None) for k in jax.random.split(key, num_episodes)]
        num_configs = jax.tree.leaves(configs)[0].shape[0]
        jobs = []
        for c, config_key in enumerate(jax.random.split(key, num_configs)):
            config = jax.tree.map(lambda x, c=c: x[c], configs)
            jobs += [(k, config) for k in jax.random.split(config_key, num_episodes)]
        return jobs

    def _play(self, key, config, write: Callable, capture: Callable | None) -> dict:
        env = self.env
        for policy in {id(p): p for p in self.seats}.values():  # once per policy
            reset_policy(policy)
        self._carries = initial_carries(self.seats)
        key_config, key_reset, key_run = jax.random.split(key, 3)
        if config is None:
            config = self._sample_config(key_config)
        obs, state = self._reset_to(key_reset, config)
        if capture is not None:
            capture(np.asarray(env.render(state, "rgb_array")))
        steps = []
        for t, step_key in enumerate(jax.random.split(key_run, env.max_steps)):
            key_act, key_step = jax.random.split(step_key)
            actions = self._act(key_act, obs, state)
            before = state
            obs, state, rewards, dones, infos = self._step(key_step, state, actions)
            if self._carried_step:
                self._carries = self._record(self._carries, actions, rewards, infos, dones)
            steps.append((actions, rewards, dones, infos))
            self._notify("after_step", before, actions, infos, state)
            if self.on_step is not None:
                self.on_step()
            write({"t": t, "actions": _to_json(actions), "rewards": _to_json(rewards),
                   "dones": _to_json(dones), "infos": _to_json(infos)})  # fmt: skip
            if capture is not None:
                capture(np.asarray(env.render(state, "rgb_array")))
            if bool(dones["__all__"]):
                break
        self._notify("end_episode", state)
        rollout = _pad_rollout(steps, state, env.max_steps)
        return jax.tree.map(np.asarray, self._metrics(rollout))

    def _notify(self, hook: str, *args) -> None:
        """Calls ``policy.<hook>(agent, *args)`` on seats that keep memory (language models)."""
        for agent, policy in zip(self.env.agents, self.seats, strict=True):
            method = getattr(policy, hook, None)
            if callable(method) and not is_jittable(policy):
                method(agent, *args)

    def _act(self, key, obs, state) -> dict:
        env = self.env
        masks = self._mask(state)
        keys = jax.random.split(key, env.num_agents)
        actions = {}
        for i, (agent, policy) in enumerate(zip(env.agents, self.seats, strict=True)):
            text_fn = None
            if self.text_protocol is not None:
                text_fn = lambda agent=agent: self.text_protocol.render(state, agent)
            view = Observation(obs[agent], masks[agent], jnp.int32(i), state, text_fn)
            if id(policy) in self._carried_step:
                view = view.replace(text_fn=None)
                action, self._carries[i] = self._carried_step[id(policy)](
                    self._carries[i], keys[i], view
                )
            elif id(policy) in self._jitted:
                action = self._jitted[id(policy)](keys[i], view.replace(text_fn=None))
            else:
                action = policy(keys[i], view)
            actions[agent] = policy_action(action, agent)
        return actions


def policy_action(action: Any, agent: str) -> jax.Array:
    """int32[] of a policy's returned action, or :class:`PolicyError` naming the seat.

    Integers (Python, numpy, or 0-d / one-element integer arrays) pass, even out of range: the env
    flags those as invalid moves, as it does for a model's illegal reply. None, floats, strings
    and other shapes are refused, since truncating them would play a move nobody chose.
    """
    try:
        arr = np.asarray(action)
    except Exception:  # noqa: BLE001 - an object numpy cannot read is not an action
        arr = None
    if arr is None or arr.dtype.kind not in "iub" or arr.size != 1 or arr.dtype == bool:
        raise PolicyError(
            f"the policy of seat {agent} returned {_short(action)}; expected an integer action"
        )
    value = int(arr.reshape(()))
    if not -(2**31) <= value < 2**31:
        value = -1  # out of int32: an invalid action, flagged by the env
    return jnp.int32(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _NullFile:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def write(self, _):
        pass

    def flush(self):
        pass


def save_gif(frames: list[np.ndarray], path: str | Path, fps: int = 8, scale: int = 1) -> Path:
    """Writes uint8[H, W, 3] frames as an animated GIF, each pixel repeated ``scale`` times."""
    from PIL import Image

    if not frames:
        raise ValueError("no frames to write")
    enlarge = lambda f: np.repeat(np.repeat(np.asarray(f, np.uint8), scale, 0), scale, 1)
    images = [Image.fromarray(enlarge(f)) for f in frames]
    path = Path(path)
    images[0].save(path, save_all=True, append_images=images[1:], duration=1000 // fps, loop=0)
    return path
