"""rare_cond: lax.cond's results everywhere, and a real branch under vmap (auto-reset, re-lays)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dilemmax
from dilemmax.envs import rare
from dilemmax.envs.rare import rare_cond


def _double_or_negate(pred, x, y, gathered=False):
    return rare_cond(
        pred, lambda x, y: (2 * x, y + 1), lambda x, y: (-x, y), x, y, gathered=gathered
    )


def _plain(pred, x, y):
    return jax.lax.cond(pred, lambda x, y: (2 * x, y + 1), lambda x, y: (-x, y), x, y)


def test_unbatched_rare_cond_is_lax_cond():
    for pred in (True, False):
        got = jax.jit(_double_or_negate)(pred, jnp.arange(3.0), jnp.int32(4))
        want = _plain(pred, jnp.arange(3.0), jnp.int32(4))
        jax.tree.map(np.testing.assert_array_equal, got, want)


# Jitted once for the module: every parametrization below has the same shapes, so each runs
# the programs the first one compiled.
_vmapped = jax.jit(jax.vmap(_double_or_negate))
_gathered = functools.partial(_double_or_negate, gathered=True)
_vmapped_gathered = jax.jit(jax.vmap(_gathered))
_nested_gathered = jax.jit(jax.vmap(jax.vmap(_gathered)))
# The broadcast and nested cases, and the lax.cond references, jitted too: run eagerly, each
# primitive of a vmapped cond is a program of its own (about 100 for this module).
_broadcast = jax.jit(jax.vmap(_double_or_negate, in_axes=(0, None, None)))
_nested = jax.jit(jax.vmap(jax.vmap(_double_or_negate)))
_plain_vmapped = jax.jit(jax.vmap(_plain))
_plain_broadcast = jax.jit(jax.vmap(_plain, in_axes=(0, None, None)))
_plain_nested = jax.jit(jax.vmap(jax.vmap(_plain)))


@pytest.mark.slow
@pytest.mark.parametrize("preds", [[True, False, True, False], [False] * 4, [True] * 4])
def test_vmapped_rare_cond_matches_each_element(preds):
    pred = jnp.asarray(preds)
    x = jnp.arange(8.0).reshape(4, 2)
    y = jnp.arange(4, dtype=jnp.int32)
    got = _vmapped(pred, x, y)
    want = _plain_vmapped(pred, x, y)
    jax.tree.map(np.testing.assert_array_equal, got, want)
    # Unbatched operands are broadcast; nested vmap (seeds x envs) gives the same values.
    got = _broadcast(pred, x[0], y[0])
    want = _plain_broadcast(pred, x[0], y[0])
    jax.tree.map(np.testing.assert_array_equal, got, want)
    seeds = (jnp.stack([pred, ~pred]), jnp.stack([x, x + 1]), jnp.stack([y, y]))
    nested = _nested(*seeds)
    want = _plain_nested(*seeds)
    jax.tree.map(np.testing.assert_array_equal, nested, want)


@pytest.mark.slow
@pytest.mark.parametrize("count", [0, 1, 3, 4, 5, 9, 31, 32])
def test_gathered_rare_cond_matches_each_element(count):
    """A batch of 32 (gathered 4 at a time): every count of elements taking the rare branch,
    in scattered positions, gives the per-element lax.cond's values; so does a nested vmap
    whose rows need different numbers of gathered batches."""
    num = 32
    assert rare.gathered_size(num) == 4 and rare.gathered_size(8) == 0
    order = np.random.default_rng(count).permutation(num)
    pred = jnp.zeros(num, bool).at[order[:count]].set(True)
    x = jnp.arange(2.0 * num).reshape(num, 2)
    y = jnp.arange(num, dtype=jnp.int32)
    got = _vmapped_gathered(pred, x, y)
    want = _plain_vmapped(pred, x, y)
    jax.tree.map(np.testing.assert_array_equal, got, want)
    few = jnp.zeros(num, bool).at[order[-2:]].set(True)
    seeds = (jnp.stack([pred, few, ~few]), jnp.stack([x, -x, x]), jnp.stack([y] * 3))
    nested = _nested_gathered(*seeds)
    jax.tree.map(np.testing.assert_array_equal, nested, _plain_nested(*seeds))


_RARE_CALLS: list[int] = []  # one entry per element the rare branch ran for


def _counted_true_fn(x):
    jax.debug.callback(lambda value: _RARE_CALLS.append(1), x[0])
    return x + 1.0


# One program per setting of ``gathered``, shared by every case below (pred is an argument).
_COUNTED = {
    gathered: jax.jit(
        jax.vmap(
            lambda p, x, g=gathered: rare_cond(p, _counted_true_fn, lambda x: x, x, gathered=g)
        )
    )
    for gathered in (True, False)
}


@pytest.mark.slow
@pytest.mark.parametrize("taken, runs", [(0, 0), (1, 8), (8, 8), (9, 16), (64, 64)])
def test_gathered_rare_branch_runs_only_for_the_elements_that_take_it(taken, runs):
    """vmap over 64 elements, gathered 8 at a time: the rare branch runs for as many batches
    of 8 as the elements taking it need (counted at run time, one callback per element it
    runs for); without ``gathered`` it runs for all 64 or none."""

    def count_calls(gathered, pred):
        _RARE_CALLS.clear()
        out = jax.block_until_ready(_COUNTED[gathered](pred, jnp.zeros((64, 3))))
        jax.effects_barrier()
        np.testing.assert_array_equal(out[:, 0], pred.astype(jnp.float32))
        return len(_RARE_CALLS)

    pred = jnp.arange(64) >= 64 - taken
    assert count_calls(True, pred) == runs
    assert count_calls(False, pred) == (64 if taken else 0)


def test_vmapped_rare_cond_keeps_a_branch_where_lax_cond_becomes_a_select():
    args = (jnp.zeros(4, bool), jnp.zeros((4, 2)), jnp.zeros(4, jnp.int32))
    assert "cond[" in str(jax.make_jaxpr(jax.vmap(_double_or_negate))(*args))
    assert "cond[" not in str(jax.make_jaxpr(jax.vmap(_plain))(*args))


def _legacy_step(env, key, state, actions):
    """The auto-reset step as it was: a per-env lax.cond (a select under vmap)."""
    key_step, key_reset = jax.random.split(key)
    obs, state, rewards, dones, infos = env.step_env(key_step, state, actions)
    obs, state = jax.lax.cond(dones["__all__"], lambda: env.reset(key_reset), lambda: (obs, state))
    return obs, state, rewards, dones, infos


@pytest.mark.slow
@pytest.mark.parametrize(
    "env_id, options",
    [
        ("open_harvest", {"num_trials": 2, "trial_steps": 2}),
        ("open_cleanup", {"num_trials": 2, "trial_steps": 2}),
    ],
)
def test_vmap_step_gives_every_env_the_episodes_of_the_plain_auto_reset(env_id, options):
    """Staggered envs (trials and episodes ending on different steps): jax.vmap(env.step) returns
    exactly what the per-env lax.cond auto-reset returned, so every env still gets its own
    independent episodes from the same keys as before."""
    env = dilemmax.make(env_id, **options)
    # 16 envs: the grid games reset gathered, 2 at a time (4 end on each step below).
    num_envs = 16
    assert env.gathered_resets and rare.gathered_size(num_envs) == 2
    _, state = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.key(1), num_envs))
    # Env i starts i steps into its episode: ends and re-lays fall on different steps.
    offset = jnp.arange(num_envs, dtype=jnp.int32) % env.max_steps
    state = state.replace(
        trial=offset // env.trial_steps, trial_step=offset % env.trial_steps, time=offset
    )
    # The full event infos, as the legacy step returned them (the default is JaxMARL's layout).
    new_step = jax.jit(jax.vmap(lambda k, s, a: env.step(k, s, a, full_infos=True)))
    old_step = jax.jit(jax.vmap(lambda k, s, a: _legacy_step(env, k, s, a)))
    old_state, ended, relaid = state, 0, 0
    for t in range(6):
        keys = jax.random.split(jax.random.key(100 + t), num_envs)
        actions = {a: jnp.full((num_envs,), i % 4, jnp.int32) for i, a in enumerate(env.agents)}
        got = new_step(keys, state, actions)
        want = old_step(keys, old_state, actions)
        jax.tree.map(np.testing.assert_array_equal, got, want)
        state, old_state = got[1], want[1]
        ended += int(got[3]["__all__"].sum())
        relaid += int((got[4]["trial_done"] & ~got[3]["__all__"]).sum())
    assert ended >= num_envs and relaid >= num_envs  # both branches were exercised, staggered


def _staggered_moral_hazard(env, state):
    """Env i starts i % 3 steps into its 3-step episode."""
    return state.replace(stage=jnp.arange(state.stage.shape[0], dtype=jnp.int32) % 3)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["moral_hazard", "consequence"])
def test_obs_from_state_envs_give_the_episodes_of_the_plain_auto_reset(env_id):
    """Envs that build observations after the auto-reset (``obs_from_state``): jax.vmap(env.step)
    returns exactly the legacy per-env step (split keys, reset obs and state selected), with
    episodes ending on different steps."""
    env = dilemmax.make(env_id)
    assert env.obs_from_state
    num_envs = 6
    _, state = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.key(1), num_envs))
    if env_id == "moral_hazard":
        state = _staggered_moral_hazard(env, state)
    new_step = jax.jit(jax.vmap(lambda k, s, a: env.step(k, s, a, full_infos=True)))
    old_step = jax.jit(jax.vmap(lambda k, s, a: _legacy_step(env, k, s, a)))
    num_actions = env.action_space(env.agents[0]).n
    old_state, ended = state, 0
    for t in range(8):
        keys = jax.random.split(jax.random.key(100 + t), num_envs)
        # Legal and illegal moves alike (an illegal one is a move not made).
        actions = {
            a: (jnp.arange(num_envs, dtype=jnp.int32) + 3 * t + i) % num_actions
            for i, a in enumerate(env.agents)
        }
        got = new_step(keys, state, actions)
        want = old_step(keys, old_state, actions)
        jax.tree.map(np.testing.assert_array_equal, got, want)
        state, old_state = got[1], want[1]
        ended += int(got[3]["__all__"].sum())
    assert ended >= num_envs
