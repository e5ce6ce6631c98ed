"""Step edge cases in every game: actions that are not whole numbers are invalid moves (not
truncated into real ones), and a finished episode stays frozen under ``step_env`` (issue #11)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dilemmax
from dilemmax.agents.arena import Arena, PolicyError, policy_action
from dilemmax.envs.guards import INVALID_ACTION, action_index

# Small pools and one short trial keep the grid games cheap to build and to play to the end.
GAMES = {
    "consequence": {},
    "moral_hazard": {},
    "open_cleanup": {
        "num_layouts": 4,
        "num_rules": 4,
        "num_trials": 1,
        "trial_steps": 3,
    },
    "open_harvest": {"num_layouts": 4, "num_rules": 4, "num_trials": 1, "trial_steps": 3},
}
NOT_WHOLE = [2.7, 0.5, -0.25, np.nan, np.inf, -np.inf, 1e10, -1e10]


@pytest.fixture(scope="module", params=list(GAMES))
def game(request):
    """(env, its jitted reset, a jitted step over float32 actions of shape [A], vmapped over a
    batch of them), shared by both tests of a game."""
    env = dilemmax.make(request.param, **GAMES[request.param])

    def step(key, state, acts):
        return env.step_env(key, state, {a: acts[i] for i, a in enumerate(env.agents)})

    batched = jax.jit(jax.vmap(step, in_axes=(None, None, 0)))
    return env, jax.jit(env.reset), batched


@jax.jit
def _rows(out, i):
    """Row ``i`` of every leaf: one program (per tree) for every row, where indexing each leaf
    eagerly compiled one program per leaf shape."""
    return jax.tree.map(lambda x: x[i], out)


def _equal(a, b) -> bool:
    leaves = zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    return all(np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True) for x, y in leaves)


@pytest.mark.slow
def test_non_whole_actions_play_exactly_like_an_out_of_range_action(game):
    env, reset, step = game
    _, state = reset(jax.random.key(0))
    n = env.num_agents
    # Row 0: agent_0 plays -1 (out of range, flagged invalid); the others play 0 in every row.
    acts = np.zeros((1 + len(NOT_WHOLE), n), np.float32)
    acts[0, 0] = INVALID_ACTION
    acts[1:, 0] = np.asarray(NOT_WHOLE, np.float32)
    out = step(jax.random.key(1), state, jnp.asarray(acts))
    reference = _rows(out, 0)
    for row, value in enumerate(NOT_WHOLE, 1):
        assert _equal(_rows(out, row), reference), f"{env.name}: action {value} was played"


@pytest.mark.slow
def test_finished_episode_is_frozen(game):
    env, reset, step = game
    _, state = reset(jax.random.key(2))
    key = jax.random.key(3)
    zeros = jnp.zeros((1, env.num_agents), jnp.float32)
    for _ in range(env.max_steps):
        key, sub = jax.random.split(key)
        _, state, _, dones, _ = _rows(step(sub, state, zeros), 0)
    assert bool(dones["__all__"])
    for _ in range(2):
        key, sub = jax.random.split(key)
        _, after, rewards, dones, _ = _rows(step(sub, state, zeros + 1), 0)
        assert _equal(after, state), f"{env.name} changed after its episode ended"
        assert all(float(rewards[a]) == 0.0 for a in env.agents)
        assert all(bool(dones[a]) for a in env.agents) and bool(dones["__all__"])


@pytest.mark.parametrize(
    ("action", "index"),
    [
        (3, 3),
        (3.0, 3),
        (np.float64(4.0), 4),
        (2.7, -1),
        (float("nan"), -1),
        (float("inf"), -1),
        (2**40, -1),
        (np.int64(2**33), -1),
        (np.array([5]), 5),
        (jnp.array([2], jnp.int32), 2),
        (jnp.float32(jnp.nan), -1),
        (np.bool_(True), 1),
        ("3", -1),
        (None, -1),
    ],
)
def test_action_index(action, index):
    assert int(action_index(action)) == index


@settings(max_examples=100, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True, width=32))
def test_action_index_of_any_float_is_its_whole_value_or_invalid(x):
    got = int(action_index(np.float32(x)))
    if np.isfinite(x) and float(x).is_integer() and abs(x) < 2**31:
        assert got == int(x)
    else:
        assert got == INVALID_ACTION


# ----------------------------------------------------------------------------- arena policies
@pytest.mark.parametrize("garbage", [None, "2", 1.5, [1, 2], object(), np.array([1.0])])
def test_policy_returning_garbage_is_refused_naming_the_seat(garbage):
    with pytest.raises(PolicyError, match="seat agent_1 returned"):
        policy_action(garbage, "agent_1")


def test_arena_names_the_seat_whose_python_policy_returns_none():
    from dilemmax.agents.policy import GENERIC_POLICIES

    env = dilemmax.make("toy")

    def forgetful(key, observation):
        return None

    forgetful.jittable = False  # a Python policy (a language model, say): the step loop

    arena = Arena(env, {"agent_0": GENERIC_POLICIES["random"], "agent_1": forgetful})
    with pytest.raises(PolicyError, match="seat agent_1 returned None"):
        arena.run(jax.random.key(0), 1)
    assert int(policy_action(np.int64(7), "agent_0")) == 7  # out of range: the env flags it


@pytest.mark.slow
@pytest.mark.parametrize(
    "returned, named",
    [(lambda k: None, "None"), (lambda k: jnp.float32(1.0), "float32"),
     (lambda k: jnp.zeros(2, jnp.int32), "int32[2]"), (lambda k: jnp.bool_(True), "bool")],
)  # fmt: skip
def test_arena_names_the_seat_whose_jittable_policy_returns_no_action(returned, named):
    """The JAX path (every seat jittable, all episodes in one program) checks the traced type:
    the error names the seat and what came back, instead of a cast or a tracing error."""
    from dilemmax.agents.policy import GENERIC_POLICIES

    env = dilemmax.make("toy")
    arena = Arena(env, {"agent_0": GENERIC_POLICIES["random"], "agent_1": lambda k, o: returned(k)})
    with pytest.raises(PolicyError, match=f"seat agent_1 returned {re.escape(named)}"):
        arena.run(jax.random.key(0), 1)
    # One-element integer arrays of any width are actions.
    fine = Arena(env, {"agent_0": GENERIC_POLICIES["random"],
                       "agent_1": lambda k, o: jnp.zeros((1,), jnp.int8)})  # fmt: skip
    assert fine.run(jax.random.key(0), 1).metrics
