"""Legal-action checks shared by the PettingZoo and Gymnasium wrappers."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np


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


def legal_set(mask: np.ndarray) -> list[int]:
    return [int(a) for a in np.flatnonzero(mask)]


def check_action(agent: str, action: Any, mask: np.ndarray) -> int:
    """The action as an int, or ValueError naming the agent, the action and the legal set."""
    legal = legal_set(mask)
    try:
        as_int = int(action)
        integral = float(action) == as_int
    except (TypeError, ValueError):
        integral = False
    if not integral or not 0 <= as_int < mask.shape[0] or not mask[as_int]:
        raise ValueError(f"illegal action {action!r} for agent {agent!r}; legal actions: {legal}")
    return as_int
