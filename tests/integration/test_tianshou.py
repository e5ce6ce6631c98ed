"""Tianshou's multi-agent DQN collects and trains on every env, with no user-written wrapper.

Tianshou reads the legal actions only from ``obs["action_mask"]``, hence ``mask_in_obs=True``;
its ``PettingZooEnv`` takes the AEC view as it is.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from dilemmax.wrappers.pettingzoo import aec_env

# Tianshou and torch are imported by the tests that run, not when the suite is collected
# (tests/test_collection_imports.py).
pytestmark = [
    pytest.mark.integration,  # CI may deselect: -m 'not integration'
    pytest.mark.skipif(
        not all(importlib.util.find_spec(name) for name in ("tianshou", "torch")),
        reason="needs the integration extra (tianshou, torch)",
    ),
]

ENV_IDS = ["consequence", "moral_hazard", "open_cleanup", "open_harvest"]


def make_tianshou_env(env_id: str):
    """The snippet of the README's "use it from your RL code" section."""
    from tianshou.env.pettingzoo_env import PettingZooEnv

    return PettingZooEnv(aec_env(env_id, mask_in_obs=True))


def dqn_learners(env):
    """One small DQN per seat (``env`` a Tianshou ``PettingZooEnv``)."""
    from tianshou.algorithm import DQN, MultiAgentOffPolicyAlgorithm
    from tianshou.algorithm.modelfree.dqn import DiscreteQLearningPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.utils.net.common import Net

    obs_shape = env.observation_space["observation"].shape
    algorithms = []
    for _ in env.agents:
        net = Net(state_shape=obs_shape, action_shape=env.action_space.n, hidden_sizes=[32])
        policy = DiscreteQLearningPolicy(
            model=net, action_space=env.action_space, eps_training=0.2, eps_inference=0.0
        )
        algorithms.append(
            DQN(policy=policy, optim=AdamOptimizerFactory(lr=1e-3), target_update_freq=50)
        )
    return MultiAgentOffPolicyAlgorithm(algorithms=algorithms, env=env)


@pytest.fixture(scope="module")
def tianshou_interpreted():
    """Tianshou imported with numba's JIT off: its replay-buffer index and n-step return helpers
    (``@njit``, no disk cache) run as the plain Python they are written in, instead of being
    compiled by numba afresh in every process (about half of this file's time at these sizes).
    The flag is read when ``@njit`` decorates, so it is set around the import only; where a
    test earlier in the process imported Tianshou, its compiled helpers are used as they are."""
    import numba

    before = numba.config.DISABLE_JIT
    numba.config.DISABLE_JIT = True
    try:
        import tianshou.algorithm  # noqa: F401
        import tianshou.data  # noqa: F401
        import tianshou.data.utils.segtree  # noqa: F401
    finally:
        numba.config.DISABLE_JIT = before


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_multi_agent_dqn_collects_and_trains(env_id, tmp_path, tianshou_interpreted):
    import torch
    from tianshou.data import Collector, CollectStats, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv
    from tianshou.trainer import OffPolicyTrainerParams

    torch.manual_seed(0)
    envs = DummyVectorEnv([lambda: make_tianshou_env(env_id)] * 2)
    envs.seed(0)
    algorithm = dqn_learners(make_tianshou_env(env_id))
    collector = Collector[CollectStats](
        algorithm, envs, VectorReplayBuffer(2000, len(envs)), exploration_noise=True
    )
    collector.reset()
    # Sizes that cross several episodes of the short games (moral_hazard: 6 AEC steps each)
    # and take a few gradient steps; a grid game's episode (2,000 steps x 5 seats) ends in none.
    collected = collector.collect(n_step=30)
    assert collected.n_collected_steps >= 30
    before = [p.detach().clone() for p in algorithm.parameters()]
    result = algorithm.run_training(
        OffPolicyTrainerParams(
            training_collector=collector,
            test_collector=None,
            max_epochs=1,
            epoch_num_steps=60,
            collection_step_num_env_steps=30,
            batch_size=16,
            update_step_num_gradient_steps_per_sample=0.1,
            test_in_training=False,
            show_progress=False,
            multi_agent_return_reduction=lambda rews: rews[:, 0],
        )
    )
    assert result.train_step >= 60 or collector.collect_step >= 60
    after = list(algorithm.parameters())
    assert any(
        not np.allclose(b.numpy(), a.detach().numpy()) for b, a in zip(before, after, strict=True)
    )
