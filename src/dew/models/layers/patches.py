"""Images <-> tokens: the patch embedding, and patchify / unpatchify without parameters."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx


def patchify(x: jax.Array, patch: int) -> jax.Array:
    """[B, H, W, C] -> [B, (H/p)(W/p), p·p·C]: raster order of patches, each (row, col, C)."""
    b, h, w, c = x.shape
    x = x.reshape(b, h // patch, patch, w // patch, patch, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(b, (h // patch) * (w // patch), patch * patch * c)


def unpatchify(tokens: jax.Array, height: int, width: int, patch: int) -> jax.Array:
    """[B, (H/p)(W/p), p·p·C] -> [B, H, W, C]: the inverse of `patchify`."""
    b = tokens.shape[0]
    channels = tokens.shape[-1] // (patch * patch)
    out = tokens.reshape(b, height // patch, width // patch, patch, patch, channels)
    return out.transpose(0, 1, 3, 2, 4, 5).reshape(b, height, width, channels)


class PatchEmbed(nnx.Module):
    """A p×p convolution with stride p (and bias): image [B, H, W, C] -> tokens [B, H/p·W/p, d]."""

    def __init__(
        self, patch: int, channels: int, features: int, *, rngs: nnx.Rngs, dtype=jnp.bfloat16
    ):
        self.conv = nnx.Conv(
            channels, features, (patch, patch), strides=(patch, patch), padding="VALID",
            dtype=dtype, rngs=rngs,
        )  # fmt: skip

    def __call__(self, x: jax.Array) -> jax.Array:
        y = self.conv(x)
        return y.reshape(y.shape[0], -1, y.shape[-1])
