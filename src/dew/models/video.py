"""video_dit: simple_dit over clips, each layer a spatial and a temporal modulated block.

The DiT pieces (patch embedding, fixed sin-cos positions, time embedding, text path,
adaLN-Zero block, head) are dew.models.dit's. A spatial block attends over the tokens of
one frame ([B·T, N, d], RoPE on the raster index), a temporal block over the frames of one
token position ([B·N, T, d], RoPE on the frame index). Every block is modulated by the same
`c`, repeated per frame for spatial blocks and per token column for temporal ones: the
published figure counts the temporal modulation on B·N rows (about 22 of its 760 GFLOP).
Call: `model(x [B,T,H,W,C], t [B], text [B,77,768], text_mask [B,77]) -> [B,T,H,W,C] fp32`.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
from flax import nnx
from pydantic import PositiveInt

from dew.models.dit import SMOKE_GEOMETRY, DiTBase, DiTBlock, DiTConfig
from dew.models.layers.attention import rope_frequencies
from dew.models.layers.patches import unpatchify
from dew.models.registry import register


class VideoDiTConfig(DiTConfig):
    """`depth` counts layers; each is a spatial and a temporal block."""

    frames: PositiveInt = 8
    depth: PositiveInt = 4

    presets: ClassVar = {
        "small": {},
        "cpu-smoke": {**SMOKE_GEOMETRY, "frames": 4, "depth": 2},
    }


@register("video_dit", VideoDiTConfig)
class VideoDiT(DiTBase):
    def __init__(self, config: VideoDiTConfig, *, rngs: nnx.Rngs):
        super().__init__(config, rngs=rngs)
        self.spatial = nnx.List([DiTBlock(config, rngs=rngs) for _ in range(config.depth)])
        self.temporal = nnx.List([DiTBlock(config, rngs=rngs) for _ in range(config.depth)])

    def __call__(self, x: jax.Array, t: jax.Array, text: jax.Array, text_mask: jax.Array):
        config = self.config
        batch, frames, height, width, channels = x.shape
        frames_flat = x.reshape(batch * frames, height, width, channels)
        tokens = self.embed_patches(frames_flat)  # [B·T, N, d]
        n, d = tokens.shape[1:]

        c = self.condition(t, text, text_mask)  # [B, d]
        c_per_frame = jnp.repeat(c, frames, axis=0)  # [B·T, d]
        c_per_column = jnp.repeat(c, n, axis=0)  # [B·N, d]
        head_dim = config.width // config.heads
        spatial_angles = rope_frequencies(jnp.arange(n), head_dim, config.rope_theta)
        temporal_angles = rope_frequencies(jnp.arange(frames), head_dim, config.rope_theta)

        for spatial, temporal in zip(self.spatial, self.temporal, strict=True):
            tokens = spatial(tokens, c_per_frame, spatial_angles)
            columns = tokens.reshape(batch, frames, n, d).transpose(0, 2, 1, 3)
            columns = temporal(columns.reshape(batch * n, frames, d), c_per_column, temporal_angles)
            tokens = columns.reshape(batch, n, frames, d).transpose(0, 2, 1, 3)
            tokens = tokens.reshape(batch * frames, n, d)

        out = self.head(self.head_norm(tokens)).astype(jnp.float32)  # [B·T, N, p·p·C]
        return unpatchify(out, height, width, config.patch).reshape(x.shape)
