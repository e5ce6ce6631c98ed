"""The per-backend choices of the CPU-tuned paths give the same results as the defaults.

``fastrandom.HASH_BY_BACKEND`` (the unrolled hash, without its barrier, or ``jax.random``) and
``rare.BRANCH_BY_BACKEND`` (skip or select, the gather fraction) change only the work done, so
every choice must give bit-identical steps; ``benchmarks/gpu/bench.py`` times them side by side.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dilemmax
from dilemmax.envs import fastrandom, rare
from dilemmax.envs.base import subkey


@pytest.mark.slow
@pytest.mark.parametrize("choice", fastrandom.HASHES)
def test_every_hash_choice_draws_jax_randoms_numbers(choice):
    keys = jax.random.split(jax.random.key(7), 5)
    with fastrandom.using_hash(choice):
        assert fastrandom.hash_choice() == choice
        # Fresh functions under each choice: jax.jit of a module function reuses its first
        # trace, whatever the choice then, so jax.jit(fastrandom.uniform) would test one hash.
        # Each is traced once and run on every key.
        bits = jax.jit(lambda k: fastrandom.bits(k, (3, 4)))
        uniform = jax.jit(lambda k: fastrandom.uniform(k))
        second = jax.jit(lambda k: subkey(k, 1))
        for key in keys:
            np.testing.assert_array_equal(bits(key), jax.random.bits(key, (3, 4), jnp.uint32))
            assert uniform(key) == jax.random.uniform(key)
            np.testing.assert_array_equal(
                jax.random.key_data(second(key)), jax.random.key_data(jax.random.split(key)[1])
            )


def test_hash_choice_is_read_at_trace_time_and_restored():
    default = fastrandom.hash_choice()
    program = lambda: str(jax.make_jaxpr(lambda k: fastrandom.bits(k, (4,)))(jax.random.key(0)))
    with fastrandom.using_hash("jax"):
        assert "random_bits" in program()  # JAX's own draw
    with fastrandom.using_hash("unrolled"):
        assert "random_bits" not in program() and "optimization_barrier" in program()
    with fastrandom.using_hash("unbarriered"):
        assert "optimization_barrier" not in program()
    assert fastrandom.hash_choice() == default
    with pytest.raises(ValueError, match="unknown hash 'fast'"), fastrandom.using_hash("fast"):
        pass


def test_branch_policy_select_is_plain_jaxs_select():
    def f(pred, x):
        return rare.rare_cond(pred, lambda x: 2 * x, lambda x: -x, x)

    args = (jnp.array([True, False, False]), jnp.arange(3.0))
    assert "cond[" in str(jax.make_jaxpr(jax.vmap(f))(*args))
    with rare.using_branch(rare.BranchPolicy(skip=False)):
        assert "cond[" not in str(jax.make_jaxpr(jax.vmap(f))(*args))
        np.testing.assert_array_equal(jax.vmap(f)(*args), [0.0, -1.0, -2.0])
    assert rare.branch_policy() == rare.BranchPolicy()
    with pytest.raises(ValueError, match="gather_fraction"):
        rare.BranchPolicy(gather_fraction=0)


def _steps(env, num_envs: int, num_steps: int, stagger: bool):
    """Every output of ``num_steps`` steps of ``jax.vmap(env.step)`` from staggered envs, traced
    under whatever choices are in force."""

    def run(key):
        _, state = jax.vmap(env.reset)(jax.random.split(key, num_envs))
        if stagger:  # env i starts i steps into its episode: ends fall on different steps
            offset = jnp.arange(num_envs, dtype=jnp.int32) % env.max_steps
            state = state.replace(
                trial=offset // env.trial_steps, trial_step=offset % env.trial_steps, time=offset
            )
        num_actions = env.action_space(env.agents[0]).n

        def body(state, t):
            actions = {
                a: (jnp.arange(num_envs, dtype=jnp.int32) + 3 * t + i) % num_actions
                for i, a in enumerate(env.agents)
            }
            keys = jax.random.split(jax.random.fold_in(key, t), num_envs)
            out = jax.vmap(lambda k, s, a: env.step(k, s, a, full_infos=True))(keys, state, actions)
            return out[1], out

        return jax.lax.scan(body, state, jnp.arange(num_steps))

    return jax.jit(run)(jax.random.key(3))


# env id -> (options, envs, steps, stagger): the consequence game's step draws through
# fastrandom.uniform; open_harvest's envs end trials and episodes on different steps, gathered.
_CASES = {
    "moral_hazard": ({}, 8, 5, False),
    "consequence": ({}, 8, 5, False),
    "open_harvest": ({"num_trials": 2, "trial_steps": 2}, 16, 5, True),
}


@pytest.fixture(scope="module")
def case():
    """env id -> (env, envs, steps, stagger), each env built once, when a test first needs it
    (not at import: building compiles, and every worker of a run imports every test file)."""
    envs = {}

    def get(env_id):
        options, num_envs, num_steps, stagger = _CASES[env_id]
        if env_id not in envs:
            envs[env_id] = dilemmax.make(env_id, **options)
        return envs[env_id], num_envs, num_steps, stagger

    return get


@pytest.fixture(scope="module")
def default_steps(case):
    """The steps under the default choices, computed once: env id -> outputs."""
    cache = {}

    def get(env_id):
        if env_id not in cache:
            cache[env_id] = _steps(*case(env_id))
        return cache[env_id]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ["moral_hazard", "consequence"])
def test_jax_random_gives_the_unrolled_hashs_episodes(env_id, case, default_steps):
    with fastrandom.using_hash("jax"):
        got = _steps(*case(env_id))
    jax.tree.map(np.testing.assert_array_equal, got, default_steps(env_id))


@pytest.mark.slow
@pytest.mark.parametrize(
    "policy, env_ids",
    [
        (rare.BranchPolicy(skip=False), ["open_harvest", "moral_hazard"]),
        (rare.BranchPolicy(gather_fraction=2), ["open_harvest"]),
    ],
    ids=["select", "gather_half"],
)
def test_branch_policies_give_identical_episodes(policy, env_ids, case, default_steps):
    """Staggered grid envs (re-lays and resets on different steps, gathered) and the 3-step
    moral_hazard (obs built after the reset): the same steps under every policy."""
    for env_id in env_ids:
        want = default_steps(env_id)
        assert int(want[1][3]["__all__"].sum()) >= 8  # the reset branch ran
        with rare.using_branch(policy):
            got = _steps(*case(env_id))
        jax.tree.map(np.testing.assert_array_equal, got, want)
