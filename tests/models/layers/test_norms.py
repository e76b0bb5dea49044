"""LayerNorm, RMSNorm and GroupNorm against their formulas in numpy (float64)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from dew.models.layers.norms import GroupNorm, LayerNorm, RMSNorm

F = 12


def inputs(shape=(2, 5, F), dtype=jnp.float32) -> jax.Array:
    return (3.0 * jax.random.normal(jax.random.key(0), shape) + 1.5).astype(dtype)


def random_param(param: nnx.Param, key: int) -> None:
    param[...] = jax.random.normal(jax.random.key(key), param.shape)


@pytest.mark.parametrize("eps", [1e-5, 1e-1])
def test_layer_norm_is_the_formula(eps):
    norm = LayerNorm(F, eps=eps, rngs=nnx.Rngs(0))
    random_param(norm.scale, 1)
    random_param(norm.bias, 2)
    x = np.asarray(inputs(), np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    scale, bias = np.asarray(norm.scale[...]), np.asarray(norm.bias[...])
    expected = (x - mean) / np.sqrt(var + eps) * scale + bias
    np.testing.assert_allclose(norm(inputs()), expected, rtol=1e-5, atol=1e-5)


def test_layer_norm_without_affine_has_no_parameters_and_unit_statistics():
    norm = LayerNorm(F, affine=False, rngs=nnx.Rngs(0))
    assert not jax.tree.leaves(nnx.state(norm, nnx.Param))
    y = np.asarray(norm(inputs()), np.float64)
    np.testing.assert_allclose(y.mean(-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(y.var(-1), 1.0, rtol=1e-4)


@pytest.mark.parametrize("unit_offset", [False, True])
def test_rms_norm_is_the_formula(unit_offset):
    eps = 1e-6
    norm = RMSNorm(F, eps=eps, unit_offset=unit_offset, rngs=nnx.Rngs(0))
    random_param(norm.scale, 3)
    x = np.asarray(inputs(), np.float64)
    w = np.asarray(norm.scale[...], np.float64)
    expected = x / np.sqrt((x**2).mean(-1, keepdims=True) + eps) * (1 + w if unit_offset else w)
    np.testing.assert_allclose(norm(inputs()), expected, rtol=1e-5, atol=1e-5)


def test_rms_norm_initial_scale_is_the_identity_scale():
    x = inputs()
    plain = RMSNorm(F, rngs=nnx.Rngs(0))  # scale initialised to 1
    offset = RMSNorm(F, unit_offset=True, rngs=nnx.Rngs(0))  # w initialised to 0: 1 + w = 1
    unscaled = RMSNorm(F, scale=False, rngs=nnx.Rngs(0))
    np.testing.assert_allclose(plain(x), unscaled(x), rtol=1e-6)
    np.testing.assert_allclose(offset(x), unscaled(x), rtol=1e-6)


def test_group_norm_is_the_formula_over_space_and_each_group():
    groups, eps = 3, 1e-5
    norm = GroupNorm(F, groups, eps=eps, rngs=nnx.Rngs(0))
    random_param(norm.scale, 4)
    random_param(norm.bias, 5)
    x = np.asarray(inputs((2, 4, 4, F)), np.float64)
    g = x.reshape(2, 16, groups, F // groups)
    mean = g.mean((1, 3), keepdims=True)
    var = g.var((1, 3), keepdims=True)
    normed = ((g - mean) / np.sqrt(var + eps)).reshape(x.shape)
    expected = normed * np.asarray(norm.scale[...]) + np.asarray(norm.bias[...])
    np.testing.assert_allclose(norm(inputs((2, 4, 4, F))), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "norm", [LayerNorm(F, rngs=nnx.Rngs(0)), RMSNorm(F, rngs=nnx.Rngs(0))], ids=["ln", "rms"]
)
def test_bfloat16_in_bfloat16_out(norm):
    x = inputs(dtype=jnp.bfloat16)
    y = norm(x)
    assert y.dtype == jnp.bfloat16
    np.testing.assert_allclose(
        y.astype(jnp.float32), norm(x.astype(jnp.float32)), rtol=2e-2, atol=2e-2
    )
