"""The arena: any mix of policies in any registered env, for N episodes, with the env's metrics.

Two paths, one result format:

- the JAX path (every seat jittable): all episodes in one vmapped, scanned program
  (:func:`dilemmax.envs.rollout.run_episodes`);
- the Python path (any seat not jittable, say a language model, or when a transcript or GIF is
  asked for): the episode driver's step loop (:class:`dilemmax.envs.loop.EpisodeLoop`), whose
  hook gives each Python policy the text view of its observation, writes every step to a JSONL
  transcript as it goes (a crash loses nothing already played), and records frames.

Both paths are the one driver of :mod:`dilemmax.envs.rollout` (same key schedule, jobs, seat
loop and action check), so with jittable policies they play identical episodes and report
identical metrics.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image

from dilemmax.agents.policy import is_jittable, reset_policy
from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.loop import EpisodeLoop, StepHook
from dilemmax.envs.replay import episode_start
from dilemmax.envs.rollout import (  # PolicyError, policy_action: re-exported, used on both paths
    Observation,
    Playing,
    PolicyError,
    episode_jobs,
    num_configs_of,
    policy_action,
    run_episodes,
    seat_keys,
    seat_policies,
    step_parts,
)
from dilemmax.envs.seat_spec import SeatContext, seat_policy

__all__ = ["Arena", "ArenaResult", "PolicyError", "policy_action", "save_gif"]


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


def _resolved(env: MultiAgentEnv, policies):
    """``policies`` with every seat spec among them resolved (model seats share one client)."""
    context = SeatContext()
    if isinstance(policies, Mapping):
        return {agent: seat_policy(p, env, context) for agent, p in policies.items()}
    if isinstance(policies, list | tuple):
        return [seat_policy(p, env, context) for p in policies]
    return seat_policy(policies, env, context)


class Arena:
    """Seats ``policies`` (one for all, a list per seat, or a dict by agent) in ``env``.

    Args:
        env: a dilemmax env.
        policies: policies following :class:`dilemmax.agents.policy.Policy`, or seat specs
            (:mod:`dilemmax.envs.seat_spec`: ``"teacher"``, ``"zoo:<game>/<population>"``,
            ``"openai:<model>,base_url=..."``, ...) resolved against ``env``.
        text_protocol: the game's text protocol whose ``render`` backs ``observation.text()`` in the
            Python path (default: ``env.text_protocol()`` when the game has one).
    """

    def __init__(self, env: MultiAgentEnv, policies, text_protocol=None):
        self.env = env
        self.seats = seat_policies(env, _resolved(env, policies))
        self.jittable = all(is_jittable(p) for p in self.seats)
        if text_protocol is None:
            try:
                text_protocol = env.text_protocol()
            except NotImplementedError:
                text_protocol = None
        self.text_protocol = text_protocol
        for policy in self._unique_seats():  # model seats read their turns from the protocol
            if callable(getattr(policy, "bind", None)):
                policy.bind(env, text_protocol)
        # The jittable seats act inside the driver's compiled step; the Python ones (None
        # there) in the hook, with the text view of their observation.
        jax_seats = [p if is_jittable(p) else None for p in self.seats]
        self._loop = EpisodeLoop(env, jax_seats)
        self._mask = jax.jit(env.action_mask)
        self.on_step: Callable[[], None] | None = None  # called after each Python-path step

    def _unique_seats(self) -> list:
        return list({id(p): p for p in self.seats}.values())

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
        jobs = episode_jobs(key, num_episodes, num_configs_of(configs))
        with open(path, "a") if path is not None else _NullFile() as sink:
            for job in jobs:
                e = job.episode
                write = lambda row, e=e: sink.write(json.dumps({"episode": e, **row}) + "\n")
                capture = frames.append if e < gif_episodes else None
                config = None
                if job.config_index is not None:
                    config = jax.tree.map(lambda x, c=job.config_index: x[c], configs)
                write({"start": episode_start(self.env, job.key, config)})  # for a replay
                metrics = self._play(job.key, config, write, capture)
                write({"metrics": _to_json(metrics)})
                sink.flush()
                per_episode.append(metrics)
        stacked = jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *per_episode)
        return ArenaResult(stacked, path, frames)

    def _play(self, key, config, write: Callable, capture: Callable | None) -> dict:
        for policy in self._unique_seats():
            reset_policy(policy)
        played = self._loop.play(key, config, hook=_ArenaHook(self, write, capture))
        self._notify("end_episode", played.final_state)
        return played.metrics

    def _notify(self, hook: str, *args) -> None:
        """Calls ``policy.<hook>(agent, *args)`` on seats that keep memory (language models)."""
        for agent, policy in zip(self.env.agents, self.seats, strict=True):
            method = getattr(policy, hook, None)
            if callable(method) and not is_jittable(policy):
                method(agent, *args)

    def _python_actions(self, step_key, playing: Playing, actions: dict) -> dict:
        """``actions`` with each Python seat's own, from its observation (with the text view)
        and the key the driver's schedule gives its seat."""
        env = self.env
        if self.jittable:
            return actions
        obs, state = playing.obs, playing.state
        masks = self._mask(state)
        key_act, _ = step_parts(step_key)
        keys = seat_keys(key_act, env.num_agents)
        actions = dict(actions)
        for i, (agent, policy) in enumerate(zip(env.agents, self.seats, strict=True)):
            if is_jittable(policy):
                continue
            text_fn = None
            if self.text_protocol is not None:
                text_fn = lambda agent=agent: self.text_protocol.render(state, agent)
            view = Observation(obs[agent], masks[agent], jnp.int32(i), state, text_fn)
            actions[agent] = policy_action(policy(keys[i], view), agent)
        return actions


class _ArenaHook(StepHook):
    """The arena's Python path around each step: its Python seats, the memories' transition
    hooks, the JSONL rows and the frames."""

    def __init__(self, arena: Arena, write: Callable, capture: Callable | None):
        self.arena, self.write, self.capture = arena, write, capture

    def begin(self, playing: Playing) -> None:
        self._frame(playing.state)

    def fill(self, t, step_key, playing, actions, live) -> dict:
        return self.arena._python_actions(step_key, playing, actions)

    def observe(self, t, before, step, after, live) -> None:
        actions, rewards, dones, infos = step
        self.arena._notify("after_step", before.state, actions, infos, after.state)
        if self.arena.on_step is not None:
            self.arena.on_step()
        self.write({"t": t, "actions": _to_json(actions), "rewards": _to_json(rewards),
                    "dones": _to_json(dones), "infos": _to_json(infos)})  # fmt: skip
        self._frame(after.state)

    def _frame(self, state) -> None:
        if self.capture is not None:
            self.capture(np.asarray(self.arena.env.render(state, "rgb_array")))


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
    if not frames:
        raise ValueError("no frames to write")
    enlarge = lambda f: np.repeat(np.repeat(np.asarray(f, np.uint8), scale, 0), scale, 1)
    images = [Image.fromarray(enlarge(f)) for f in frames]
    path = Path(path)
    images[0].save(path, save_all=True, append_images=images[1:], duration=1000 // fps, loop=0)
    return path
