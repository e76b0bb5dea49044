"""The DiT family: published parameter counts and GFLOP/step, S5 against its recurrence."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from dew.models.dit import DiTConfig
from dew.models.layers.ssm import S5, BidirectionalS5
from dew.train.trainer import Trainer

# (architecture, published params, published GFLOP/step) at batch 16, 64×64×3.
PUBLISHED = [
    ("simple_dit", 19_835_568, 292.9),
    pytest.param("simple_udit", 23_381_424, 363.1, marks=pytest.mark.slow),
    pytest.param("hybrid_dit", 19_344_048, 244.6, marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("architecture", "params", "gflop"), PUBLISHED)
def test_small_preset_matches_published_params_and_gflop(architecture, params, gflop):
    trainer = Trainer(architecture, preset="small", compilation_cache_dir=None)
    assert trainer.param_counts == {"backbone": params, "condition": 0}
    trainer.compile(trainer.example_batch(16))  # compiled, not run
    assert trainer.flops / 1e9 == pytest.approx(gflop, rel=1e-3)


def test_heads_not_dividing_width_is_an_error_naming_both():
    with pytest.raises(ValueError, match="width 384 is not divisible by heads 5"):
        DiTConfig(heads=5)


def test_s5_scan_matches_the_sequential_recurrence():
    layer = S5(8, 4, rngs=nnx.Rngs(0))
    u = jax.random.normal(jax.random.key(1), (2, 10, 8), jnp.float32)
    a_bar, b_bar = layer.discretize()
    c = np.asarray(layer.c_real[...]) + 1j * np.asarray(layer.c_imag[...])
    x = np.zeros((2, 4), np.complex64)
    expected = []
    for k in range(u.shape[1]):
        x = np.asarray(a_bar) * x + np.asarray(u[:, k]) @ np.asarray(b_bar).T
        expected.append((x @ c.T).real + np.asarray(layer.d[...]) * np.asarray(u[:, k]))
    np.testing.assert_allclose(layer(u), np.stack(expected, axis=1), rtol=1e-4, atol=1e-5)


def test_s5_parameter_count_follows_its_formula():
    d, p = 384, 64
    count = lambda m: sum(x.size for x in jax.tree.leaves(nnx.state(m, nnx.Param)))
    assert count(S5(d, p, rngs=nnx.Rngs(0))) == 3 * p + 4 * p * d + d == 98_880
    bidirectional = BidirectionalS5(d, p, rngs=nnx.Rngs(0))
    assert count(bidirectional) == 2 * 98_880 + 2 * d * d + d


def test_bidirectional_s5_sees_the_future():
    layer = BidirectionalS5(8, 4, rngs=nnx.Rngs(0), dtype=jnp.float32)
    u = jax.random.normal(jax.random.key(1), (1, 6, 8), jnp.float32)
    changed = u.at[:, -1].add(1.0)
    # the first output depends on the last input through the backward scan
    assert not np.allclose(layer(u)[:, 0], layer(changed)[:, 0])
