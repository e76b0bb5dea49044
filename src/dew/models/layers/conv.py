"""Convolution helpers of the UNet families: a square SAME convolution and ×2 upsampling."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx


def conv(cin: int, cout: int, kernel: int, *, rngs: nnx.Rngs, dtype, stride: int = 1) -> nnx.Conv:
    """A kernel×kernel convolution with bias and SAME padding (stride 2: a downsampling)."""
    return nnx.Conv(
        cin, cout, (kernel, kernel), strides=(stride, stride), padding="SAME",
        dtype=dtype, rngs=rngs,
    )  # fmt: skip


def upsample_nearest(x: jax.Array) -> jax.Array:
    """[B, H, W, C] -> [B, 2H, 2W, C], each pixel repeated 2×2."""
    return jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)
