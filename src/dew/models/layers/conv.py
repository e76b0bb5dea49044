"""The UNet families' convolutional pieces: a square SAME convolution, ×2 upsampling and
the time-conditioned residual block."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from dew.models.layers.norms import GroupNorm


def conv(cin: int, cout: int, kernel: int, *, rngs: nnx.Rngs, dtype, stride: int = 1) -> nnx.Conv:
    """A kernel×kernel convolution with bias and SAME padding (stride 2: a downsampling)."""
    return nnx.Conv(
        cin, cout, (kernel, kernel), strides=(stride, stride), padding="SAME",
        dtype=dtype, rngs=rngs,
    )  # fmt: skip


def upsample_nearest(x: jax.Array) -> jax.Array:
    """[B, H, W, C] -> [B, 2H, 2W, C], each pixel repeated 2×2."""
    return jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)


class ResnetBlock(nnx.Module):
    """GroupNorm, SiLU, conv 3×3, + Dense(temb→cout), GroupNorm, SiLU, conv 3×3, plus the
    input (through a 1×1 conv where the width changes).

    `silu_temb`: SiLU on the time embedding before its Dense (unet_2d_condition, whose
    embedding ends on a Dense; unet's ends on a GELU already).
    """

    def __init__(
        self, cin: int, cout: int, temb_features: int, *, groups: int, eps: float,
        rngs: nnx.Rngs, dtype, silu_temb: bool = False,
    ):  # fmt: skip
        self.silu_temb = silu_temb
        self.norm1 = GroupNorm(cin, groups, eps=eps, rngs=rngs)
        self.conv1 = conv(cin, cout, 3, rngs=rngs, dtype=dtype)
        self.time_proj = nnx.Linear(temb_features, cout, dtype=dtype, rngs=rngs)
        self.norm2 = GroupNorm(cout, groups, eps=eps, rngs=rngs)
        self.conv2 = conv(cout, cout, 3, rngs=rngs, dtype=dtype)
        self.shortcut = conv(cin, cout, 1, rngs=rngs, dtype=dtype) if cin != cout else None

    def __call__(self, x: jax.Array, temb: jax.Array) -> jax.Array:
        h = self.conv1(jax.nn.silu(self.norm1(x)))
        h = h + self.time_proj(jax.nn.silu(temb) if self.silu_temb else temb)[:, None, None, :]
        h = self.conv2(jax.nn.silu(self.norm2(h)))
        return h + (x if self.shortcut is None else self.shortcut(x))
