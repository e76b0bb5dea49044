"""Convolutional UNets on pixels: unet (EDM) and unet_3d (the same UNet per frame plus
temporal attention). Call: `model(x, t [B], text [B,77,768], text_mask [B,77])` -> same
shape as x, fp32; x is [B, H, W, C] (unet) or [B, T, H, W, C] (unet_3d).

The structure is the published one (the rule its parameter count was measured with; see
docs/research/benchmark-parity.md for how the figures are checked):

- stem: conv 3×3 to depths[0].
- down level i: `res_blocks` residual blocks at the width the level is entered with
  (depths[i - 1]; depths[0] for the first), cross-attention after the last of them where
  `attention_heads[i]` is set, then a stride-2 conv 3×3 to depths[i] (none on the last
  level): only the downsampling convolution moves to the level's width.
- middle: residual block to depths[-1], cross-attention, residual block.
- up level i (deepest first): `res_blocks` residual blocks on [x, skip] to the level's
  depth, cross-attention after the last, then nearest ×2 and a conv 3×3 to `depths[-i]`
  (depths[0] for i = 0; none on the last level).
- final conv 3×3, a residual block on [x, the stem's skip], GroupNorm, SiLU, conv 3×3 out.

unet_3d adds, after each down level's blocks, the middle's attention and each up level's
blocks, a temporal block: attention over the frames of every pixel.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
import pydantic
from flax import nnx
from pydantic import PositiveFloat, PositiveInt

from dew.config import ModelConfig
from dew.models.layers.attention import Attention, key_mask, rope_frequencies
from dew.models.layers.conv import ResnetBlock, conv, upsample_nearest
from dew.models.layers.embeddings import fourier_features, fourier_frequencies
from dew.models.layers.norms import GroupNorm, RMSNorm
from dew.models.registry import register


class UNetConfig(ModelConfig):
    """`frames` and `temporal_heads` are unet_3d's (None here: no temporal blocks)."""

    objective: ClassVar[str] = "edm"

    image_size: PositiveInt = 64
    channels: PositiveInt = 3
    depths: tuple[PositiveInt, ...] = pydantic.Field((64, 128, 256), min_length=1)
    # Cross-attention heads per level (None: no attention); the middle uses the last level's.
    attention_heads: tuple[PositiveInt | None, ...] = (None, 4, 4)
    res_blocks: PositiveInt = 2
    emb_features: PositiveInt = 256
    norm_groups: PositiveInt = 8
    norm_eps: PositiveFloat = 1e-4
    temporal_heads: None = None

    presets: ClassVar = {
        "small": {},
        "cpu-smoke": {
            "image_size": 16,
            "depths": (16, 32),
            "attention_heads": (None, 2),
            "emb_features": 32,
        },
    }

    @property
    def temporal(self) -> bool:
        """Whether the UNet runs per frame with temporal blocks (unet_3d)."""
        return self.frames is not None

    @pydantic.model_validator(mode="after")
    def _check_levels(self):
        if len(self.attention_heads) != len(self.depths):
            raise ValueError(
                f"attention_heads {self.attention_heads} needs one entry per level of depths "
                f"{self.depths}"
            )
        return self


class UNet3DConfig(UNetConfig):
    frames: PositiveInt = 8
    temporal_heads: PositiveInt = 4

    presets: ClassVar = {
        "small": {},
        "cpu-smoke": {
            "image_size": 16,
            "frames": 4,
            "depths": (16, 32),
            "attention_heads": (None, 2),
            "emb_features": 32,
            "temporal_heads": 2,
        },
    }


class UNetTimeEmbedding(nnx.Module):
    """Fourier features → Dense+GELU → Dense+GELU, all at `features`."""

    def __init__(self, features: int, *, rngs: nnx.Rngs, dtype):
        self.frequencies = fourier_frequencies(features)
        self.dense1 = nnx.Linear(features, features, dtype=dtype, rngs=rngs)
        self.dense2 = nnx.Linear(features, features, dtype=dtype, rngs=rngs)

    def __call__(self, t: jax.Array) -> jax.Array:
        h = fourier_features(t, self.frequencies)
        return jax.nn.gelu(self.dense2(jax.nn.gelu(self.dense1(h))))


