"""RoPE: a rotation (norms kept), relative (scores depend on m - n only), both layouts."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dew.models.layers.attention import apply_rope, rope_frequencies

D = 16


def vectors(seq: int, key: int = 0) -> jax.Array:
    return jax.random.normal(jax.random.key(key), (2, seq, 3, D), jnp.float32)


def rotated(x: jax.Array, positions, interleaved: bool) -> jax.Array:
    angles = rope_frequencies(jnp.asarray(positions), D, theta=1e4)
    return apply_rope(x, angles, interleaved=interleaved)


def test_frequencies_follow_the_formula():
    angles = rope_frequencies(jnp.arange(5), D, theta=100.0)
    expected = np.arange(5)[:, None] / 100.0 ** (np.arange(0, D, 2) / D)[None]
    np.testing.assert_allclose(angles, expected, rtol=1e-6)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotation_keeps_every_vectors_norm(interleaved):
    x = vectors(9)
    y = rotated(x, np.arange(9) * 7, interleaved)
    np.testing.assert_allclose(jnp.linalg.norm(y, axis=-1), jnp.linalg.norm(x, axis=-1), rtol=1e-5)
    assert not np.allclose(y[:, 1:], x[:, 1:])  # it does rotate (position 0 stays put)
    np.testing.assert_allclose(y[:, 0], x[:, 0], rtol=1e-6)


@pytest.mark.parametrize("interleaved", [False, True])
def test_scores_depend_only_on_the_relative_position(interleaved):
    q, k = vectors(1, key=1), vectors(1, key=2)

    def score(m: int, n: int) -> jax.Array:
        return jnp.einsum(
            "bshd,bshd->bsh", rotated(q, [m], interleaved), rotated(k, [n], interleaved)
        )

    for m, n in [(3, 1), (10, 2), (0, 5)]:
        for shift in (1, 17, 100):
            np.testing.assert_allclose(score(m + shift, n + shift), score(m, n), atol=1e-4)
    assert not np.allclose(score(3, 1), score(4, 1), atol=1e-3)  # ... and on it


def test_interleaved_pairs_are_the_half_split_pairs_permuted():
    # interleaved rotates (2i, 2i + 1) by angle i; half-split rotates (i, i + D/2)
    x = vectors(6)
    evens_then_odds = np.concatenate([np.arange(0, D, 2), np.arange(1, D, 2)])
    half = rotated(x[..., evens_then_odds], np.arange(6), interleaved=False)
    inter = rotated(x, np.arange(6), interleaved=True)
    np.testing.assert_allclose(inter[..., evens_then_odds], half, rtol=1e-5, atol=1e-6)


def test_per_sample_angles_broadcast_like_shared_ones():
    x = vectors(4)
    shared = rope_frequencies(jnp.arange(4), D)
    per_sample = jnp.broadcast_to(shared, (2, *shared.shape))
    np.testing.assert_allclose(apply_rope(x, per_sample), apply_rope(x, shared), rtol=1e-6)


def test_bfloat16_stays_bfloat16():
    y = apply_rope(vectors(4).astype(jnp.bfloat16), rope_frequencies(jnp.arange(4), D))
    assert y.dtype == jnp.bfloat16
