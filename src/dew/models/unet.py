"""Convolutional UNets: unet (pixel EDM), unet_3d (the same UNet per frame plus temporal
attention) and unet_2d_condition (a diffusers-style conditional UNet on latents).

unet and unet_3d follow the published structure (../shared/spec/small-preset.md): a level
runs its residual blocks at the width it is entered with and only its downsampling
convolution moves to the level's width; upsampling convolutions use `depths[-i]` for
up-level i (the rule the published parameter count was measured with).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import jax
import jax.numpy as jnp
from flax import nnx

from dew.config import PresetConfig
from dew.models.layers.attention import Attention, AttentionImpl, rope_frequencies
from dew.models.layers.embeddings import fourier_features, fourier_frequencies
from dew.models.layers.norms import GroupNorm, RMSNorm
from dew.models.registry import register

Dtype = Literal["bfloat16", "float32"]


def _conv(cin: int, cout: int, kernel: int, *, rngs, dtype, stride: int = 1, init=None):
    extra = {} if init is None else {"kernel_init": init}
    return nnx.Conv(
        cin, cout, (kernel, kernel), strides=(stride, stride), padding="SAME",
        dtype=dtype, rngs=rngs, **extra,
    )  # fmt: skip


def _upsample_nearest(x: jax.Array) -> jax.Array:
    return jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)


def _text_mask(mask: jax.Array | None) -> jax.Array | None:
    # [B, 77] -> [B, 1, 1, 77]: every head and query sees the same caption tokens.
    return None if mask is None else mask[:, None, None, :]


# --------------------------------------------------------------------------------------
# unet and unet_3d
# --------------------------------------------------------------------------------------


class UNetConfig(PresetConfig):
    objective: ClassVar[str] = "edm"
    image_size: int = 64
    channels: int = 3
    depths: tuple[int, ...] = (64, 128, 256)
    # Cross-attention heads per level (None: no attention); the middle uses the last level's.
    attention_heads: tuple[int | None, ...] = (None, 4, 4)
    res_blocks: int = 2
    emb_features: int = 256
    norm_groups: int = 8
    norm_eps: float = 1e-4
    text_features: int = 768
    dtype: Dtype = "bfloat16"
    attention_impl: AttentionImpl = "xla"

    presets: ClassVar = {
        "small": {},
        "cpu-smoke": {
            "image_size": 16,
            "depths": (16, 32),
            "attention_heads": (None, 2),
            "emb_features": 32,
        },
    }


class ResidualBlock(nnx.Module):
    """GroupNorm, swish, conv 3×3, + Dense(temb→f), GroupNorm, swish, conv 3×3, shortcut."""

    def __init__(self, cin: int, cout: int, cfg: UNetConfig, *, rngs: nnx.Rngs):
        dt = cfg.dtype
        self.norm1 = GroupNorm(cin, cfg.norm_groups, eps=cfg.norm_eps, rngs=rngs)
        self.conv1 = _conv(cin, cout, 3, rngs=rngs, dtype=dt)
        self.temb = nnx.Linear(cfg.emb_features, cout, dtype=dt, rngs=rngs)
        self.norm2 = GroupNorm(cout, cfg.norm_groups, eps=cfg.norm_eps, rngs=rngs)
        self.conv2 = _conv(cout, cout, 3, rngs=rngs, dtype=dt)
        self.shortcut = _conv(cin, cout, 1, rngs=rngs, dtype=dt) if cin != cout else None

    def __call__(self, x: jax.Array, temb: jax.Array) -> jax.Array:
        h = self.conv1(jax.nn.silu(self.norm1(x)))
        h = h + self.temb(temb)[:, None, None, :]
        h = self.conv2(jax.nn.silu(self.norm2(h)))
        return h + (x if self.shortcut is None else self.shortcut(x))


class CrossAttentionStage(nnx.Module):
    """RMSNorm, then queries from the feature map attend to the caption (no self-attention);
    the residual is the normalised input."""

    def __init__(self, features: int, heads: int, cfg: UNetConfig, *, rngs: nnx.Rngs):
        self.norm = RMSNorm(features, rngs=rngs)
        self.attn = Attention(
            features, heads, kv_features=cfg.text_features, qkv_bias=False,
            dtype=cfg.dtype, attention_impl=cfg.attention_impl, rngs=rngs,
        )  # fmt: skip

    def __call__(self, x: jax.Array, text: jax.Array, text_mask: jax.Array | None) -> jax.Array:
        n, h, w, c = x.shape
        normed = self.norm(x).reshape(n, h * w, c)
        y = self.attn(normed, text, mask=_text_mask(text_mask)) + normed
        return y.reshape(n, h, w, c)


class TemporalBlock(nnx.Module):
    """Attention over the frames of each pixel: RMSNorm, RoPE attention on the frame index
    (bias on q, k, v, o), a zero-initialised `temporal_out`, residual onto the raw input."""

    def __init__(self, features: int, heads: int, cfg: UNet3DConfig, *, rngs: nnx.Rngs):
        self.frames = cfg.frames
        self.norm = RMSNorm(features, rngs=rngs)
        self.attn = Attention(
            features, heads, qkv_bias=True, dtype=cfg.dtype,
            attention_impl=cfg.attention_impl, rngs=rngs,
        )  # fmt: skip
        self.temporal_out = nnx.Linear(
            features, features, kernel_init=nnx.initializers.zeros_init(), dtype=cfg.dtype,
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


class TimeEmbedding(nnx.Module):
    """Fourier features → Dense+GELU → Dense+GELU."""

    def __init__(self, features: int, *, rngs: nnx.Rngs, dtype):
        self.frequencies = fourier_frequencies(features)
        self.dense1 = nnx.Linear(features, features, dtype=dtype, rngs=rngs)
        self.dense2 = nnx.Linear(features, features, dtype=dtype, rngs=rngs)

    def __call__(self, t: jax.Array) -> jax.Array:
        h = fourier_features(t, self.frequencies)
        return jax.nn.gelu(self.dense2(jax.nn.gelu(self.dense1(h))))


@register("unet", UNetConfig)
class UNet(nnx.Module):
    """model(x [B, H, W, C], t [B], text [B, 77, 768], text_mask [B, 77]) -> [B, H, W, C]."""

    def __init__(self, cfg: UNetConfig, *, rngs: nnx.Rngs):
        if len(cfg.attention_heads) != len(cfg.depths):
            raise ValueError(
                f"attention_heads {cfg.attention_heads} needs one entry per level of depths "
                f"{cfg.depths}"
            )
        self.cfg = cfg
        dt, depths = cfg.dtype, cfg.depths
        temporal = isinstance(cfg, UNet3DConfig)
        self.time = TimeEmbedding(cfg.emb_features, rngs=rngs, dtype=dt)
        self.stem = _conv(cfg.channels, depths[0], 3, rngs=rngs, dtype=dt)

        def stage(c, heads):
            return None if heads is None else CrossAttentionStage(c, heads, cfg, rngs=rngs)

        def temporal_block(c):
            return TemporalBlock(c, cfg.temporal_heads, cfg, rngs=rngs) if temporal else None

        width, skips = depths[0], [depths[0]]
        down_blocks, down_attention, down_temporal, downsample = [], [], [], []
        for level, (depth, heads) in enumerate(zip(depths, cfg.attention_heads, strict=True)):
            blocks = [ResidualBlock(width, width, cfg, rngs=rngs) for _ in range(cfg.res_blocks)]
            down_blocks.append(nnx.List(blocks))
            down_attention.append(stage(width, heads))
            skips += [width] * cfg.res_blocks
            down_temporal.append(temporal_block(width))
            last = level == len(depths) - 1
            downsample.append(
                None if last else _conv(width, depth, 3, stride=2, rngs=rngs, dtype=dt)
            )
            width = width if last else depth
        self.down_blocks = nnx.List(down_blocks)
        self.down_attention = nnx.List(down_attention)
        self.down_temporal = nnx.List(down_temporal)
        self.downsample = nnx.List(downsample)

        middle = depths[-1]
        self.middle_in = ResidualBlock(width, middle, cfg, rngs=rngs)
        self.middle_attention = stage(middle, cfg.attention_heads[-1])
        self.middle_temporal = temporal_block(middle)
        self.middle_out = ResidualBlock(middle, middle, cfg, rngs=rngs)
        width = middle

        up_blocks, up_attention, up_temporal, upsample = [], [], [], []
        reversed_levels = list(zip(reversed(depths), reversed(cfg.attention_heads), strict=True))
        for i, (depth, heads) in enumerate(reversed_levels):
            blocks = []
            for _ in range(cfg.res_blocks):
                blocks.append(ResidualBlock(width + skips.pop(), depth, cfg, rngs=rngs))
                width = depth
            up_blocks.append(nnx.List(blocks))
            up_attention.append(stage(depth, heads))
            up_temporal.append(temporal_block(depth))
            last = i == len(depths) - 1
            # depths[-i] (depths[0] for i = 0): the rule the published count was measured with.
            up_width = depths[-i]
            upsample.append(None if last else _conv(width, up_width, 3, rngs=rngs, dtype=dt))
            width = width if last else up_width
        self.up_blocks = nnx.List(up_blocks)
        self.up_attention = nnx.List(up_attention)
        self.up_temporal = nnx.List(up_temporal)
        self.upsample = nnx.List(upsample)

        self.final_conv = _conv(width, depths[0], 3, rngs=rngs, dtype=dt)
        self.final_block = ResidualBlock(depths[0] + skips.pop(), depths[0], cfg, rngs=rngs)
        self.out_norm = GroupNorm(depths[0], cfg.norm_groups, eps=cfg.norm_eps, rngs=rngs)
        self.out_conv = _conv(depths[0], cfg.channels, 3, rngs=rngs, dtype=dt)

    def __call__(self, x, t, text, text_mask=None):
        dt = self.cfg.dtype
        temb = self.time(t)
        x = self.stem(x.astype(dt))
        skips = [x]
        for blocks, attn, temporal, down in zip(
            self.down_blocks, self.down_attention, self.down_temporal, self.downsample,
            strict=True,
        ):  # fmt: skip
            for j, block in enumerate(blocks):
                x = block(x, temb)
                if attn is not None and j == len(blocks) - 1:
                    x = attn(x, text, text_mask)
                skips.append(x)
            if temporal is not None:
                x = temporal(x)
            if down is not None:
                x = down(x)

        x = self.middle_in(x, temb)
        if self.middle_attention is not None:
            x = self.middle_attention(x, text, text_mask)
        if self.middle_temporal is not None:
            x = self.middle_temporal(x)
        x = self.middle_out(x, temb)

        for blocks, attn, temporal, up in zip(
            self.up_blocks, self.up_attention, self.up_temporal, self.upsample, strict=True
        ):
            for j, block in enumerate(blocks):
                x = block(jnp.concatenate([x, skips.pop()], axis=-1), temb)
                if attn is not None and j == len(blocks) - 1:
                    x = attn(x, text, text_mask)
            if temporal is not None:
                x = temporal(x)
            if up is not None:
                x = up(_upsample_nearest(x))

        x = self.final_conv(x)
        x = self.final_block(jnp.concatenate([x, skips.pop()], axis=-1), temb)
        x = self.out_conv(jax.nn.silu(self.out_norm(x)))
        return x.astype(jnp.float32)


class UNet3DConfig(UNetConfig):
    frames: int = 8
    temporal_heads: int = 4

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


@register("unet_3d", UNet3DConfig)
class UNet3D(UNet):
    """model(x [B, T, H, W, C], t [B], text, text_mask) -> [B, T, H, W, C]: the 2-D UNet on
    all B·T frames plus the temporal blocks.

    Time and caption are repeated per frame before any projection, as the published row
    was measured (computing the text keys and values once per clip costs 11 GFLOP less)."""

    def __call__(self, x, t, text, text_mask=None):
        b, frames = x.shape[:2]
        if frames != self.cfg.frames:
            raise ValueError(f"unet_3d: got {frames} frames, the config has {self.cfg.frames}")
        per_frame = lambda a: None if a is None else jnp.repeat(a, frames, axis=0)
        y = super().__call__(
            x.reshape(b * frames, *x.shape[2:]), per_frame(t), per_frame(text),
            per_frame(text_mask),
        )  # fmt: skip
        return y.reshape(x.shape)
