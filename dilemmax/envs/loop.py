"""The episode driver's Python loop: the steps of :func:`~dilemmax.envs.rollout.run_episode`, one
jitted call each, with a hook for the seats played outside JAX.

The arena's Python path (one episode at a time) and batched language-model play (a wave of N
episodes, vmapped) both run :class:`EpisodeLoop`. It calls the same ``start_episode``,
``act_seats`` and ``advance`` as the JAX scan, so with only jittable seats it plays the JAX
path's episodes; what a driver adds (Python policies and their text views, model calls in
concurrent waves, transcripts, frames) lives in its :class:`StepHook`, between acting and
stepping (``fill``) and after each step (``observe``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from dilemmax.envs.base import MultiAgentEnv, Rollout
from dilemmax.envs.rollout import Playing, act_seats, advance, is_jittable, start_episode


class StepHook:
    """What a driver does outside JAX around each step; the defaults do nothing.

    In a batched loop every argument has a leading env axis N; ``live`` is bool[N] (bool[]
    unbatched): the episodes still playing, the only ones whose actions count.
    """

    def begin(self, playing: Playing) -> None:
        """After the reset, before the first step."""

    def fill(self, t: int, step_key, playing: Playing, actions: dict, live: np.ndarray) -> dict:
        """Every seat's actions at step ``t``: ``actions`` holds the jittable seats' (and 0 for
        the placeholder seats, whose real actions this returns in their place)."""
        return actions

    def observe(self, t: int, before: Playing, step: tuple, after: Playing, live) -> None:
        """After step ``t``: ``step`` is (actions, rewards, dones, infos) on the host."""


@dataclass
class Played:
    """What one call of :meth:`EpisodeLoop.play` played (leading axis N when batched).

    Attributes:
        rollout: the steps padded to ``env.max_steps`` (``valid`` marks the played ones).
        metrics: ``env.episode_metrics`` of the rollout, numpy arrays.
        played: int32[] or int32[N], the steps each episode played.
        final_state: the env state after the last step (frozen where an episode ended).
    """

    rollout: Rollout
    metrics: dict[str, np.ndarray]
    played: np.ndarray
    final_state: Any


class EpisodeLoop:
    """Compiled steps of ``env`` for one seating; ``None`` seats are filled by the hook.

    Args:
        seats: one jittable policy or None per agent, in ``env.agents`` order.
        num_steps: stop after this many steps (at most and by default ``env.max_steps``); the
            step keys are those of a full episode, so a truncated one plays its first steps.
        batched: vmap every step over a leading env axis.
    """

    def __init__(
        self,
        env: MultiAgentEnv,
        seats: Sequence,
        num_steps: int | None = None,
        batched: bool = False,
    ):
        self.env = env
        self.seats = list(seats)
        for i, policy in enumerate(self.seats):
            if policy is not None and not is_jittable(policy):
                raise TypeError(f"seat {env.agents[i]} runs outside JAX: give it as None")
        self.num_steps = env.max_steps if num_steps is None else min(num_steps, env.max_steps)
        self.batched = batched
        wrap = (lambda f: jax.jit(jax.vmap(f))) if batched else jax.jit
        seats = self.seats
        self._start = {
            False: wrap(lambda k: start_episode(env, seats, k, None, env.max_steps)),
            True: wrap(lambda k, c: start_episode(env, seats, k, c, env.max_steps)),
        }
        self._act = wrap(lambda k, p: act_seats(env, seats, k, p))
        self._advance = wrap(lambda k, p, a, c: advance(env, seats, k, p, a, c))
        self._metrics = wrap(env.episode_metrics)

    def play(self, key, config=None, live=None, hook: StepHook | None = None) -> Played:
        """Plays from ``key`` (key[N] when batched) on ``config`` (None: sampled per episode).

        ``live`` (bool[N]) marks the episodes that count; the others are inactive copies that
        keep a wave's shapes fixed, finished from the start.
        """
        hook = hook or StepHook()
        start = self._start[config is not None]
        playing, keys = start(key) if config is None else start(key, config)
        live = np.ones(np.shape(playing.finished), bool) if live is None else np.asarray(live)
        playing = playing.replace(finished=jnp.asarray(~live))
        hook.begin(playing)
        steps, played = [], np.zeros(live.shape, np.int32)
        for t in range(self.num_steps):
            step_key = keys[:, t] if self.batched else keys[t]
            actions, acted = self._act(step_key, playing)
            actions = hook.fill(t, step_key, playing, actions, live)
            after, (rewards, dones, infos) = self._advance(step_key, playing, actions, acted)
            steps.append(jax.device_get((actions, rewards, dones, infos)))
            played += live
            hook.observe(t, playing, steps[-1], after, live)
            playing = after
            live = live & ~np.asarray(steps[-1][2]["__all__"])
            if not live.any():
                break
        rollout = padded_rollout(steps, playing.state, self.env.max_steps, played)
        metrics = jax.tree.map(np.asarray, self._metrics(rollout))
        return Played(rollout, metrics, played, playing.state)


def padded_rollout(steps: list[tuple], final_state, length: int, played: np.ndarray) -> Rollout:
    """Stacks host steps (actions, rewards, dones, infos) along time (after the env axis of a
    batch), padded to ``length`` with copies of the last; ``valid`` from ``played``."""
    axis = np.ndim(played)
    stacked = jax.tree.map(lambda *xs: np.stack(xs, axis=axis), *steps)
    repeat = length - len(steps)
    pad = lambda x: np.concatenate([x, np.repeat(np.take(x, [-1], axis), repeat, axis)], axis)
    actions, rewards, dones, infos = jax.tree.map(pad, stacked)
    valid = jnp.asarray(np.arange(length) < np.asarray(played)[..., None])
    return Rollout(actions, rewards, dones, infos, valid, final_state)
