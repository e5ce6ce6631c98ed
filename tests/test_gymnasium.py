"""One seat as a Gymnasium env, checked with Gymnasium's own env checker on every env."""

import numpy as np
import pytest
from gymnasium.utils import env_checker as checks

import dilemmax
from dilemmax.agents.policy import first_legal_policy, random_policy
from dilemmax.wrappers.gymnasium import SingleSeatEnv


def _step_determinism_with_legal_actions(env, seed=123):
    """Gymnasium's step-determinism check, drawing the action after the reset.

    ``check_env`` draws its action before resetting, from whatever state the previous checks left;
    in a game whose legal set changes between stages that action is illegal at the start, which
    this wrapper rejects by design.
    """
    env.reset(seed=seed)
    env.action_space.seed(seed)
    action = env.action_space.sample()
    first = env.step(action)
    env.reset(seed=seed)
    second = env.step(action)
    for a, b in zip(first, second, strict=True):
        assert checks.data_equivalence(a, b)


@pytest.mark.parametrize("env_id", dilemmax.registered_envs())
def test_gymnasium_checker(env_id):
    """Every check of ``gymnasium``'s ``check_env``, step determinism adapted to legal actions."""
    env = SingleSeatEnv(env_id, others=random_policy)
    checks.check_action_space(env.action_space)
    checks.check_observation_space(env.observation_space)
    checks.check_reset_return_type(env)
    checks.check_reset_seed_determinism(env)
    checks.check_reset_options(env)
    checks.env_reset_passive_checker(env)
    checks.env_step_passive_checker(env, env.action_space.sample())
    _step_determinism_with_legal_actions(env)
    checks.check_returned_data_not_reused(env)
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
