"""Learner transforms: policy transformers that script some of a learner's decisions.

A training config may name one (``learner_transform``): the learner then plays the transformed
policy, and so must every seat that later loads the run (:class:`~dilemmax.agents.trained.
TrainedPolicy` applies it), or the untrained heads of the scripted decisions would play instead.
A config.json is data, possibly received from elsewhere, so only the names in
:data:`LEARNER_TRANSFORMS` resolve; code (a test, a user script) adds its own with
:func:`register_learner_transform`.
"""

from __future__ import annotations

import importlib
from typing import Any

from dilemmax.envs.option_spec import OptionError, shown

# name -> transform (None until first use: the package's own are imported from their path).
LEARNER_TRANSFORMS: dict[str, Any] = {
    "dilemmax.envs.moral_hazard.policies:with_scripted_followup": None,
}


def register_learner_transform(name: str, transform: Any) -> None:
    """Allows ``learner_transform=name`` in this process, resolving to ``transform``."""
    LEARNER_TRANSFORMS[name] = transform


def resolve_learner_transform(name: str | None):
    """The policy transformer allowed under ``name`` (None for None); the package's own are
    imported on first use, from their fixed path in :data:`LEARNER_TRANSFORMS`."""
    if not name:
        return None
    if name not in LEARNER_TRANSFORMS:
        raise OptionError(
            f"learner_transform {shown(name)} is not one of the allowed transforms: "
            f"{', '.join(sorted(LEARNER_TRANSFORMS))}"
        )
    transform = LEARNER_TRANSFORMS[name]
    if transform is None:
        module_name, _, attr = name.partition(":")
        transform = getattr(importlib.import_module(module_name), attr)
        LEARNER_TRANSFORMS[name] = transform
    return transform
