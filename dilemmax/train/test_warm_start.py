"""Warm start (``init_from``): a fresh run takes another run's parameters, as a curriculum's next
stage does, and refuses a network of other shapes with an error naming the parameter."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from dilemmax.agents import checkpoint
from dilemmax.runlock import RunFolderError
from dilemmax.train.run import TrainingRun
from dilemmax.train.test_ppo import ToyEnv, toy_config


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A toy run trained for one chunk: (folder, its saved actor and critic parameters)."""
    folder = tmp_path_factory.mktemp("source")
    TrainingRun(toy_config(eval_every=0), folder, env=ToyEnv()).train(max_chunks=1)
    raw = checkpoint.read_raw(checkpoint.latest_checkpoint(folder))
    return folder, raw["runner_state"]["params"]


def _leaves(tree):
    return [np.asarray(x) for x in jax.tree.leaves(tree)]


@pytest.mark.slow
def test_a_warm_started_run_begins_from_the_source_parameters_with_a_fresh_optimiser(
    source, tmp_path
):
    folder, saved = source
    run = TrainingRun(toy_config(init_from=str(folder), seed=7), tmp_path / "b", env=ToyEnv())
    state = run.train(max_chunks=0)  # set up, train nothing
    for ours, theirs in zip(_leaves(state.params), _leaves(saved), strict=True):
        np.testing.assert_array_equal(ours, theirs)
    fresh = run.init_state()  # seed 7's own initialisation differs from the trained source
    assert any(
        not np.array_equal(a, b) for a, b in zip(_leaves(fresh.params), _leaves(saved), strict=True)
    )
    # Adam starts again: its step count is zero and its moments are zero.
    for ours, new in zip(_leaves(state.opt_state), _leaves(fresh.opt_state), strict=True):
        np.testing.assert_array_equal(ours, new)


@pytest.mark.slow
def test_one_source_seed_seeds_every_seed_of_the_new_run(source, tmp_path):
    folder, saved = source
    config = toy_config(init_from=str(folder), num_seeds=2)
    state = TrainingRun(config, tmp_path / "c", env=ToyEnv()).train(max_chunks=0)
    for ours, theirs in zip(_leaves(state.params), _leaves(saved), strict=True):
        np.testing.assert_array_equal(ours, np.concatenate([theirs, theirs]))


@pytest.mark.slow
def test_a_network_of_other_shapes_is_refused_naming_the_parameter(source, tmp_path):
    folder, _ = source
    config = toy_config(init_from=str(folder), hidden=7)
    with pytest.raises(RunFolderError, match=r"parameter .* has shape .* the networks differ"):
        TrainingRun(config, tmp_path / "d", env=ToyEnv()).train(max_chunks=0)


def test_a_folder_without_checkpoints_is_refused(tmp_path):
    config = toy_config(init_from=str(tmp_path / "nothing"))
    with pytest.raises(RunFolderError, match="init_from=.*no usable checkpoint"):
        TrainingRun(config, tmp_path / "e", env=ToyEnv()).train(max_chunks=0)
