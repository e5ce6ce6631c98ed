"""Scenario envs: the focal-only env is the full game with the background seated."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.agents import zoo
from dilemmax.envs.policies import policies_for, random_policy
from dilemmax.envs.rollout import (
    Playing,
    act_seats,
    advance,
    episode_keys,
    initial_carries,
    observations_for,
    run_episode,
    run_episodes,
    seat_keys,
    step_keys,
    step_parts,
)
from dilemmax.scenarios.env import ScenarioConfig, ScenarioEnv, game_reset_keys
from dilemmax.scenarios.registry import SCENARIOS, SETS, scenario_set
from dilemmax.scenarios.spec import Scenario, ScenarioSet


def _full_game_episode(scenario_env: ScenarioEnv, scenario: int, focal_policy, key, num_steps):
    """The reference: the full game stepped by the episode driver's own step functions, the
    background seated and the focal seats played by ``focal_policy`` on their scenario keys."""
    game = scenario_env.game
    seats = list(scenario_env.backgrounds[scenario])
    key_config, key_reset, key_run = episode_keys(key)
    game_config_key, game_reset_key = game_reset_keys(key_reset)
    obs, state = game.reset_to(game_reset_key, game.sample_config(game_config_key))
    playing = Playing(obs, state, jnp.bool_(False), initial_carries(seats))
    returns = np.zeros(game.num_agents)
    actions_seen = []
    # Jitted once per episode (the background seats are this scenario's), run at every step.
    act = jax.jit(lambda k, p: act_seats(game, seats, k, p))
    step = jax.jit(lambda k, p, a, c: advance(game, seats, k, p, a, c))
    for step_key in step_keys(key_run, num_steps):
        # The scenario env's run_episode gives step_env the second half of each step key; the
        # full game's step key is that half.
        key_act_focal, game_step_key = step_parts(step_key)
        focal_keys = seat_keys(key_act_focal, scenario_env.num_agents)
        masks = game.action_mask(playing.state)
        actions, acted = act(game_step_key, playing)
        for j, seat in enumerate(scenario_env.focal):
            agent = game.agents[seat]
            view = dataclasses.replace(_view(game, playing, seat), mask=masks[agent])
            actions[agent] = jnp.int32(focal_policy(focal_keys[j], view))
        was_finished = bool(playing.finished)
        playing, (rewards, _, _) = step(game_step_key, playing, actions, acted)
        if not was_finished:
            returns += np.array([float(rewards[a]) for a in game.agents])
            actions_seen.append([int(actions[a]) for a in game.agents])
    return returns, actions_seen


def _view(game, playing, seat):
    return observations_for(game, playing.obs, playing.state)[game.agents[seat]]


@pytest.mark.slow
def test_focal_only_env_is_the_full_game_with_the_background_seated(built):
    env = built("consequence/test")
    key = jax.random.key(7)
    # One program for every scenario: the scenario is data (the config), as in a vmapped set.
    episode = jax.jit(lambda k, c: run_episode(env, random_policy, k, c))
    for scenario in range(env.num_scenarios):
        config = ScenarioConfig(jnp.int32(scenario))
        rollout = episode(key, config)
        want_returns, want_actions = _full_game_episode(
            env, scenario, random_policy, key, env.max_steps
        )
        valid = np.asarray(rollout.valid)
        got = np.array([float(np.sum(np.asarray(rollout.rewards[a])[valid])) for a in env.agents])
        focal_want = want_returns[list(env.focal)]
        np.testing.assert_allclose(got, focal_want, rtol=0, atol=1e-6)
        background = np.asarray(rollout.infos["background_rewards"])[valid].sum(axis=0)
        others = [i for i in range(env.game.num_agents) if i not in env.focal]
        np.testing.assert_allclose(background, want_returns[others], rtol=0, atol=1e-6)
        got_actions = [
            [int(np.asarray(rollout.actions[a])[t]) for a in env.agents]
            for t in range(int(valid.sum()))
        ]
        assert got_actions == [[row[i] for i in env.focal] for row in want_actions]


@pytest.mark.slow
def test_every_scenario_of_a_set_runs_in_one_vmapped_program_as_it_does_alone(built):
    env = built("consequence/train")
    key = jax.random.key(3)
    _, together = run_episodes(env, random_policy, key, 4, env.scenario_configs())
    for s in range(env.num_scenarios):
        alone = ScenarioEnv(env.game, env.focal, [env.backgrounds[s]], [env.names[s]])
        keys = jax.random.split(jax.random.split(key, env.num_scenarios)[s], 4)
        per = jax.vmap(lambda k, e=alone: _metrics(e, k))(keys)
        np.testing.assert_array_equal(
            np.asarray(together["per_capita"][s]), np.asarray(per["per_capita"])
        )


def _metrics(env, key):
    return env.episode_metrics(run_episode(env, random_policy, key, ScenarioConfig(jnp.int32(0))))


@pytest.mark.slow
def test_jit_equals_no_jit(built):
    """The focal-only step (background acting inside) gives the same transition jitted or not."""
    env = built("moral_hazard/train")

    def episode(step, reset):
        obs, state = reset(jax.random.key(5), ScenarioConfig(jnp.int32(1)))
        out = []
        for t in range(env.max_steps):
            action = {"agent_0": jnp.argmax(env.action_mask(state)["agent_0"]).astype(jnp.int32)}
            obs, state, rewards, dones, _ = step(jax.random.key(t), state, action)
            out.append(
                (np.asarray(obs["agent_0"]), float(rewards["agent_0"]), bool(dones["__all__"]))
            )
        return out

    jitted = episode(jax.jit(env.step_env), jax.jit(env.reset_to))
    with jax.disable_jit():
        plain = episode(env.step_env, env.reset_to)
    for (o1, r1, d1), (o2, r2, d2) in zip(jitted, plain, strict=True):
        np.testing.assert_array_equal(o1, o2)
        assert (r1, d1) == pytest.approx((r2, d2))
    assert env.agents == ["agent_0"] and env.num_agents == 1


@pytest.mark.slow
def test_step_through_the_base_class_auto_resets_and_keeps_focal_keys(built):
    env = built("consequence/test")
    obs, state = env.reset(jax.random.key(0))
    assert set(obs) == {"agent_0"}
    step = jax.jit(env.step)
    for t in range(12):  # 5-round episodes: at least one auto-reset
        obs, state, rewards, dones, infos = step(
            jax.random.key(t), state, {"agent_0": jnp.int32(1)}
        )
        assert set(rewards) == {"agent_0"} and "__all__" in dones
    with pytest.raises(ValueError, match="agent_1"):
        env.step(jax.random.key(0), state, {"agent_0": 0, "agent_1": 0})


@pytest.mark.slow
def test_background_sees_the_game_not_the_wrapper(built):
    seen = []

    def spy(key, observation):
        seen.append(type(observation.state).__name__)
        return jnp.int32(0)

    game = built("moral_hazard/test").game
    env = ScenarioEnv(game, (0,), [[None, spy]])
    # What the background is handed is fixed when the episode is traced: nothing to compile.
    jax.make_jaxpr(lambda k: run_episode(env, random_policy, k, ScenarioConfig(jnp.int32(0))))(
        jax.random.key(0)
    )
    assert seen and all(name != "ScenarioState" for name in seen)


def test_hashes_change_with_every_part_of_a_scenario():
    base = SCENARIOS["consequence/rp_exploiters"]
    digests = {base.digest()}
    for change in (
        {"options": {"rules": ("RP",)}},
        {
            "focal": (1,),
            "background": {0: "scripted:starve_then_cover", 2: "scripted:starve_then_cover"},
        },
        {"background": {1: "scripted:all_zero", 2: "scripted:starve_then_cover"}},
        {"game": "moral_hazard"},
    ):
        digests.add(dataclasses.replace(base, **change).digest())
    assert len(digests) == 5
    assert dataclasses.replace(base, description="reworded").digest() == base.digest()


def test_a_changed_checkpoint_changes_the_hash(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    scenario = Scenario(
        "x/y", "consequence", {}, (0,), {1: f"trained:{run}", 2: "scripted:random"}, ""
    )
    before = scenario.digest()
    (run / "config.json").write_text('{"seed": 1}')
    assert scenario.digest() != before


def test_registry_sets_are_disjoint_in_backgrounds_and_configurations():
    games = {s.game for s in SETS.values()}
    assert games == {"consequence", "moral_hazard", "open_cleanup", "open_harvest"}
    for game in games:
        train, test = scenario_set(game, "train"), scenario_set(game, "test")
        train_bg = {spec for s in train.scenarios for spec in s.background.values()}
        test_bg = {spec for s in test.scenarios for spec in s.background.values()}
        assert not train_bg & test_bg
        assert dict(train.scenarios[0].options) != dict(test.scenarios[0].options)
    with pytest.raises(ValueError, match="one program"):
        ScenarioSet(
            "bad", (SCENARIOS["consequence/rp_exploiters"], SCENARIOS["consequence/free_riders"])
        )


@pytest.mark.slow
def test_every_registered_scripted_background_exists_for_its_game(built):
    for name, scenario_set_ in SETS.items():
        env = built(name)
        names = set(policies_for(env.game))
        for s in scenario_set_.scenarios:
            for spec in s.background.values():
                kind, target = spec.split(":", 1)
                assert target in (names if kind == "scripted" else zoo.names()), spec
