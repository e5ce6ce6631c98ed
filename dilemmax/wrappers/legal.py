"""Legal-action checks shared by the PettingZoo and Gymnasium wrappers.

An action from outside JAX is untrusted: it may be a float, NaN, infinite, a string, an array of
the wrong shape or an integer far outside int32. :func:`parse_action` reads it totally (it never
raises on its own) and :func:`check_action` turns a bad one into the documented ``ValueError``.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import gymnasium
import numpy as np

from dilemmax.envs.option_spec import INT32_MAX, shown

ILLEGAL_ACTION_MODES = ("raise", "noop", "terminate")

# The most envs a batch can have: jax.random.split, and array shapes, take int32 sizes.
MAX_NUM_ENVS = INT32_MAX


class LegalDiscrete(gymnasium.spaces.Discrete):
    """A Discrete space whose unmasked ``sample()`` draws among the currently legal actions."""

    def __init__(self, n: int, legal_mask_fn):
        super().__init__(n)
        self._legal_mask_fn = legal_mask_fn

    def sample(self, mask=None, probability=None):
        if mask is None and probability is None:
            legal = self._legal_mask_fn()
            if legal is not None:
                mask = legal
        return super().sample(mask=mask, probability=probability)


def check_mode(illegal_action: str) -> str:
    if illegal_action not in ILLEGAL_ACTION_MODES:
        raise ValueError(
            f"illegal_action={illegal_action!r} is not one of {', '.join(ILLEGAL_ACTION_MODES)}"
        )
    return illegal_action


def check_count(
    name: str, value: Any, allow_none: bool = False, high: int | None = None
) -> int | None:
    """``value`` as a positive int (a count: ``num_envs``, ``max_cycles``), at most ``high`` when
    given, else ValueError naming ``name``: a bool, a fractional or non-finite number or a string
    is refused, not truncated."""
    if value is None and allow_none:
        return None
    as_int = parse_action(value)
    if as_int is None and isinstance(value, numbers.Real) and not isinstance(value, bool):
        as_int = int(value) if math.isfinite(value) and float(value).is_integer() else None
    if as_int is None or as_int < 1 or (high is not None and as_int > high):
        what = "a positive integer" + (f" up to {high}" if high is not None else "")
        what += " or None" if allow_none else ""
        raise ValueError(f"{name} must be {what}, got {shown(value)}")
    return as_int


def check_reward(name: str, value: Any) -> float:
    """``value`` as a finite float, else ValueError naming ``name`` (a NaN reward would poison
    every return it is summed into)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a finite number, got {shown(value)}")
    as_float = float(value)
    if not math.isfinite(as_float):
        raise ValueError(f"{name} must be a finite number, got {shown(value)}")
    return as_float


def legal_set(mask: np.ndarray) -> list[int]:
    return [int(a) for a in np.flatnonzero(mask)]


def parse_action(action: Any) -> int | None:
    """The action as a Python int if it is an integer (Python, NumPy or a one-element integer
    array), else None. Floats are refused even when integral: a float action is a caller bug."""
    if isinstance(action, np.ndarray):
        if action.size != 1 or action.dtype.kind not in "iu":
            return None
        action = action.reshape(())[()]
    if isinstance(action, bool | np.bool_) or not isinstance(action, numbers.Integral):
        return None
    return int(action)


def is_legal(action: int | None, mask: np.ndarray) -> bool:
    return action is not None and 0 <= action < mask.shape[0] and bool(mask[action])


def check_action(agent: str, action: Any, mask: np.ndarray) -> int:
    """The action as an int, or ValueError naming the agent, the action and the legal set."""
    as_int = parse_action(action)
    if not is_legal(as_int, mask):
        raise ValueError(
            f"illegal action {shown(action)} for agent {agent!r}; legal actions: {legal_set(mask)}"
        )
    return as_int


def jax_action(action: int | None, num_actions: int) -> np.int32:
    """What the JAX env is given for a (possibly illegal) parsed action under ``"noop"``.

    An action in ``0 .. n - 1`` goes through as it is (a masked one is the env's to handle);
    anything else (negative, too large, not an integer) becomes ``n``: out of range in every
    game, so the env plays its documented no-op for it and flags it invalid.
    """
    if action is None or not 0 <= action < num_actions:
        return np.int32(num_actions)
    return np.int32(action)
