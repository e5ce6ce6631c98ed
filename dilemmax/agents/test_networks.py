"""Networks: the two convolution implementations compute one function, with one parameter tree."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dilemmax.agents.networks import Conv3x3, GridEncoder, NetworkSpec, resolve_conv_impl


def _loss(impl, params, x):
    return jnp.tanh(Conv3x3(5, impl).apply(params, x)).sum()


@pytest.mark.slow
def test_im2col_equals_xla_convolution_values_and_gradients():
    x = jax.random.normal(jax.random.PRNGKey(0), (3, 7, 6, 4))
    params = Conv3x3(5, "xla").init(jax.random.PRNGKey(1), x)
    params = jax.tree.map(lambda p: p + 0.1, params)  # a non-zero bias too
    out = {i: Conv3x3(5, i).apply(params, x) for i in ("xla", "im2col")}
    np.testing.assert_allclose(out["im2col"], out["xla"], rtol=1e-5, atol=1e-5)
    grads = {i: jax.grad(_loss, argnums=(1, 2))(i, params, x) for i in ("xla", "im2col")}
    for a, b in zip(jax.tree.leaves(grads["im2col"]), jax.tree.leaves(grads["xla"]), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_conv3x3_matches_flax_conv_with_the_same_parameters():
    # Same parameter names and shapes as flax.linen.Conv(F, (3, 3), padding="SAME").
    x = jax.random.normal(jax.random.PRNGKey(2), (2, 5, 5, 3))
    params = nn.Conv(4, (3, 3), padding="SAME").init(jax.random.PRNGKey(3), x)
    ours = Conv3x3(4, "im2col")
    assert jax.tree.map(jnp.shape, ours.init(jax.random.PRNGKey(0), x)) == jax.tree.map(
        jnp.shape, params
    )
    expected = nn.Conv(4, (3, 3), padding="SAME").apply(params, x)
    np.testing.assert_allclose(ours.apply(params, x), expected, rtol=1e-5, atol=1e-5)


def test_corner_cell_sees_only_its_in_bounds_neighbours():
    # A kernel of ones sums the 3x3 neighbourhood: 4 cells at a corner, 6 on an edge, 9 inside.
    x = jnp.ones((1, 4, 4, 1))
    params = {"params": {"kernel": jnp.ones((3, 3, 1, 1)), "bias": jnp.zeros(1)}}
    out = Conv3x3(1, "im2col").apply(params, x)[0, :, :, 0]
    assert out[0, 0] == 4 and out[0, 1] == 6 and out[1, 1] == 9


@pytest.mark.slow
def test_grid_encoder_checkpoint_runs_under_either_implementation():
    x = jax.random.randint(jax.random.PRNGKey(4), (2, 11, 11, 3), 0, 6).astype(jnp.uint8)
    encoders = {
        i: GridEncoder(NetworkSpec(conv_features=(4, 8), conv_impl=i), 6, 3)
        for i in ("xla", "im2col")
    }
    params = encoders["xla"].init(jax.random.PRNGKey(5), x)
    assert "Conv_0" in params["params"] and "Conv_1" in params["params"]
    np.testing.assert_allclose(
        encoders["im2col"].apply(params, x), encoders["xla"].apply(params, x), atol=1e-5
    )


def test_conv_impl_choice():
    assert resolve_conv_impl("auto") == ("im2col" if jax.default_backend() == "cpu" else "xla")
    assert resolve_conv_impl("xla") == "xla"
    with pytest.raises(ValueError, match="unknown conv_impl 'cudnn'"):
        resolve_conv_impl("cudnn")
