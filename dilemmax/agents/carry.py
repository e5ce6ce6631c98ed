"""The RL^2 step input: what a recurrent policy sees of its previous step, defined once.

A recurrent (RL^2) actor reads, besides its observation, what it did and got on the previous
step and whether a trial just ended (:func:`~dilemmax.agents.networks.recurrent_extras`), and
zeroes its memory on the first step of an episode. The trainer (a carry of ``[L, E]`` learner
lanes) and :class:`~dilemmax.agents.trained.RecurrentPolicy` (one seat) both keep these inputs
with the functions below, so evaluation feeds a policy exactly what training fed it.

The inputs are a dict of arrays, batch shape ``B...`` (a lane of learners x envs, or ``()``):

- ``prev_action`` int32[B...], the previous action (-1 at an episode start: an all-zero one-hot);
- ``prev_reward`` float32[B...], the reward it earned, as trained on (:func:`reward_signal`);
- ``trial_done`` bool[E...], the previous step ended a trial (a suffix of B: shared by learners);
- ``start`` bool[E...], the next step starts an episode (the memory is zeroed before it).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dilemmax.agents.networks import recurrent_extras


def initial_inputs(lane: tuple[int, ...] = (), envs: tuple[int, ...] = ()) -> dict:
    """The inputs before an episode's first step (``lane``: the shape of the action batch,
    ``envs``: its env suffix)."""
    return {
        "prev_action": jnp.full(lane, -1, jnp.int32),
        "prev_reward": jnp.zeros(lane, jnp.float32),
        "trial_done": jnp.zeros(envs, bool),
        "start": jnp.ones(envs, bool),
    }


def step_inputs(inputs: dict, num_actions: int) -> tuple[jax.Array, jax.Array]:
    """(extras float32[B..., N + 2], start bool[B...]) of the next step."""
    lane = inputs["prev_action"].shape
    trial_done = jnp.broadcast_to(inputs["trial_done"], lane)
    extras = recurrent_extras(inputs["prev_action"], inputs["prev_reward"], trial_done, num_actions)
    return extras, jnp.broadcast_to(inputs["start"], lane)


def next_inputs(action, reward, trial_done, ended) -> dict:
    """The inputs after a step that took ``action`` [B...] and earned ``reward`` [B...];
    ``trial_done`` and ``ended`` (the episode ended: the next step starts a fresh one, from
    blank inputs) have the env suffix of B."""
    return {
        "prev_action": jnp.where(ended, -1, jnp.asarray(action, jnp.int32)),
        "prev_reward": jnp.where(ended, 0.0, jnp.asarray(reward, jnp.float32)),
        "trial_done": jnp.asarray(trial_done, bool) & ~ended,
        "start": jnp.asarray(ended, bool),
    }


def reward_signal(rewards: jax.Array, reward: str, scale: float) -> jax.Array:
    """The reward a policy trains on, for every seat: float32[A, B...] of the env's rewards ->
    the seat's own (``reward="individual"``) or the team mean (``"team"``), times ``scale``."""
    rewards = jnp.asarray(rewards, jnp.float32)
    if reward == "team":
        rewards = jnp.broadcast_to(rewards.mean(0), rewards.shape)
    return rewards * scale
