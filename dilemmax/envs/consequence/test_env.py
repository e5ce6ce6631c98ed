"""Mechanics of the consequence game on hand-built cases, with closed-form expectations."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dilemmax
from dilemmax.envs.consequence import constants as C
from dilemmax.envs.consequence.env import ConsequenceEnv
from dilemmax.envs.consequence.generator import make_config

M = 13  # W + 1 for the default W = 12


@pytest.mark.slow
def test_canonical_rp_all_zero_eliminates_poorest_and_others_can_still_succeed(player):
    state = player.start((1, 5, 6), 10, "RP")
    _, state, rewards, dones, infos = player.play(state, (0, 0, 0))
    np.testing.assert_array_equal(state.alive, [False, True, True])
    np.testing.assert_array_equal(state.resources, [0, 5, 6])
    assert int(state.forfeited[0]) == 1 and int(state.fund) == 0
    assert bool(infos["victim_poorest"]) and bool(infos["survivors_could_cover"])
    assert [bool(dones[a]) for a in player.env.agents] == [True, False, False]
    assert not bool(dones["__all__"]) and int(state.round) == 1
    # The two survivors (5 + 6 >= 10) meet T in round two.
    _, state, rewards, dones, _ = player.step(jax.random.key(9), state, player.actions(0, 5, 5))
    assert bool(state.success) and bool(dones["__all__"])
    assert [float(rewards[a]) for a in player.env.agents] == [0.0, M + 0, M + 1]


def test_aon_all_zero_kills_everyone_only_at_the_end(player):
    state = player.start((1, 5, 6), 10, "AON")
    for t in range(3):
        _, state, rewards, dones, infos = player.step(
            jax.random.key(t), state, player.actions(0, 0, 0)
        )
        last = t == 2
        assert bool(jnp.all(state.alive)) != last
        assert bool(dones["__all__"]) == last
        assert bool(infos["endgame"]) == last
    np.testing.assert_array_equal(state.forfeited, [1, 5, 6])
    assert all(float(r) == 0.0 for r in rewards.values())
    assert bool(jnp.all(state.endgame))


def test_pp_eliminates_the_richest(player):
    state = player.start((1, 5, 6), 10, "PP")
    _, state, _, _, infos = player.play(state, (1, 0, 0))
    np.testing.assert_array_equal(state.alive, [True, True, False])
    assert int(state.forfeited[2]) == 6 and bool(infos["victim_richest"])
    # Only 0 + 5 is left against a shortfall of 9: the survivors cannot cover it.
    assert not bool(infos["survivors_could_cover"])


@pytest.mark.slow
def test_pp_tie_for_richest_is_random(player):
    state = player.start((2, 5, 5), 12, "PP")
    _, after, *_ = player.step_keys(jax.random.split(jax.random.key(0), 64), state,
                                    player.actions(0, 0, 0))  # fmt: skip
    victims = np.argmin(np.asarray(after.alive), axis=1)
    assert set(victims.tolist()) == {1, 2}
    assert np.all(np.asarray(after.alive).sum(axis=1) == 2)


def test_re_draws_any_survivor(player):
    state = player.start((4, 4, 4), 12, "RE")
    _, after, *_ = player.step_keys(
        jax.random.split(jax.random.key(1), 64), state, player.actions(1, 0, 2)
    )
    victims = np.argmin(np.asarray(after.alive), axis=1)
    assert set(victims.tolist()) == {0, 1, 2}


@pytest.mark.slow
def test_random_draw_is_the_kth_candidate_of_jax_uniform(player):
    """The RE victim under key k is survivor floor(jax.random.uniform(k) * 3): the step's draw
    is JAX's own uniform (the unrolled hash computes the same numbers), so a key gives the
    same episode as it always did."""
    state = player.start((4, 4, 4), 12, "RE")
    keys = jax.random.split(jax.random.key(5), 256)
    _, after, *_ = player.step_keys(keys, state, player.actions(1, 0, 2))
    victims = np.argmin(np.asarray(after.alive), axis=1)
    want = np.floor(np.asarray(jax.vmap(jax.random.uniform)(keys)) * 3).astype(int)
    np.testing.assert_array_equal(victims, want)
    # Among two tied candidates (PP: seats 1 and 2 hold the most), the k-th of them.
    state = player.start((2, 5, 5), 12, "PP")
    _, after, *_ = player.step_keys(keys, state, player.actions(0, 0, 0))
    victims = np.argmin(np.asarray(after.alive), axis=1)
    want = 1 + np.floor(np.asarray(jax.vmap(jax.random.uniform)(keys)) * 2).astype(int)
    np.testing.assert_array_equal(victims, want)


def test_dv_vote_phase_tie_and_plurality(player):
    state = player.start((2, 4, 6), 12, "DV")
    _, state, _, dones, infos = player.play(state, (0, 1, 0))
    assert int(state.phase) == C.PHASE_VOTE and bool(jnp.all(state.alive))
    assert not bool(infos["rule_elimination"]) and not bool(dones["__all__"])
    # Three votes for three different agents: a three-way tie broken at random.
    _, after, *_ = player.step_keys(
        jax.random.split(jax.random.key(2), 64), state, player.actions(1, 2, 0)
    )
    victims = np.argmin(np.asarray(after.alive), axis=1)
    assert set(victims.tolist()) == {0, 1, 2}
    np.testing.assert_array_equal(np.asarray(after.votes)[:, 0], np.tile([1, 2, 0], (64, 1)))
    assert np.all(np.asarray(after.phase) == C.PHASE_CONTRIBUTE)
    assert np.all(np.asarray(after.round) == 1)
    # Two votes for C: C goes whatever the key; its 6 units are forfeited, B keeps 3.
    _, after, _, _, infos = player.step(jax.random.key(3), state, player.actions(2, 2, 0))
    np.testing.assert_array_equal(after.alive, [True, True, False])
    np.testing.assert_array_equal(after.resources, [2, 3, 0])
    assert bool(infos["rule_elimination"]) and bool(infos["victim_richest"])


@pytest.mark.slow
def test_dv_abstentions_draw_among_survivors(player):
    state = player.start((2, 4, 6), 12, "DV")
    _, state, *_ = player.play(state, (0, 0, 0))
    # 7 is out of range for votes (3 agents): every vote is an abstention, flagged invalid.
    _, after, _, _, infos = player.step_keys(
        jax.random.split(jax.random.key(4), 32), state, player.actions(7, 7, 7)
    )
    assert np.all(np.asarray(infos["invalid"]))
    assert np.all(np.asarray(after.alive).sum(axis=1) == 2)
    assert np.all(np.asarray(after.votes)[:, 0] == -1)


def test_forfeited_resources_leave_the_game(player):
    state = player.start((3, 4, 5), 12, "RP")
    _, state, *_ = player.play(state, (1, 0, 0))  # A keeps 2: still the poorest
    assert int(state.fund) == 1 and int(state.forfeited[0]) == 2
    # A's 2 units are gone: the 4 + 5 left cannot reach the missing 11.
    _, state, _, dones, _ = player.play(state, (0, 4, 5), seed=1)
    assert int(state.fund) == 10 and not bool(state.success)
    # The round fails again, so the poorest survivor (B, 0 left) goes; C holds 0 too: a tie.
    assert int(jnp.sum(state.alive)) == 1


def test_illegal_actions_are_no_ops(player):
    state = player.start((1, 5, 6), 10, "AON")
    _, state, _, _, infos = player.play(state, (2, -1, 6))  # A holds 1: 2 is illegal
    np.testing.assert_array_equal(infos["invalid"], [True, True, False])
    np.testing.assert_array_equal(state.resources, [1, 5, 0])
    assert int(state.fund) == 6
    # After A's elimination (RP), A's action is ignored whatever it is.
    state = player.start((1, 5, 6), 12, "RP")
    _, state, *_ = player.play(state, (0, 0, 0))
    _, state, _, _, infos = player.play(state, (5, 1, 1), seed=2)
    assert bool(infos["invalid"][0]) and int(state.fund) == 2


def test_masks_per_phase(player):
    env = player.env
    state = player.start((1, 5, 6), 12, "DV")
    mask = env.legal_actions(state)
    assert mask.shape == (3, 13)
    np.testing.assert_array_equal(mask.sum(axis=1), [2, 6, 7])  # 0..w_i
    _, state, *_ = player.play(state, (1, 2, 0))
    vote_mask = np.asarray(env.legal_actions(state))
    np.testing.assert_array_equal(vote_mask[:, :3], np.ones((3, 3), bool))
    assert not vote_mask[:, 3:].any()
    _, state, *_ = player.play(state, (2, 2, 2), seed=1)  # C is voted out
    contribute_mask = np.asarray(env.legal_actions(state))
    np.testing.assert_array_equal(contribute_mask[2], np.arange(13) == 0)  # eliminated: only 0
    np.testing.assert_array_equal(contribute_mask[1], np.arange(13) <= 3)
    _, state, *_ = player.play(state, (0, 0, 0), seed=2)
    vote_mask = np.asarray(env.legal_actions(state))
    np.testing.assert_array_equal(vote_mask[0], np.arange(13) < 2)  # C no longer a target
    np.testing.assert_array_equal(vote_mask[2], np.arange(13) == 0)


@pytest.mark.slow
def test_one_shot_and_rule_endgame():
    for rule in ("DV", "RP", "AON"):
        env = ConsequenceEnv(num_rounds=1, sorted_agents=True)
        assert env.max_steps == 1
        _, state = env.reset_to(jax.random.key(0), make_config((1, 5, 6), 10, rule))
        acts = {a: jnp.int32(0) for a in env.agents}
        _, after, _, dones, _ = env.step_env(jax.random.key(1), state, acts)
        assert bool(dones["__all__"]) and not bool(jnp.any(after.alive))
        cover = dict(acts, agent_1=jnp.int32(4), agent_2=jnp.int32(6))
        _, after, *_ = env.step_env(jax.random.key(1), state, cover)
        assert bool(after.success) and bool(jnp.all(after.alive))
    # Under endgame="rule" the rule acts once after the final round instead.
    env = ConsequenceEnv(num_rounds=1, sorted_agents=True, endgame="rule")
    assert env.max_steps == 2
    _, state = env.reset_to(jax.random.key(0), make_config((1, 5, 6), 10, "RP"))
    acts = {a: jnp.int32(0) for a in env.agents}
    _, after, _, dones, infos = env.step_env(jax.random.key(1), state, acts)
    np.testing.assert_array_equal(after.alive, [False, True, True])
    assert bool(dones["__all__"]) and bool(infos["rule_elimination"]) and not bool(infos["endgame"])
    _, state = env.reset_to(jax.random.key(0), make_config((1, 5, 6), 10, "DV"))
    _, state, _, dones, _ = env.step_env(jax.random.key(1), state, acts)
    assert int(state.phase) == C.PHASE_VOTE and not bool(dones["__all__"])
    _, state, _, dones, _ = env.step_env(jax.random.key(1), state, acts)  # all vote for A
    np.testing.assert_array_equal(state.alive, [False, True, True])
    assert bool(dones["__all__"])


def test_finished_episode_is_frozen(player):
    state = player.start((1, 5, 6), 1, "RP")
    _, state, rewards, dones, _ = player.play(state, (1, 0, 0))
    assert bool(dones["__all__"]) and float(rewards["agent_2"]) == M + 6
    _, again, rewards, dones, infos = player.play(state, (0, 3, 3), seed=3)
    assert bool(dones["__all__"])
    assert all(float(r) == 0.0 for r in rewards.values())
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(a, b)
    assert not bool(jnp.any(infos["eliminated"]))


def test_observation_layout_and_relative_order(player):
    env = player.env
    state = player.start((1, 5, 6), 10, "RP")
    _, state, *_ = player.play(state, (1, 2, 0))
    obs = env.get_obs(state)
    n = 3
    b = np.asarray(obs["agent_1"])
    assert env.observation_space("agent_1").contains(b)
    assert b[C.OBS_PHASE] == C.PHASE_CONTRIBUTE and b[C.OBS_ROUND] == 2
    assert b[C.OBS_FUND] == 3 and b[C.OBS_THRESHOLD] == 10 and b[C.OBS_SHORTFALL] == 7
    # B sees itself, then C, then A (wrapping round).
    np.testing.assert_array_equal(b[C.obs_resources(n)], [3, 6, 0])
    np.testing.assert_array_equal(b[C.obs_alive(n)], [1, 1, 0])
    np.testing.assert_array_equal(b[C.obs_contributed(n)], [2, 0, 1])
    np.testing.assert_array_equal(b[C.obs_rule(n)], np.eye(C.NUM_RULE_TOKENS)[C.RP])


def test_anonymous_rule_token():
    env = ConsequenceEnv(anonymous_rule=True)
    n = env.num_agents
    for rule, token in (("RP", C.UNNAMED), ("PP", C.UNNAMED), ("RE", C.RE), ("AON", C.AON)):
        obs, _ = env.reset_to(jax.random.key(0), make_config((1, 5, 6), 10, rule))
        assert int(jnp.argmax(obs["agent_0"][C.obs_rule(n)])) == token


def test_unsorted_seats_follow_the_permutation():
    env = ConsequenceEnv()
    config = make_config((0, 3, 9), 5, "RP")
    seen = set()
    for seed in range(12):
        _, state = env.reset_to(jax.random.key(seed), config)
        np.testing.assert_array_equal(state.resources, np.asarray([0, 3, 9])[state.rank])
        seen.add(tuple(np.asarray(state.rank).tolist()))
    assert len(seen) > 1


def test_reward_modes():
    config = make_config((1, 5, 6), 10, "RP")
    joint = [(0, 0, 0), (0, 5, 5)]
    totals = {}
    for mode in C.OBJECTIVES:
        env = ConsequenceEnv(sorted_agents=True, objective=mode)
        _, state = env.reset_to(jax.random.key(0), config)
        total = np.zeros(3)
        for t, values in enumerate(joint):
            acts = {a: jnp.int32(v) for a, v in zip(env.agents, values, strict=True)}
            _, state, rewards, _, _ = env.step_env(jax.random.key(t), state, acts)
            total += [float(rewards[a]) for a in env.agents]
        totals[mode] = total
    np.testing.assert_array_equal(totals["lexicographic"], [0, M, M + 1])
    np.testing.assert_array_equal(totals["survival"], [0, 1, 1])
    np.testing.assert_array_equal(totals["resources"], [0, 0, 1])
    # Shaped rewards sum to the lexicographic utility minus its starting value M + w_i.
    np.testing.assert_array_equal(
        totals["shaped"], totals["lexicographic"] - (M + np.array([1, 5, 6]))
    )


def test_jit_equals_no_jit_and_determinism(player):
    env = player.env
    state0 = player.start((2, 4, 6), 11, "DV")

    def trajectory(step):
        state, out = state0, []
        key = jax.random.key(5)
        for _ in range(env.max_steps):
            key, k_act, k_step = jax.random.split(key, 3)
            masks = env.action_mask(state)
            keys = jax.random.split(k_act, env.num_agents)
            acts = {
                a: env.action_space(a).sample(k, masks[a])
                for a, k in zip(env.agents, keys, strict=True)
            }
            obs, state, rewards, dones, infos = step(k_step, state, acts)
            out.append((obs, state, rewards, dones, infos))
        return out

    jitted, plain, again = (
        trajectory(player.step),
        trajectory(env.step_env),
        trajectory(player.step),
    )
    for x, y, z in zip(jax.tree.leaves(jitted), jax.tree.leaves(plain), jax.tree.leaves(again),
                       strict=True):  # fmt: skip
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)


@pytest.mark.slow
def test_make_and_options():
    env = dilemmax.make("consequence", num_agents=4, num_rounds=2, total_resources=8)
    assert env.action_space("agent_3").n == 9
    assert env.observation_space("agent_0").shape == (C.obs_size(4),)
    assert env.max_steps == 3
    obs, state = env.reset(jax.random.key(0))
    assert int(state.resources.sum()) == 8
    assert all(bool(env.observation_space(a).contains(o)) for a, o in obs.items())
    with pytest.raises(ValueError):
        ConsequenceEnv(objective="money")
    with pytest.raises(ValueError):
        make_config((1, 5, 6), 13, "RP")
    with pytest.raises(ValueError):
        make_config((1, 5, 6), 10, "XX")


@pytest.mark.slow
def test_mask_agrees_with_the_steps_legality_check():
    """legal_actions (the mask policies read) and _is_legal (what the step enforces) are
    computed differently; on states reached by random play, every rule and phase, finished
    episodes included, they agree for every action of every seat, out-of-range indices too."""
    env = ConsequenceEnv()
    candidates = jnp.arange(-2, env.num_actions + 2)
    inside = (candidates >= 0) & (candidates < env.num_actions)

    def wrong_entries(state):
        by_check = jax.vmap(lambda a: env._is_legal(state, jnp.full(env.num_agents, a)))
        by_check = by_check(candidates).T  # [n, A + 4]
        mask = env.legal_actions(state)  # [n, A]
        padded = jnp.zeros(by_check.shape, bool).at[:, 2 : 2 + env.num_actions].set(mask)
        return jnp.sum(padded != by_check) + jnp.sum(by_check & ~inside[None, :])

    @jax.jit
    def disagreements(key):
        def body(state, k):
            k_act, k_step = jax.random.split(k)
            # Random actions, some illegal, so eliminations, votes and failures happen.
            acts = jax.random.randint(k_act, (env.num_agents,), -1, env.num_actions)
            acts = {a: acts[i] for i, a in enumerate(env.agents)}
            _, finished, *_ = env.step_env(k_step, state, acts)  # kept even when it ends
            _, state, *_ = env.step(k_step, state, acts)
            return state, wrong_entries(state) + wrong_entries(finished)

        _, state = env.reset(key)
        return jnp.sum(jax.lax.scan(body, state, jax.random.split(key, 60))[1])

    wrong = jax.vmap(disagreements)(jax.random.split(jax.random.key(3), 64))
    assert int(jnp.sum(wrong)) == 0
