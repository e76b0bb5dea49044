"""patchify / unpatchify are inverses and lay patches out as PatchEmbed's convolution reads
them."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from dew.models.layers.patches import PatchEmbed, patchify, unpatchify


@pytest.mark.parametrize(("height", "width", "patch"), [(8, 8, 2), (12, 8, 4), (6, 6, 1)])
def test_unpatchify_inverts_patchify(height, width, patch):
    x = jax.random.normal(jax.random.key(0), (2, height, width, 3))
    tokens = patchify(x, patch)
    assert tokens.shape == (2, (height // patch) * (width // patch), patch * patch * 3)
    np.testing.assert_array_equal(unpatchify(tokens, height, width, patch), x)


def test_patch_tokens_are_raster_ordered_patches_flattened_row_column_channel():
    x = np.arange(2 * 4 * 6 * 3).reshape(2, 4, 6, 3)
    tokens = np.asarray(patchify(jnp.asarray(x), 2))
    # token 4: patch row 1, column 1 (three patches per row)
    np.testing.assert_array_equal(tokens[:, 4], x[:, 2:4, 2:4, :].reshape(2, -1))


def test_patch_embed_is_a_dense_layer_over_patchify():
    embed = PatchEmbed(4, 3, 8, dtype=jnp.float32, rngs=nnx.Rngs(0))
    embed.conv.bias[...] = jax.random.normal(jax.random.key(1), (8,))
    x = jax.random.normal(jax.random.key(2), (2, 16, 12, 3))
    kernel = embed.conv.kernel[...].reshape(4 * 4 * 3, 8)  # (kh, kw, C) rows
    expected = patchify(x, 4) @ kernel + embed.conv.bias[...]
    np.testing.assert_allclose(embed(x), expected, rtol=1e-5, atol=1e-5)
