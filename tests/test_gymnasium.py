"""One seat as a Gymnasium env, checked with Gymnasium's own env checker on every env."""

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import dilemmax
from dilemmax.agents.policy import first_legal_policy, random_policy
from dilemmax.wrappers.gymnasium import SingleSeatEnv


@pytest.mark.parametrize("env_id", dilemmax.registered_envs())
def test_gymnasium_checker(env_id):
    env = SingleSeatEnv(env_id, others=random_policy)
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    action = int(np.flatnonzero(info["action_mask"])[0])
    obs, reward, terminated, truncated, info = env.step(action)
    assert type(reward) is float and type(terminated) is bool and truncated is False


def test_seat_and_illegal_action():
    env = SingleSeatEnv("toy", others={"agent_0": first_legal_policy}, agent="agent_1")
    env.reset(seed=1)
    budget = int(env.action_masks().sum()) - 1
    with pytest.raises(ValueError, match="agent_1.*legal actions"):
        env.step(budget + 1)
    _, reward, *_ = env.step(budget)
    assert reward == float(budget)
    with pytest.raises(ValueError, match="unknown agent"):
        SingleSeatEnv("toy", others=random_policy, agent="agent_7")
