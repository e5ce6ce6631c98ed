"""The arena: JAX path == Python path, transcripts, mixed jittable and Python policies."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image
from toy_env import ToyConfig, ToyEnv

from dilemmax.agents.arena import Arena, save_gif
from dilemmax.agents.policy import first_legal_policy, random_policy


@pytest.mark.slow
def test_python_path_plays_the_same_episodes_as_the_jax_path(tmp_path):
    env = ToyEnv(num_agents=3, horizon=4)
    arena = Arena(env, random_policy)
    fast = arena.run(jax.random.key(7), num_episodes=5)
    slow = arena.run(jax.random.key(7), num_episodes=5, record=tmp_path / "run.jsonl")
    for name in fast.metrics:
        np.testing.assert_array_equal(fast.metrics[name], slow.metrics[name])
    assert fast.metrics["return"].shape == (5, 3)
    rows = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert {r["episode"] for r in rows} == set(range(5))
    episode_rows = [r for r in rows if "metrics" in r]
    assert len(episode_rows) == 5
    # the transcript's rewards add up to the reported returns
    for e in range(5):
        total = sum(r["rewards"]["agent_1"] for r in rows if r["episode"] == e and "t" in r)
        assert total == episode_rows[e]["metrics"]["return"][1]


def test_configs_batch_and_mixed_policies():
    env = ToyEnv(num_agents=2, horizon=3)
    seen_text = []

    class Greedy:
        """A Python (non-jittable) policy that spends everything it may, reading its mask."""

        jittable = False

        def __call__(self, key, observation):
            seen_text.append(observation.agent_index)
            return int(np.flatnonzero(np.asarray(observation.mask))[-1])

    configs = ToyConfig(jnp.array([[1, 3], [2, 2]]))
    result = Arena(env, [Greedy(), first_legal_policy]).run(
        jax.random.key(0), num_episodes=2, configs=configs
    )
    # greedy agent_0 spends its whole budget in step one; first_legal agent_1 spends nothing
    np.testing.assert_array_equal(result.metrics["return"][:, 0], [1, 1, 2, 2])
    np.testing.assert_array_equal(result.metrics["return"][:, 1], [0, 0, 0, 0])
    assert len(seen_text) > 0


def test_save_gif_enlarges_and_keeps_every_frame(tmp_path):
    frames = [np.zeros((4, 5, 3), np.uint8), np.full((4, 5, 3), 200, np.uint8)]
    image = Image.open(save_gif(frames, tmp_path / "ep.gif", scale=3))
    assert image.size == (15, 12) and image.n_frames == 2
