"""One seat as a Gymnasium env, checked with Gymnasium's own env checker on every env."""

import gymnasium
import numpy as np
import pytest
from gymnasium.utils import env_checker as checks

import dilemmax
from dilemmax.agents.policy import first_legal_policy, random_policy
from dilemmax.wrappers.gymnasium import SingleSeatEnv, SingleSeatVectorEnv


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


@pytest.mark.slow
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


# ---------------------------------------------------------------- registered ids and vector env
def test_registered_ids_make_the_single_seat_view():
    for env_id in dilemmax.registered_envs():
        assert f"dilemmax/{env_id}-v0" in gymnasium.registry
    env = gymnasium.make("dilemmax/toy-v0", others="first_legal", horizon=2)
    assert isinstance(env.unwrapped, SingleSeatEnv) and env.unwrapped.agent == "agent_0"
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    _, reward, terminated, _, _ = env.step(int(np.flatnonzero(info["action_mask"])[-1]))
    assert reward == float(np.flatnonzero(info["action_mask"])[-1]) and terminated  # all spent


def test_others_by_name_and_unknown_name():
    env = SingleSeatEnv("moral_hazard", others="teacher")
    env.reset(seed=0)
    with pytest.raises(ValueError, match="unknown policy 'nobody'"):
        SingleSeatEnv("toy", others="nobody")


@pytest.fixture(scope="module")
def vec_toy():
    return gymnasium.make_vec(
        "dilemmax/toy-v0",
        num_envs=3,
        vectorization_mode="vector_entry_point",
        others="first_legal",
        horizon=2,
    )


def test_vector_env_steps_the_batch_and_autoresets_on_the_same_step(vec_toy):
    assert isinstance(vec_toy, SingleSeatVectorEnv)
    obs, info = vec_toy.reset(seed=0)
    assert obs.shape == (3, 2) and info["action_mask"].shape == (3, 4)
    budgets = obs[:, 0].copy()
    # spend 0 then 0: every copy reaches the horizon (2 steps) together
    obs, reward, terminated, truncated, info = vec_toy.step(np.zeros(3, np.int64))
    np.testing.assert_array_equal(obs[:, 1], [1, 1, 1])
    assert not terminated.any() and "final_obs" not in info
    obs, reward, terminated, truncated, info = vec_toy.step(budgets)  # spend everything
    np.testing.assert_array_equal(reward, budgets)
    assert terminated.all() and not truncated.any()
    np.testing.assert_array_equal(info["final_obs"][:, 0], [0, 0, 0])  # budgets spent...
    np.testing.assert_array_equal(obs[:, 1], [0, 0, 0])  # ...and a new episode started
    assert info["_final_obs"].all()


@pytest.mark.slow
def test_vector_env_matches_the_single_env_step():
    single = SingleSeatEnv("toy", others="first_legal", horizon=3)
    vec = SingleSeatVectorEnv("toy", num_envs=2, others="first_legal", horizon=3)
    single.reset(seed=0)
    vec.reset(seed=0)
    # same budgets: the seat's first step gives the same reward whatever the key
    for env_obs in (single._obs, vec._obs):
        assert env_obs["agent_0"].shape[-1] == 2
    _, r_single, *_ = single.step(0)
    _, r_vec, *_ = vec.step(np.zeros(2, np.int64))
    assert r_single == 0.0 and (r_vec == 0.0).all()


@pytest.mark.slow
def test_vector_env_illegal_actions():
    vec = SingleSeatVectorEnv("toy", num_envs=2, others="first_legal", horizon=3)
    vec.reset(seed=0)
    with pytest.raises(ValueError, match=r"agent_0 \(env 1\).*legal actions"):
        vec.step(np.array([0, 99]))
    vec = SingleSeatVectorEnv(
        "toy",
        num_envs=2,
        others="first_legal",
        horizon=3,
        illegal_action="terminate",
        illegal_reward=-3.0,
    )
    vec.reset(seed=0)
    _, reward, terminated, _, info = vec.step(np.array([0, 99]))
    np.testing.assert_array_equal(reward, [0.0, -3.0])
    np.testing.assert_array_equal(terminated, [False, True])
    np.testing.assert_array_equal(info["illegal_action"], [False, True])


@pytest.mark.parametrize("mode", ["noop", "terminate"])
def test_single_seat_illegal_action_modes(mode):
    env = SingleSeatEnv("toy", others="first_legal", illegal_action=mode, illegal_reward=-2.0)
    env.reset(seed=0)
    for bad in (99, float("nan"), 1.5):
        if env._over:
            env.reset()
        _, reward, terminated, _, info = env.step(bad)
        assert info["illegal_action"]
        if mode == "noop":
            assert reward == 0.0  # the toy env's no-op: spend nothing
        else:
            assert reward == -2.0 and terminated
            with pytest.raises(ValueError, match="episode is over"):
                env.step(0)


def test_single_seat_bad_calls():
    env = SingleSeatEnv("toy", others="first_legal")
    with pytest.raises(ValueError, match="reset"):
        env.step(0)
    env.reset(seed=0)
    for bad in (float("inf"), float("nan"), "0", None, 10**5000):
        with pytest.raises(ValueError, match="legal actions"):
            env.step(bad)
    env.step(0)  # still usable
