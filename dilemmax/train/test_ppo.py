"""Smoke tests of the trainer on a tiny contract env (no registered game needed).

The toy game: each of 2 agents sees its own hidden target (one of 3) and scores ``bonus`` for
naming it; 2 steps per episode; action 3 is never legal. A learner that reads its observation
reaches the maximum return 2 * bonus; a uniform policy over the legal actions gets 2 * bonus / 3.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from dilemmax.agents import checkpoint
from dilemmax.agents.networks import masked_categorical
from dilemmax.agents.transforms import LEARNER_TRANSFORMS
from dilemmax.envs.base import MultiAgentEnv
from dilemmax.envs.spaces import Box, Discrete
from dilemmax.train.configure import make_config
from dilemmax.train.ppo import Trainer, make_train
from dilemmax.train.run import TrainingRun


@struct.dataclass
class ToyConfig:
    target: jax.Array  # int32[A]
    bonus: jax.Array  # float32[]


@struct.dataclass
class ToyState:
    config: ToyConfig
    step: jax.Array  # int32[]


class ToyEnv(MultiAgentEnv):
    max_steps = 2

    def __init__(self, num_agents: int = 2, grid: bool = False):
        super().__init__(num_agents)
        self.grid = grid

    def sample_config(self, key):
        target = jax.random.randint(key, (self.num_agents,), 0, 3)
        return ToyConfig(target.astype(jnp.int32), jnp.float32(1.0))

    def reset_to(self, key, config):
        state = ToyState(config, jnp.int32(0))
        return self.get_obs(state), state

    def get_obs(self, state):
        out = {}
        for i, a in enumerate(self.agents):
            if self.grid:
                view = jnp.stack(
                    [
                        jnp.full((3, 3), state.config.target[i] + 1, jnp.uint8),
                        jnp.full((3, 3), state.step, jnp.uint8),
                    ],
                    -1,
                )
                out[a] = view
            else:
                one_hot = jax.nn.one_hot(state.config.target[i], 3)
                out[a] = jnp.append(one_hot, state.step / 2.0).astype(jnp.float32)
        return out

    def step_env(self, key, state, actions):
        rewards = {
            a: jnp.where(actions[a] == state.config.target[i], state.config.bonus, 0.0).astype(
                jnp.float32
            )
            for i, a in enumerate(self.agents)
        }
        state = state.replace(step=state.step + 1)
        done = state.step >= 2
        dones = {a: done for a in self.agents} | {"__all__": done}
        return (
            self.get_obs(state),
            state,
            rewards,
            dones,
            {"hit": jnp.stack(list(rewards.values()))},
        )

    def action_mask(self, state):
        return {a: jnp.array([True, True, True, False]) for a in self.agents}

    def observation_space(self, agent):
        if self.grid:
            return Box(0, 3, (3, 3, 2), jnp.uint8)
        return Box(0.0, 1.0, (4,), jnp.float32)

    def action_space(self, agent):
        return Discrete(4)

    def scripted_policies(self):
        def oracle(key, observation):
            return observation.state.config.target[observation.agent_index].astype(jnp.int32)

        return {"oracle": oracle}


class TracedOnlyToyEnv(ToyEnv):
    """The toy env, refusing to draw or reset outside a trace."""

    def sample_config(self, key):
        assert isinstance(key, jax.core.Tracer), "sample_config ran eagerly"
        return super().sample_config(key)

    def reset_to(self, key, config):
        assert isinstance(key, jax.core.Tracer), "reset_to ran eagerly"
        return super().reset_to(key, config)


def toy_config(**overrides):
    values = dict(
        env="toy",
        total_timesteps=16 * 4 * 10,
        num_envs=16,
        num_steps=4,
        num_minibatches=2,
        update_epochs=2,
        log_every=5,
        checkpoint_every=1,
        eval_every=2,
        eval_episodes=4,
        progress=False,
        lr=1e-2,
        hidden=32,
        num_layers=1,
        conv_features=[8],
    )
    values.update(overrides)
    return make_config("toy", overrides=values)


def test_masked_categorical_never_samples_illegal_actions_and_stays_finite():
    logits = jnp.array([[5.0, 0.0, 0.0, 9.0]])
    mask = jnp.array([[True, True, False, False]])
    dist = masked_categorical(logits, mask)
    samples = dist.sample(seed=jax.random.PRNGKey(0), sample_shape=(200,))
    assert set(np.unique(samples).tolist()) <= {0, 1}
    assert np.isfinite(dist.entropy()).all()
    probs = np.asarray(dist.probs)[0]
    np.testing.assert_allclose(probs[:2], jax.nn.softmax(jnp.array([5.0, 0.0])), rtol=1e-6)
    assert probs[2] == 0.0 and probs[3] == 0.0


@pytest.fixture(scope="module")
def toy_trainer():
    """(trainer, its jitted update) of the default toy config: one update program for the tests
    that run it."""
    trainer = Trainer(toy_config(), env=ToyEnv())
    return trainer, jax.jit(trainer.update)


@pytest.mark.parametrize(
    ("algo", "shared", "grid"),
    [("ippo", True, False), ("mappo", False, True)],
)
@pytest.mark.slow
def test_update_shapes_and_finite_losses(algo, shared, grid, request):
    if (algo, shared, grid) == ("ippo", True, False):  # the default toy config
        trainer, update = request.getfixturevalue("toy_trainer")
    else:
        # Building the trainer reads the env's shapes by tracing (the MAPPO critic's global
        # state, the configuration template): run eagerly, the env compiled each of its ops as a
        # program of its own at every start (some 170 for open_harvest).
        env = TracedOnlyToyEnv(grid=grid)
        trainer = Trainer(toy_config(algo=algo, shared_params=shared), env=env)
        update = jax.jit(trainer.update)
    state = jax.jit(trainer.init)(jax.random.PRNGKey(0))
    new_state, metrics = update(state)
    assert int(new_state.update) == 1
    for name in ("loss/total", "loss/actor", "loss/value", "loss/entropy"):
        assert np.isfinite(metrics[name]), name
    assert metrics["return/per_agent"].shape == (2,)
    # Every episode lasts 2 steps: 4 steps x 16 envs finish 32 episodes.
    assert int(metrics["episodes"]) == 32
    leaves = jax.tree.leaves(new_state.params["actor"])
    if not shared:  # one parameter set per learner, stacked
        assert all(x.shape[0] == 2 for x in leaves)
    changed = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), state.params, new_state.params)
    assert any(jax.tree.leaves(changed))


@pytest.mark.slow
def test_make_train_learns_the_toy_game_and_vmaps_over_seeds_and_overrides():
    config = toy_config(total_timesteps=16 * 4 * 40, env_config={"bonus": 1.0})
    train = make_train(config, env=ToyEnv())
    trainer = train.trainer
    keys = jax.random.split(jax.random.PRNGKey(1), 2)
    bonus = {"bonus": jnp.array([1.0, 2.0], jnp.float32)}
    state, metrics = jax.jit(jax.vmap(train))(keys, bonus)
    final = np.asarray(metrics["return/mean"][:, -5:].mean(1))
    # Random play scores 2 * bonus / 3; the learned policy should be near 2 * bonus.
    np.testing.assert_array_less([1.6, 3.2], final)
    # The trained policy, run through the env's metrics path, also hits its targets.
    ev = jax.jit(jax.vmap(lambda p, c, k: trainer.evaluate(p, c, k, greedy=True)))(
        state.params, state.env_config, keys
    )
    np.testing.assert_allclose(np.asarray(ev["return"]).mean((1, 2)), [2.0, 4.0])


@pytest.mark.slow
def test_partner_seats_play_the_scripted_policy_and_only_learners_train():
    config = toy_config(learners=[1], partner_policy="oracle", reward="individual")
    trainer = Trainer(config, env=ToyEnv())
    state = jax.jit(trainer.init)(jax.random.PRNGKey(0))
    _, metrics = jax.jit(trainer.update)(state)
    per_agent = np.asarray(metrics["return/per_agent"])
    assert per_agent[0] == pytest.approx(2.0)  # the oracle partner always hits
    assert per_agent[1] < 1.9


@pytest.mark.slow
def test_update_is_deterministic_and_jit_equals_no_jit(toy_trainer):
    trainer, update = toy_trainer  # one program, run twice: the same state, the same result
    state = trainer.init(jax.random.PRNGKey(3))
    a, _ = update(state)
    b, _ = update(state)
    c, _ = trainer.update(state)
    for x, y, z in zip(
        jax.tree.leaves(a.params), jax.tree.leaves(b.params), jax.tree.leaves(c.params), strict=True
    ):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_allclose(x, z, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_checkpoint_round_trips_and_resume_is_bit_exact(tmp_path):
    config = toy_config(total_timesteps=16 * 4 * 5 * 4)  # 4 chunks of 5 updates
    # One run object (its programs compiled once) trains straight, then "crashes" after two
    # chunks in another folder; a fresh one resumes, as a new process would.
    crashed = TrainingRun(config, tmp_path / "straight", env=ToyEnv())
    straight = crashed.train()
    crashed.dir = tmp_path / "resumed"
    crashed.train(max_chunks=2)  # "crash" after two chunks
    path = checkpoint.latest_checkpoint(tmp_path / "resumed")
    assert path is not None and path.name == "ckpt_000001.msgpack"

    # The file restores to exactly the state that was saved.
    template = crashed.template()
    restored, meta = checkpoint.restore(path, template)
    assert meta == {"chunk": 1, "update": 10}
    again = checkpoint.from_bytes(template, checkpoint.to_bytes(restored))[0]
    for x, y in zip(jax.tree.leaves(restored), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(x, y)

    resumed = TrainingRun(config, tmp_path / "resumed", env=ToyEnv()).train(resume=True)
    for x, y in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed), strict=True):
        np.testing.assert_array_equal(x, y)
    records = TrainingRun(config, tmp_path / "resumed", env=ToyEnv()).records()
    assert [r["chunk"] for r in records] == [0, 1, 2, 3]
    assert (tmp_path / "resumed" / "curve.png").stat().st_size > 0
    assert "eval/return" in records[1]


def script_everything(policy):
    """A learner transform that never lets the learner choose (always action 0)."""
    return lambda key, observation: jnp.int32(0)


@pytest.mark.slow
def test_steps_scripted_by_a_learner_transform_carry_no_policy_gradient(monkeypatch):
    # Allowed for this test only: the allowlist is what the docs and --help list.
    monkeypatch.setitem(
        LEARNER_TRANSFORMS, "dilemmax.train.test_ppo:script_everything", script_everything
    )
    config = toy_config(learner_transform="dilemmax.train.test_ppo:script_everything")
    trainer = Trainer(config, env=ToyEnv())
    state = jax.jit(trainer.init)(jax.random.PRNGKey(0))
    new_state, metrics = jax.jit(trainer.update)(state)
    same = jax.tree.map(lambda a, b: bool(jnp.all(a == b)), state.params, new_state.params)
    assert all(jax.tree.leaves(same["actor"]))  # nothing the actor chose: no actor update
    assert not all(jax.tree.leaves(same["critic"]))  # the critic still learns values
    # Scripted action 0 hits target 0 only: a third of the maximum on average.
    assert float(metrics["return/mean"]) < 1.5
