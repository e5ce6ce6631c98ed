"""Stable-Baselines3 PPO through SuperSuit on every env, with no user-written wrapper.

SB3 samples actions without the mask, so the PettingZoo view is built with
``illegal_action="noop"`` (the JAX env's own no-op for an illegal move), and SuperSuit's vector
env needs a fixed set of agents, so ``keep_done_agents=True`` keeps eliminated consequence
players in their seat until the episode ends. (SuperSuit's own ``black_death_v3`` ends an episode
only when every agent is both terminated and truncated, so it never ends a game that terminates.)
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from dilemmax.wrappers.pettingzoo import parallel_env

# SuperSuit, Stable-Baselines3 and torch are imported by the tests that run, not when the suite
# is collected (tests/test_collection_imports.py).
pytestmark = [
    pytest.mark.integration,  # CI may deselect: -m 'not integration'
    pytest.mark.skipif(
        not all(importlib.util.find_spec(n) for n in ("supersuit", "stable_baselines3", "torch")),
        reason="needs the integration extra (supersuit, stable_baselines3, torch)",
    ),
]

ENV_IDS = ["consequence", "moral_hazard", "open_cleanup", "open_harvest"]


def make_sb3_vec_env(env_id: str):
    """The snippet of the README's "use it from your RL code" section."""
    import supersuit as ss

    env = parallel_env(env_id, illegal_action="noop", keep_done_agents=True)
    env = ss.pettingzoo_env_to_vec_env_v1(env)
    return ss.concat_vec_envs_v1(env, 1, num_cpus=0, base_class="stable_baselines3")


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_ppo_collects_and_trains(env_id):
    import stable_baselines3 as sb3
    import torch

    torch.manual_seed(0)  # (PPO's seed= calls a seed() SuperSuit's vector env lacks)
    vec_env = make_sb3_vec_env(env_id)
    # Two rollouts or more, each with its update (one env per seat: 32 x 2 to 5 steps each);
    # the short games end many episodes in them, a grid game none (as at the earlier 2,048).
    model = sb3.PPO("MlpPolicy", vec_env, n_steps=32, batch_size=32, n_epochs=1)
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(total_timesteps=256)
    assert model.num_timesteps >= 256
    after = list(model.policy.parameters())
    assert any(
        not np.allclose(b.numpy(), a.detach().numpy()) for b, a in zip(before, after, strict=True)
    )
    vec_env.close()