class CrossAttentionStage(nnx.Module):
    """RMSNorm, then queries from the feature map attend to the caption (no self-attention);
    the residual is the normalised input."""

    def __init__(self, features: int, heads: int, config: UNetConfig, *, rngs: nnx.Rngs):
        self.norm = RMSNorm(features, rngs=rngs)
        self.attn = Attention(
            features, heads, kv_features=config.text_width, qkv_bias=False,
            dtype=config.dtype, attention_impl=config.attention_impl, rngs=rngs,
        )  # fmt: skip

    def __call__(self, x: jax.Array, text: jax.Array, mask: jax.Array | None) -> jax.Array:
        """mask: the caption's key mask [B, 1, 1, 77] (or None)."""
        n, h, w, c = x.shape
        normed = self.norm(x).reshape(n, h * w, c)
        y = self.attn(normed, text, mask=mask) + normed
        return y.reshape(n, h, w, c)


class TemporalBlock(nnx.Module):
    """Attention over the frames of each pixel: RMSNorm, RoPE attention on the frame index
    (bias on q, k, v, o), a zero-initialised `temporal_out`, residual onto the raw input."""

    def __init__(self, features: int, config: UNetConfig, *, rngs: nnx.Rngs):
        self.frames = config.frames
        self.norm = RMSNorm(features, rngs=rngs)
        self.attn = Attention(
            features, config.temporal_heads, qkv_bias=True, dtype=config.dtype,
            attention_impl=config.attention_impl, rngs=rngs,
        )  # fmt: skip
        self.temporal_out = nnx.Linear(
            features, features, kernel_init=nnx.initializers.zeros_init(), dtype=config.dtype,
            rngs=rngs,
        )  # fmt: skip

    def __call__(self, x: jax.Array) -> jax.Array:
        bt, h, w, c = x.shape
        t = self.frames
        seq = self.norm(x).reshape(bt // t, t, h * w, c).transpose(0, 2, 1, 3)
        seq = seq.reshape(-1, t, c)
        angles = rope_frequencies(jnp.arange(t), self.attn.head_dim)
        y = self.temporal_out(self.attn(seq, rope_angles=angles))
        y = y.reshape(bt // t, h * w, t, c).transpose(0, 2, 1, 3).reshape(bt, h, w, c)
        return x + y.astype(x.dtype)


@register("unet", UNetConfig)
class UNet(nnx.Module):
    """model(x [B, H, W, C], t [B], text [B, 77, 768], text_mask [B, 77]) -> [B, H, W, C]."""

    def __init__(self, config: UNetConfig, *, rngs: nnx.Rngs):
        self.config = config
        dtype, depths = config.dtype, config.depths
        self.time = UNetTimeEmbedding(config.emb_features, rngs=rngs, dtype=dtype)
        self.stem = conv(config.channels, depths[0], 3, rngs=rngs, dtype=dtype)

        def stage(c, heads):
            return None if heads is None else CrossAttentionStage(c, heads, config, rngs=rngs)

        def temporal_block(c):
            return TemporalBlock(c, config, rngs=rngs) if config.temporal else None

        def res_block(cin, cout):
            return ResnetBlock(
                cin, cout, config.emb_features, groups=config.norm_groups, eps=config.norm_eps,
                rngs=rngs, dtype=dtype,
            )  # fmt: skip

        width, skips = depths[0], [depths[0]]
        down_blocks, down_attention, down_temporal, downsample = [], [], [], []
        for level, (depth, heads) in enumerate(zip(depths, config.attention_heads, strict=True)):
            down_blocks.append(
                nnx.List([res_block(width, width) for _ in range(config.res_blocks)])
            )
            down_attention.append(stage(width, heads))
            skips += [width] * config.res_blocks
            down_temporal.append(temporal_block(width))
            last = level == len(depths) - 1
            downsample.append(
                None if last else conv(width, depth, 3, stride=2, rngs=rngs, dtype=dtype)
            )
            width = width if last else depth
        self.down_blocks = nnx.List(down_blocks)
        self.down_attention = nnx.List(down_attention)
        self.down_temporal = nnx.List(down_temporal)
        self.downsample = nnx.List(downsample)

        middle = depths[-1]
        self.middle_in = res_block(width, middle)
        self.middle_attention = stage(middle, config.attention_heads[-1])
        self.middle_temporal = temporal_block(middle)
        self.middle_out = res_block(middle, middle)
        width = middle

        up_blocks, up_attention, up_temporal, upsample = [], [], [], []
        levels = list(zip(reversed(depths), reversed(config.attention_heads), strict=True))
        for i, (depth, heads) in enumerate(levels):
            blocks = []
            for _ in range(config.res_blocks):
                blocks.append(res_block(width + skips.pop(), depth))
                width = depth
            up_blocks.append(nnx.List(blocks))
            up_attention.append(stage(depth, heads))
            up_temporal.append(temporal_block(depth))
            last = i == len(depths) - 1
            # depths[-i] (depths[0] for i = 0): the rule the published count was measured with.
            up_width = depths[-i]
            upsample.append(None if last else conv(width, up_width, 3, rngs=rngs, dtype=dtype))
            width = width if last else up_width
        self.up_blocks = nnx.List(up_blocks)
        self.up_attention = nnx.List(up_attention)
        self.up_temporal = nnx.List(up_temporal)
        self.upsample = nnx.List(upsample)

        self.final_conv = conv(width, depths[0], 3, rngs=rngs, dtype=dtype)
        self.final_block = res_block(depths[0] + skips.pop(), depths[0])
        self.out_norm = GroupNorm(depths[0], config.norm_groups, eps=config.norm_eps, rngs=rngs)
        self.out_conv = conv(depths[0], config.channels, 3, rngs=rngs, dtype=dtype)

    def __call__(self, x, t, text, text_mask=None):
        temb = self.time(t)
        x = self.stem(x.astype(self.config.dtype))
        mask = None if text_mask is None else key_mask(text_mask)
        skips = [x]
        for blocks, attn, temporal, down in zip(
            self.down_blocks, self.down_attention, self.down_temporal, self.downsample,
            strict=True,
        ):  # fmt: skip
            for j, block in enumerate(blocks):
                x = block(x, temb)
                if attn is not None and j == len(blocks) - 1:
                    x = attn(x, text, mask)
                skips.append(x)
            if temporal is not None:
                x = temporal(x)
            if down is not None:
                x = down(x)

        x = self.middle_in(x, temb)
        if self.middle_attention is not None:
            x = self.middle_attention(x, text, mask)
        if self.middle_temporal is not None:
            x = self.middle_temporal(x)
        x = self.middle_out(x, temb)

        for blocks, attn, temporal, up in zip(
            self.up_blocks, self.up_attention, self.up_temporal, self.upsample, strict=True
        ):
            for j, block in enumerate(blocks):
                x = block(jnp.concatenate([x, skips.pop()], axis=-1), temb)
                if attn is not None and j == len(blocks) - 1:
                    x = attn(x, text, mask)
            if temporal is not None:
                x = temporal(x)
            if up is not None:
                x = up(upsample_nearest(x))

        x = self.final_conv(x)
        x = self.final_block(jnp.concatenate([x, skips.pop()], axis=-1), temb)
        x = self.out_conv(jax.nn.silu(self.out_norm(x)))
        return x.astype(jnp.float32)


@register("unet_3d", UNet3DConfig)
class UNet3D(UNet):
    """model(x [B, T, H, W, C], t [B], text, text_mask) -> [B, T, H, W, C]: the 2-D UNet on
    all B·T frames plus the temporal blocks.

    Time and caption are repeated per frame before any projection, as the published row
    was measured (computing the text keys and values once per clip costs 11 GFLOP less)."""

    def __call__(self, x, t, text, text_mask=None):
        b, frames = x.shape[:2]
        if frames != self.config.frames:
            raise ValueError(f"unet_3d: got {frames} frames, the config has {self.config.frames}")
        per_frame = lambda a: None if a is None else jnp.repeat(a, frames, axis=0)
        y = super().__call__(
            x.reshape(b * frames, *x.shape[2:]), per_frame(t), per_frame(text),
            per_frame(text_mask),
        )  # fmt: skip
        return y.reshape(x.shape)
