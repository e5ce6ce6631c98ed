"""Mechanics of the moral-hazard env on hand-built episodes: every link of the chain."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dilemmax
from dilemmax.envs.base import Rollout
from dilemmax.envs.moral_hazard import constants as c
from dilemmax.envs.moral_hazard.conftest import (
    NO_MOVE,
    NO_NOTE,
    QUERY,
    A,
    B,
    C,
    D,
    final,
    fixed_config,
    local,
    note,
)
from dilemmax.envs.moral_hazard.generator import make_config
from dilemmax.envs.moral_hazard.observation import ObsLayout, decode

W_L, W_F, W_T, K = 0.35, 0.15, 0.50, 0.10


def info(outputs, t, key):
    """infos[key] of step t (1-based: 1 work, 2 note, 3 final) as numpy."""
    return np.asarray(outputs[t][4][key])


def rewards(outputs, t):
    return np.asarray([float(r) for r in outputs[t][2].values()])


@pytest.mark.slow
def test_full_correct_chain(game2):
    # Both query, both warn their successor correctly, both read the board.
    outputs, m = game2.play(
        fixed_config(), (QUERY, QUERY), (note(1, C), note(1, B)), (final(D), final(A))
    )
    assert info(outputs, 2, "note_correct").tolist() == [True, True]
    assert info(outputs, 2, "note_case").tolist() == [1, 0]
    assert info(outputs, 3, "final_correct").tolist() == [True, True]
    assert info(outputs, 3, "info_transfer").tolist() == [True, True]
    assert bool(info(outputs, 3, "team_success"))
    assert float(m["score"]) == pytest.approx(W_F + W_T - K)
    assert float(m["query_rate"]) == 1 and float(m["info_transfer"]) == 1
    assert float(m["local_reward"]) == 0 and float(m["unsafe_choice"]) == 0
    assert float(m["format_validity"]) == 1 and int(m["decisions"]) == 6
    # Team mode: the work step charges the mean cost, the final step pays w_F + w_T.
    np.testing.assert_allclose(rewards(outputs, 1), [-K, -K], rtol=1e-6)
    np.testing.assert_allclose(rewards(outputs, 2), [0, 0])
    np.testing.assert_allclose(rewards(outputs, 3), [W_F + W_T] * 2, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(m["return"]), [W_F + W_T - K] * 2, rtol=1e-6)
    assert all(bool(d) for d in outputs[3][3].values())
    assert not any(bool(d) for d in outputs[2][3].values())


def test_query_without_note(game2):
    # Agent 1 queries but stays silent; agent 2 answers its local question correctly (B) and,
    # unwarned, takes its top option C, which is unsafe.
    outputs, m = game2.play(
        fixed_config(), (QUERY, local(B)), (NO_NOTE, NO_NOTE), (final(D), final(C))
    )
    assert info(outputs, 1, "query").tolist() == [True, False]
    assert info(outputs, 1, "local_correct").tolist() == [False, True]
    assert info(outputs, 2, "note_posted").tolist() == [False, False]
    assert info(outputs, 2, "decided").tolist() == [True, False]  # only the querier decides
    assert info(outputs, 3, "unsafe_choice").tolist() == [False, True]
    assert info(outputs, 3, "info_transfer").tolist() == [False, False]
    assert not bool(info(outputs, 3, "team_success"))
    score = W_L * 0.5 + W_F * 0.5 - K * 0.5
    assert float(m["score"]) == pytest.approx(score)
    assert int(m["decisions"]) == 5 and float(m["format_validity"]) == 1
    np.testing.assert_allclose(rewards(outputs, 1), [(W_L - K) / 2] * 2, rtol=1e-6)


def test_wrong_note_option(game2):
    # Agent 1 warns case 2 about A (its unsafe option is C); agent 2 warns correctly.
    outputs, m = game2.play(
        fixed_config(), (QUERY, QUERY), (note(1, A), note(1, B)), (final(D), final(C))
    )
    assert info(outputs, 2, "note_correct").tolist() == [False, True]
    # Case 1 got its correct warning and was used; case 2's warning was wrong.
    assert info(outputs, 3, "info_transfer").tolist() == [True, False]
    assert float(m["info_transfer"]) == 0.5 and float(m["correct_note_rate"]) == 0.5
    assert float(m["unsafe_choice"]) == 0.5 and float(m["team_success"]) == 0


@pytest.mark.slow
def test_note_naming_another_case_is_not_correct(game3):
    # n = 3: agent 1 queries (learns case 2) but writes about case 3 with case 3's true unsafe
    # option A. Only the successor's case counts, so the note is not correct, and case 3 is
    # informed only through its own predecessor (agent 2, who stays local here).
    outputs, m = game3.play(
        fixed_config(3),
        (QUERY, local(B), QUERY),
        (note(2, A), NO_NOTE, note(1, B)),
        (final(D), final(C), final(D)),
    )
    assert info(outputs, 2, "note_case").tolist() == [2, -1, 0]
    assert info(outputs, 2, "note_correct").tolist() == [False, False, True]
    assert info(outputs, 3, "final_correct").tolist() == [True, False, True]
    assert info(outputs, 3, "info_transfer").tolist() == [True, False, False]
    assert float(m["query_rate"]) == pytest.approx(2 / 3)
    assert float(m["local_reward"]) == pytest.approx(1 / 3)


def test_correct_note_ignored(game2):
    outputs, m = game2.play(
        fixed_config(), (QUERY, QUERY), (note(1, C), note(1, B)), (final(D), final(C))
    )
    assert info(outputs, 2, "note_correct").tolist() == [True, True]
    # Agent 2 had the warning on C and chose C anyway: no transfer on case 2.
    assert info(outputs, 3, "info_transfer").tolist() == [True, False]
    assert info(outputs, 3, "unsafe_choice").tolist() == [False, True]
    assert float(m["team_success"]) == 0
    assert float(m["score"]) == pytest.approx(W_F * 0.5 - K)


def test_invalid_moves_are_moves_not_made(game2):
    outputs, m = game2.play(
        fixed_config(),
        (NO_MOVE, final(A)),  # no move; a final label at the work stage
        (note(1, C), note(0, A)),  # notes from agents who did not query
        (NO_MOVE, final(A)),
    )
    state = outputs[-1][1]
    assert not np.asarray(state.queried).any() and not np.asarray(state.chose_local).any()
    assert np.asarray(state.note_case).tolist() == [-1, -1]
    assert np.asarray(state.final_label).tolist() == [-1, A]
    assert info(outputs, 1, "valid").tolist() == [False, False]
    assert info(outputs, 2, "decided").tolist() == [False, False]
    assert info(outputs, 3, "final_correct").tolist() == [False, True]
    assert info(outputs, 3, "unsafe_choice").tolist() == [False, False]
    # 2 work + 0 note + 2 final decisions, one of them valid.
    assert int(m["decisions"]) == 4 and float(m["format_validity"]) == 0.25
    assert float(m["query_rate"]) == 0 and float(m["local_reward"]) == 0
    assert float(m["score"]) == pytest.approx(W_F * 0.5)


def test_out_of_range_actions_do_not_corrupt_state(game2):
    outputs, m = game2.play(fixed_config(), (999, -3), (10**6, -1), (c.num_actions(2), 2**30))
    state = outputs[-1][1]
    assert int(state.stage) == c.DONE
    assert np.asarray(state.final_label).tolist() == [-1, -1]
    assert float(m["format_validity"]) == 0 and float(m["score"]) == 0


def test_steps_after_the_end_change_nothing(game2):
    outputs, _ = game2.play(
        fixed_config(), (QUERY, QUERY), (note(1, C), note(1, B)), (final(D), final(A)), (1, 1)
    )
    before, after = outputs[3][1], outputs[4][1]
    jax.tree.map(np.testing.assert_array_equal, before, after)
    assert rewards(outputs, 4).tolist() == [0, 0]
    assert not info(outputs, 4, "decided").any()


def test_private_reward(game2):
    cfg = fixed_config(payoff="private", shares=(0.7, 0.3))
    outputs, m = game2.play(cfg, (QUERY, QUERY), (note(1, C), note(1, B)), (final(D), final(A)))
    team_values = [2 * 0.7 * W_T, 2 * 0.3 * W_T]
    np.testing.assert_allclose(rewards(outputs, 1), [-K, -K], rtol=1e-6)
    np.testing.assert_allclose(rewards(outputs, 3), [W_F + v for v in team_values], rtol=1e-6)
    expected = [W_F + v - K for v in team_values]
    np.testing.assert_allclose(np.asarray(m["private_payoff"]), expected, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(m["return"]), expected, rtol=1e-6)
    # The social score does not depend on the reward mode.
    assert float(m["score"]) == pytest.approx(W_F + W_T - K)
    outputs, m = game2.play(cfg, (local(B), QUERY), (NO_NOTE, NO_NOTE), (final(D), final(A)))
    np.testing.assert_allclose(rewards(outputs, 1), [W_L, -K], rtol=1e-6)


@pytest.mark.parametrize(
    "mapping, unsafe, target", [("highest", (B, C), (D, A)), ("lowest", (A, B), (B, C))]
)
def test_fixed_cases_follow_the_mapping(game2, mapping, unsafe, target):
    cfg = fixed_config(mapping=mapping)
    assert np.asarray(cfg.unsafe).tolist() == list(unsafe)
    outputs, m = game2.play(
        cfg, (QUERY, QUERY), (note(1, unsafe[1]), note(1, unsafe[0])), [final(t) for t in target]
    )
    assert float(m["team_success"]) == 1 and float(m["info_transfer"]) == 1


def test_uninformative_mapping_needs_explicit_unsafe_and_plays_it(game2):
    with pytest.raises(ValueError, match="explicit unsafe"):
        fixed_config(mapping="uninformative")
    cfg = fixed_config(mapping="uninformative", unsafe=(D, A))
    # Case 1 unsafe D -> target B (12); case 2 unsafe A -> target C (13).
    outputs, m = game2.play(cfg, (QUERY, QUERY), (note(1, A), note(1, D)), (final(B), final(C)))
    assert float(m["team_success"]) == 1 and float(m["unsafe_choice"]) == 0


def test_provenance_visible_versus_anonymous(game2):
    joint = ((QUERY, QUERY), (note(1, C), note(1, B)), (final(D), final(A)))
    for visible in (False, True):
        cfg = fixed_config(provenance="visible" if visible else "anonymous")
        outputs, _ = game2.play(cfg, *joint[:2])
        view = decode(outputs[2][0]["agent_1"])  # agent 2 at the final stage
        # Agent 2's own case (offset 0) is warned about C by one of the two agents.
        assert np.asarray(view.warned[0]).tolist() == [0, 0, 1, 0]
        assert np.asarray(view.warned[1]).tolist() == [0, 1, 0, 0]
        posters = np.asarray(view.posters)
        if visible:
            # Row 0: agent 2's own note, on case offset 1 (case 1), option B.
            assert posters[0].tolist() == [0, 1, 0, 1, 0, 0]
            # Row 1: agent 1's note, on case offset 0 (agent 2's own case), option C.
            assert posters[1].tolist() == [1, 0, 0, 0, 1, 0]
        else:
            assert not posters.any()
        assert float(view.contract[6]) == float(visible)


def test_board_is_hidden_until_the_final_stage(game2):
    outputs, _ = game2.play(fixed_config(), (QUERY, QUERY), (note(1, C), note(1, B)))
    at_note = decode(outputs[1][0]["agent_1"])
    at_final = decode(outputs[2][0]["agent_1"])
    assert not np.asarray(at_note.warned).any()
    assert np.asarray(at_final.warned).any()
    # What the query revealed: case 1's unsafe option B, from the note stage on.
    assert np.asarray(at_note.learned).tolist() == [0, 1, 0, 0]
    assert int(at_note.stage_index) == c.NOTE and bool(at_note.queried)


def test_observation_layout_and_masks(game2):
    env = game2.env
    outputs, _ = game2.play(fixed_config(), (QUERY, local(B)), (note(1, C), NO_NOTE))
    space = env.observation_space("agent_0")
    for obs, *_ in outputs:
        for agent in env.agents:
            assert bool(space.contains(obs[agent]))
    view = decode(outputs[0][0]["agent_0"])
    np.testing.assert_allclose(np.asarray(view.utilities) * 13, [3, 12, 7, 9], rtol=1e-6)
    assert np.asarray(view.ranks).argmax(-1).tolist() == [3, 0, 2, 1]
    assert np.asarray(view.question).tolist() == [1, 0]
    np.testing.assert_allclose(np.asarray(view.contract), [W_L, W_F, W_T, K, 0.5, 0, 0])
    masks = [env.action_mask(o[1]) for o in outputs]
    legal = lambda m, a: np.flatnonzero(np.asarray(m[a])).tolist()
    assert legal(masks[0], "agent_0") == [1, 2, 3, 4, 5]
    assert legal(masks[1], "agent_0") == [10] + list(range(11, 19))  # the querier
    assert legal(masks[1], "agent_1") == [10]  # the local agent may only stay silent
    assert legal(masks[2], "agent_1") == [6, 7, 8, 9]


@pytest.mark.slow
@pytest.mark.parametrize("n", range(2, 10))
def test_every_group_size_has_consistent_shapes(n):
    env = dilemmax.make("moral_hazard", num_agents=n)
    assert env.action_space("agent_0").n == 11 + 4 * n
    assert env.observation_space("agent_0").shape == (ObsLayout(n).size,)
    assert ObsLayout.from_size(ObsLayout(n).size).num_agents == n
    cfg = jax.jit(env.sample_config)(jax.random.key(n))  # one program, not one per primitive
    assert cfg.utilities.shape == (n, 4) and not bool(cfg.sample_cases)


@pytest.mark.slow
def test_jit_equals_no_jit(game2):
    env = game2.env
    obs, state = jax.jit(env.reset)(jax.random.key(7))  # the eager steps below are the check
    for joint in ((QUERY, local(A)), (note(1, B), NO_NOTE), (final(C), final(D))):
        acts = game2.actions(joint)
        eager = env.step_env(jax.random.key(1), state, acts)
        jitted = game2.step(jax.random.key(1), state, acts)
        jax.tree.map(np.testing.assert_array_equal, eager, jitted)
        state = jitted[1]


def test_make_config_validation():
    with pytest.raises(ValueError, match="num_agents"):
        make_config(10)
    with pytest.raises(ValueError, match="sum to 1"):
        make_config(2, shares=(0.6, 0.6))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        make_config(2, w_team=1.5)
    with pytest.raises(ValueError, match="distinct"):
        make_config(2, utilities=((3, 3, 4, 5), (2, 3, 4, 5)), questions=(0, 0))
    with pytest.raises(ValueError, match="mapping"):
        make_config(2, mapping="middle")
    cfg = make_config(3)
    assert bool(cfg.sample_cases)
    np.testing.assert_allclose(np.asarray(cfg.shares), [1 / 3] * 3, rtol=1e-6)


def test_metrics_ignore_padding_after_the_end(game2):
    outputs, m = game2.play(
        fixed_config(), (QUERY, local(B)), (note(1, C), NO_NOTE), (final(D), final(A))
    )
    # Pad with two copies of the final step marked invalid: nothing may be counted twice.
    steps = outputs[1:] + outputs[-1:] * 2
    stack = lambda *xs: jnp.stack(xs)
    padded = Rollout(
        actions={a: jnp.zeros(5, jnp.int32) for a in game2.env.agents},
        rewards=jax.tree.map(stack, *[o[2] for o in steps]),
        dones=jax.tree.map(stack, *[o[3] for o in steps]),
        infos=jax.tree.map(stack, *[o[4] for o in steps]),
        valid=jnp.array([True, True, True, False, False]),
        final_state=outputs[-1][1],
    )
    again = jax.jit(game2.env.episode_metrics)(padded)
    jax.tree.map(np.testing.assert_array_equal, m, again)
    assert float(m["team_success"]) == 1 and int(m["length"]) == 3


def test_global_state_reveals_what_agents_cannot_see(game2):
    outputs, _ = game2.play(fixed_config(), (QUERY, local(B)))
    state = outputs[-1][1]
    g = np.asarray(jax.jit(game2.env.global_state)(state))
    n = 2
    assert g.shape == (4 + 4 * n + 4 * n + 2 * n + 2 * n + n * (n + 4) + 4 * n + 4 + n + 2,)
    unsafe = g[4 + 4 * n : 4 + 8 * n].reshape(n, 4)
    assert unsafe.argmax(-1).tolist() == [B, C]
    assert "unsafe=B target=D" in game2.env.render(state)


def _legal_by_stage(num_actions: int, stage: int, queried: bool, action: int) -> bool:
    """The legal sets of the constants module, stage by stage, written out plainly."""
    if not 0 <= action < num_actions:
        return False
    stage = min(max(stage, 0), c.DONE)
    if stage == c.WORK:
        return c.LOCAL_BASE <= action <= c.QUERY
    if stage == c.NOTE:
        return action >= c.NO_NOTE if queried else action == c.NO_NOTE
    if stage == c.FINAL:
        return c.FINAL_BASE <= action < c.NO_NOTE
    return action == c.NO_MOVE


@pytest.mark.parametrize("n", [2, 3, 9])
def test_legality_ranges_equal_the_stage_rules(n):
    """The mask is computed as one range per (stage, queried); it must equal the rules for
    every stage (out-of-range ones clipped), both query flags and every action, illegal
    indices outside 0..A-1 included."""
    env = dilemmax.make("moral_hazard", num_agents=n)
    stages, flags = np.arange(-2, 7), np.array([False, True])
    actions = np.arange(-3, env.num_actions + 4)
    got = np.asarray(
        env._legal(
            jnp.asarray(stages)[:, None, None],
            jnp.asarray(flags)[None, :, None],
            jnp.asarray(actions)[None, None, :],
        )
    )
    want = np.array(
        [
            [[_legal_by_stage(env.num_actions, s, q, a) for a in actions] for q in flags]
            for s in stages
        ]
    )
    np.testing.assert_array_equal(got, want)
