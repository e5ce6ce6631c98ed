"""PettingZoo's own API and seed tests on every registered env, plus the wrapper's guarantees."""

import types

import numpy as np
import pytest
from pettingzoo import AECEnv
from pettingzoo.test import (
    api_test,
    max_cycles_test,
    parallel_api_test,
    parallel_seed_test,
    render_test,
    seed_test,
    state_test,
)
from pettingzoo.utils.wrappers import OrderEnforcingWrapper, TerminateIllegalWrapper

import dilemmax
from dilemmax.wrappers.pettingzoo import aec_env, parallel_env

ENV_IDS = dilemmax.registered_envs()


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_parallel_api(env_id):
    parallel_api_test(parallel_env(env_id), num_cycles=60)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_aec_api(env_id):
    api_test(aec_env(env_id), num_cycles=60)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_parallel_seed(env_id):
    parallel_seed_test(lambda: parallel_env(env_id), num_cycles=60)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_aec_seed(env_id):
    seed_test(lambda: aec_env(env_id), num_cycles=60)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_types_spaces_and_masks(env_id):
    env = parallel_env(env_id)
    obs, infos = env.reset(seed=3)
    for agent in env.agents:
        space = env.observation_space(agent)
        assert space is env.observation_space(agent)  # the same object on every call
        assert env.action_space(agent) is env.action_space(agent)
        assert obs[agent].dtype == space.dtype and space.contains(obs[agent])
        mask = infos[agent]["action_mask"]
        assert mask.dtype == np.int8 and mask.shape == (env.action_space(agent).n,)
        assert mask.any()
    actions = {a: env.action_space(a).sample() for a in env.agents}
    _, rewards, terms, truncs, infos = env.step(actions)
    assert all(type(r) is float for r in rewards.values())
    assert all(type(t) is bool for t in terms.values())
    assert all(type(t) is bool for t in truncs.values())


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_illegal_action_raises_and_leaves_episode_as_it_was(env_id):
    env = parallel_env(env_id)
    env.reset(seed=0)
    agent = env.agents[0]
    before = env.jax_state
    n = env.action_space(agent).n
    with pytest.raises(ValueError, match=rf"{agent}.*legal actions"):
        env.step({a: (n if a == agent else env.action_space(a).sample()) for a in env.agents})
    assert env.jax_state is before
    aec = aec_env(env_id)
    aec.reset(seed=0)
    with pytest.raises(ValueError, match="legal actions"):
        aec.step(-1)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_ansi_render(env_id):
    env = parallel_env(env_id, render_mode="ansi")
    env.reset(seed=1)
    text = env.render()
    assert isinstance(text, str) and text


def test_masked_illegal_action_names_the_legal_set():
    env = parallel_env("toy")
    env.reset(seed=0)
    budget = int(env.jax_state.remaining[0])
    with pytest.raises(ValueError) as err:
        env.step({"agent_0": budget + 1, "agent_1": 0})
    assert str(list(range(budget + 1))) in str(err.value)
    assert "agent_0" in str(err.value)


def test_done_agents_are_removed():
    env = parallel_env("toy", horizon=4)
    env.reset(seed=0)
    first = env.agents[0]
    budget = int(env.jax_state.remaining[0])
    _, _, terms, _, _ = env.step({a: (budget if a == first else 0) for a in env.agents})
    assert terms[first] and first not in env.agents
    assert env.agents  # the other agent still plays


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_rgb_render_where_supported(env_id):
    if "rgb_array" not in dilemmax.make(env_id).render_modes:
        with pytest.raises(ValueError, match="render_mode"):
            parallel_env(env_id, render_mode="rgb_array")
        return
    env = parallel_env(env_id, render_mode="rgb_array")
    env.reset(seed=1)
    frame = env.render()
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3


# ---------------------------------------------------------------- PettingZoo's other test utilities
def _module(env_id, **options):
    """The module-like object PettingZoo's ``max_cycles_test`` takes."""
    return types.SimpleNamespace(
        parallel_env=lambda **kw: parallel_env(env_id, **options, **kw),
        env=lambda **kw: aec_env(env_id, **options, **kw),
    )


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ENV_IDS)
def test_pettingzoo_test_utilities(env_id, capsys):
    """render_test (every mode, "human" included), state_test, and api_test with the mask in the
    observation, on every env."""
    render_test(lambda render_mode=None: aec_env(env_id, render_mode=render_mode))
    assert capsys.readouterr().out  # "human" printed the text view
    state_test(aec_env(env_id), parallel_env(env_id), num_cycles=3)
    api_test(aec_env(env_id, mask_in_obs=True), num_cycles=10)
    parallel_api_test(parallel_env(env_id, mask_in_obs=True), num_cycles=10)


@pytest.mark.parametrize("env_id", ["open_cleanup", "open_harvest"])
def test_max_cycles_test(env_id):
    """PettingZoo's max_cycles_test hard-codes 4 cycles: games whose whole episode can be shorter
    (moral_hazard: 3 steps, consequence: at most 5) are covered by the next test instead."""
    max_cycles_test(_module(env_id))


@pytest.mark.parametrize("env_id", ["moral_hazard", "consequence"])
def test_max_cycles_truncates_short_games(env_id):
    env = parallel_env(env_id, max_cycles=1)
    env.reset(seed=0)
    _, _, terms, truncs, _ = env.step({a: env.action_space(a).sample() for a in env.agents})
    # Every agent is done one way or the other, never both; truncation marks the agents that the
    # game itself did not end (random moves can end a consequence episode in its first round).
    assert all(truncs[a] != terms[a] for a in truncs)
    assert any(truncs.values()) or all(terms.values())
    assert not env.agents
    with pytest.raises(ValueError, match="episode is over"):
        env.step({})


