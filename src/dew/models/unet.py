"""Convolutional UNets: unet (pixel EDM), unet_3d (the same UNet per frame plus temporal
attention) and unet_2d_condition (a diffusers-style conditional UNet on latents).
Call: `model(x, t [B], text [B,77,768], text_mask [B,77]) -> same shape as x, fp32`.

unet and unet_3d follow the published structure (../shared/spec/small-preset.md): a level
runs its residual blocks at the width it is entered with and only its downsampling
convolution moves to the level's width; upsampling convolutions use `depths[-i]` for
up-level i (the rule the published parameter count was measured with).
"""

from __future__ import annotations

from typing import ClassVar, Literal

import jax
import jax.numpy as jnp
import pydantic
from flax import nnx

from dew.config import PresetConfig
from dew.models.layers.attention import Attention, AttentionImpl, rope_frequencies
from dew.models.layers.embeddings import fourier_features, fourier_frequencies, sinusoidal
from dew.models.layers.mlp import GeGLU, gelu_tanh
from dew.models.layers.norms import GroupNorm, LayerNorm, RMSNorm
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
    text_width: int = 768
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

    @pydantic.model_validator(mode="after")
    def _check_levels(self):
        if len(self.attention_heads) != len(self.depths):
            raise ValueError(
                f"attention_heads {self.attention_heads} needs one entry per level of depths "
                f"{self.depths}"
            )
        return self


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
            features, heads, kv_features=cfg.text_width, qkv_bias=False,
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


# --------------------------------------------------------------------------------------
# unet_2d_condition
# --------------------------------------------------------------------------------------


class UNet2DConditionConfig(PresetConfig):
    """Per stage: channels, heads, whether it has (self + cross) attention blocks. The middle
    block always attends, with the last stage's heads."""

    objective: ClassVar[str] = "edm"
    image_size: int = 32
    channels: int = 4
    block_channels: tuple[int, ...] = (64, 128, 256)
    heads: tuple[int, ...] = (4, 4, 8)
    cross_attention: tuple[bool, ...] = (True, True, False)
    layers_per_block: int = 1
    time_features: int = 64
    time_embed_features: int = 256
    norm_groups: int = 32
    norm_eps: float = 1e-5
    text_width: int = 768
    dtype: Dtype = "bfloat16"
    attention_impl: AttentionImpl = "xla"

    presets: ClassVar = {
        "small": {},
        "cpu-smoke": {
            "image_size": 16, "block_channels": (32, 64), "heads": (2, 4),
            "cross_attention": (True, False),
        },
    }  # fmt: skip

    @pydantic.model_validator(mode="after")
    def _check_stages(self):
        if not len(self.block_channels) == len(self.heads) == len(self.cross_attention):
            raise ValueError(
                f"block_channels {self.block_channels}, heads {self.heads} and cross_attention "
                f"{self.cross_attention} need one entry per stage"
            )
        return self


class ConditionResnet(nnx.Module):
    """GroupNorm, swish, conv 3×3, + Dense(SiLU(temb)), GroupNorm, swish, conv 3×3, 1×1 skip."""

    def __init__(self, cin: int, cout: int, cfg: UNet2DConditionConfig, *, rngs: nnx.Rngs):
        dt, groups, eps = cfg.dtype, cfg.norm_groups, cfg.norm_eps
        self.norm1 = GroupNorm(cin, groups, eps=eps, rngs=rngs)
        self.conv1 = _conv(cin, cout, 3, rngs=rngs, dtype=dt)
        self.time_proj = nnx.Linear(cfg.time_embed_features, cout, dtype=dt, rngs=rngs)
        self.norm2 = GroupNorm(cout, groups, eps=eps, rngs=rngs)
        self.conv2 = _conv(cout, cout, 3, rngs=rngs, dtype=dt)
        self.shortcut = _conv(cin, cout, 1, rngs=rngs, dtype=dt) if cin != cout else None

    def __call__(self, x: jax.Array, temb: jax.Array) -> jax.Array:
        h = self.conv1(jax.nn.silu(self.norm1(x)))
        h = h + self.time_proj(jax.nn.silu(temb))[:, None, None, :]
        h = self.conv2(jax.nn.silu(self.norm2(h)))
        return h + (x if self.shortcut is None else self.shortcut(x))


class SpatialTransformer(nnx.Module):
    """GroupNorm, 1×1 conv in, one transformer layer (LN → self-attention, LN → cross-attention
    to the caption, LN → GEGLU, each residual), 1×1 conv out, plus the block input."""

    def __init__(self, c: int, heads: int, cfg: UNet2DConditionConfig, *, rngs: nnx.Rngs):
        dt, impl = cfg.dtype, cfg.attention_impl
        self.norm = GroupNorm(c, cfg.norm_groups, eps=1e-6, rngs=rngs)
        self.proj_in = _conv(c, c, 1, rngs=rngs, dtype=dt)
        self.norm1 = LayerNorm(c, rngs=rngs)
        self.self_attn = Attention(
            c, heads, qkv_bias=False, out_bias=True, dtype=dt, attention_impl=impl, rngs=rngs
        )
        self.norm2 = LayerNorm(c, rngs=rngs)
        self.cross_attn = Attention(
            c, heads, kv_features=cfg.text_width, qkv_bias=False, out_bias=True, dtype=dt,
            attention_impl=impl, rngs=rngs,
        )  # fmt: skip
        self.norm3 = LayerNorm(c, rngs=rngs)
        self.ff = GeGLU(c, 4 * c, activation=gelu_tanh, dtype=dt, rngs=rngs)
        self.proj_out = _conv(c, c, 1, rngs=rngs, dtype=dt)

    def __call__(self, x, text, text_mask):
        n, h, w, c = x.shape
        tokens = self.proj_in(self.norm(x)).reshape(n, h * w, c)
        tokens = tokens + self.self_attn(self.norm1(tokens))
        tokens = tokens + self.cross_attn(self.norm2(tokens), text, mask=_text_mask(text_mask))
        tokens = tokens + self.ff(self.norm3(tokens))
        return x + self.proj_out(tokens.reshape(n, h, w, c))


