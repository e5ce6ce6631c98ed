"""The trainer's defaults the two OpenSocialJax games share (``training_defaults`` of
:class:`~dilemmax.envs.open_cleanup.env.OpenCleanupEnv` and
:class:`~dilemmax.envs.open_harvest.env.OpenHarvestEnv`).

They share map scale and horizon, so one run size serves both. Their default network embeds
every cell's codes and reads the flattened 11x11 view with an MLP: on a CPU it trains over 20x
faster than the 2-layer CNN (benchmarks/results/learning_conv_cpu.md) and it is what produced
the learning evidence. On an accelerator the CNN is cheap:
``--set conv_features=[16,32] --set embed_dim=8 --set hidden=128``.
"""

from __future__ import annotations

from typing import Any

# Both games keep held-out layouts and rules; an evaluation plays them unless told otherwise.
EVALUATION_OPTIONS: dict[str, Any] = {"split": "held_out"}

TRAINING_DEFAULTS: dict[str, Any] = {
    "total_timesteps": 4_000_000,
    "num_envs": 16,
    "num_steps": 128,
    "lr": 5e-4,
    "ent_coef": 0.01,
    "gamma": 0.99,
    "conv_features": [],
    "embed_dim": 4,
    "hidden": 64,
    "eval_episodes": 2,
    "log_every": 5,
}