def test_mask_in_obs_matches_info_mask():
    env = parallel_env("toy", mask_in_obs=True)
    obs, infos = env.reset(seed=0)
    for agent, o in obs.items():
        assert set(o) == {"observation", "action_mask"}
        np.testing.assert_array_equal(o["action_mask"], infos[agent]["action_mask"])
        assert env.observation_space(agent).contains(o)


# ---------------------------------------------------------------- illegal actions and bad calls
BAD_ACTIONS = [
    float("inf"),
    float("nan"),
    1.0,
    2.5,
    "1",
    None,
    10**5000,
    -(2**40),
    np.float32(1),
    [0],
]


@pytest.mark.parametrize("bad", BAD_ACTIONS, ids=lambda v: type(v).__name__)
def test_bad_actions_raise_value_error_and_episode_stays_usable(bad):
    for env in (parallel_env("toy"), aec_env("toy")):
        env.reset(seed=0)
        agent = env.agents[0]
        before = env.jax_state
        with pytest.raises(ValueError, match=rf"illegal action .*{agent}.*legal actions"):
            if isinstance(env, AECEnv):
                env.step(bad)
            else:
                env.step({a: bad if a == agent else 0 for a in env.agents})
        assert env.jax_state is before
        # the episode goes on
        if isinstance(env, AECEnv):
            env.step(0)
            env.step(0)
        else:
            env.step(dict.fromkeys(env.agents, 0))
        assert int(env.jax_state.t) == 1


def test_step_before_reset_and_after_the_end():
    for env in (parallel_env("toy", horizon=1), aec_env("toy", horizon=1)):
        is_aec = isinstance(env, AECEnv)
        with pytest.raises(ValueError, match="reset"):
            env.step(0 if is_aec else {"agent_0": 0, "agent_1": 0})
        env.reset(seed=0)
        if is_aec:
            env.step(0)
            env.step(0)
            while env.agents:
                env.step(None)
        else:
            env.step({"agent_0": 0, "agent_1": 0})
        with pytest.raises(ValueError, match="episode is over"):
            env.step(0 if is_aec else {})
        env.reset(seed=1)  # and the env is usable again
        assert env.agents == ["agent_0", "agent_1"]


def test_aec_action_for_a_dead_agent():
    env = aec_env("toy", horizon=4)
    env.reset(seed=0)
    budget = int(env.jax_state.remaining[0])
    env.step(budget)  # agent_0 spends everything: done after this cycle
    env.step(0)
    assert env.agent_selection == "agent_0" and env.terminations["agent_0"]
    with pytest.raises(ValueError, match="agent_0.*is done"):
        env.step(0)
    env.step(None)  # removes it; the episode goes on for agent_1
    assert env.agents == ["agent_1"] and env.agent_selection == "agent_1"
    env.step(0)


def test_illegal_action_noop_hands_the_move_to_the_jax_env():
    env = parallel_env("toy", illegal_action="noop")
    env.reset(seed=0)
    budget = int(env.jax_state.remaining[0])
    for bad in (budget + 1, float("nan"), 10**30):
        _, rewards, _, _, infos = env.step({"agent_0": bad, "agent_1": 0})
        # the toy env's documented no-op for an illegal move: spend nothing
        assert rewards["agent_0"] == 0.0 and infos["agent_0"]["illegal_action"]
        assert "illegal_action" not in infos["agent_1"]
    assert int(env.jax_state.remaining[0]) == budget
    assert int(env.jax_state.t) == 3


@pytest.mark.parametrize("view", ["parallel", "aec"])
def test_illegal_action_terminate_penalises_the_offender(view):
    if view == "parallel":
        env = parallel_env("toy", illegal_action="terminate", illegal_reward=-5)
        env.reset(seed=0)
        _, rewards, terms, truncs, infos = env.step({"agent_0": 99, "agent_1": 0})
        assert rewards == {"agent_0": -5.0, "agent_1": 0.0}
        assert all(terms.values()) and not any(truncs.values()) and not env.agents
        assert infos["agent_0"]["illegal_action"]
        return
    env = aec_env("toy", illegal_action="terminate", illegal_reward=-5)
    env.reset(seed=0)
    env.step(0)
    env.step(99)  # agent_1 offends
    assert all(env.terminations.values())
    assert env._cumulative_rewards == {"agent_0": 0.0, "agent_1": -5.0}
    while env.agents:
        env.step(None)


def test_pettingzoo_aec_wrappers():
    env = TerminateIllegalWrapper(aec_env("toy"), illegal_reward=-1)
    seed = 0
    env.reset(seed=seed)
    while env.unwrapped.action_mask("agent_0").all():  # find a start where 3 is illegal
        seed += 1
        env.reset(seed=seed)
    env.step(3)  # agent_0 offends (the wrapper itself indexes the mask: in range only)
    assert all(env.terminations.values())
    assert env.rewards["agent_0"] == -1
    while env.agents:
        env.step(None)
    api_test(OrderEnforcingWrapper(aec_env("toy")), num_cycles=5)
    env = OrderEnforcingWrapper(aec_env("toy"))
    with pytest.raises(Exception, match="reset"):
        env.step(0)


def test_wrapper_option_validation():
    with pytest.raises(ValueError, match="illegal_action"):
        parallel_env("toy", illegal_action="ignore")
    with pytest.raises(ValueError, match="max_cycles"):
        parallel_env("toy", max_cycles=0)