@register("unet_2d_condition", UNet2DConditionConfig)
class UNet2DCondition(nnx.Module):
    """conv_in; down levels (resnets, attention where the stage has it, a stride-2 conv but
    on the last), every output pushed as a skip; middle resnet, attention, resnet; up levels
    of layers_per_block + 1 resnets on [x, latest skip], attention where the stage has it,
    nearest ×2 and a 3×3 conv but on the last; GroupNorm, SiLU, conv 3×3 out."""

    def __init__(self, cfg: UNet2DConditionConfig, *, rngs: nnx.Rngs):
        stages = (cfg.block_channels, cfg.heads, cfg.cross_attention)
        self.cfg = cfg
        dt, chans = cfg.dtype, cfg.block_channels
        resnet = lambda cin, cout: ConditionResnet(cin, cout, cfg, rngs=rngs)
        attend = lambda c, heads, on: SpatialTransformer(c, heads, cfg, rngs=rngs) if on else None
        self.time_embed = nnx.Sequential(
            nnx.Linear(cfg.time_features, cfg.time_embed_features, dtype=dt, rngs=rngs),
            jax.nn.silu,
            nnx.Linear(cfg.time_embed_features, cfg.time_embed_features, dtype=dt, rngs=rngs),
        )
        self.conv_in = _conv(cfg.channels, chans[0], 3, rngs=rngs, dtype=dt)

        width, skips = chans[0], [chans[0]]
        down_resnets, down_attention, downsample = [], [], []
        for i, (c, heads, cross) in enumerate(zip(*stages, strict=True)):
            resnets, attention = [], []
            for _ in range(cfg.layers_per_block):
                resnets.append(resnet(width, c))
                attention.append(attend(c, heads, cross))
                width = c
                skips.append(c)
            down_resnets.append(nnx.List(resnets))
            down_attention.append(nnx.List(attention))
            last = i == len(chans) - 1
            downsample.append(None if last else _conv(c, c, 3, stride=2, rngs=rngs, dtype=dt))
            skips += [] if last else [c]
        self.down_resnets, self.down_attention = nnx.List(down_resnets), nnx.List(down_attention)
        self.downsample = nnx.List(downsample)

        self.middle_in = resnet(width, width)
        self.middle_attention = SpatialTransformer(width, cfg.heads[-1], cfg, rngs=rngs)
        self.middle_out = resnet(width, width)

        up_resnets, up_attention, upsample = [], [], []
        for i, (c, heads, cross) in enumerate(zip(*(reversed(s) for s in stages), strict=True)):
            resnets, attention = [], []
            for _ in range(cfg.layers_per_block + 1):
                resnets.append(resnet(width + skips.pop(), c))
                attention.append(attend(c, heads, cross))
                width = c
            up_resnets.append(nnx.List(resnets))
            up_attention.append(nnx.List(attention))
            last = i == len(chans) - 1
            upsample.append(None if last else _conv(c, c, 3, rngs=rngs, dtype=dt))
        self.up_resnets, self.up_attention = nnx.List(up_resnets), nnx.List(up_attention)
        self.upsample = nnx.List(upsample)

        self.out_norm = GroupNorm(width, cfg.norm_groups, eps=cfg.norm_eps, rngs=rngs)
        self.conv_out = _conv(width, cfg.channels, 3, rngs=rngs, dtype=dt)

    def __call__(self, x, t, text, text_mask=None):
        cfg = self.cfg
        temb = self.time_embed(sinusoidal(t, cfg.time_features, cos_first=True))
        x = self.conv_in(x.astype(cfg.dtype))
        skips = [x]
        for resnets, attention, down in zip(
            self.down_resnets, self.down_attention, self.downsample, strict=True
        ):
            for block, attn in zip(resnets, attention, strict=True):
                x = block(x, temb)
                x = x if attn is None else attn(x, text, text_mask)
                skips.append(x)
            if down is not None:
                x = down(x)
                skips.append(x)

        x = self.middle_out(self.middle_attention(self.middle_in(x, temb), text, text_mask), temb)

        for resnets, attention, up in zip(
            self.up_resnets, self.up_attention, self.upsample, strict=True
        ):
            for block, attn in zip(resnets, attention, strict=True):
                x = block(jnp.concatenate([x, skips.pop()], axis=-1), temb)
                x = x if attn is None else attn(x, text, text_mask)
            if up is not None:
                x = up(_upsample_nearest(x))

        return self.conv_out(jax.nn.silu(self.out_norm(x))).astype(jnp.float32)
