"""unet_2d_condition: a diffusers-style conditional UNet on latents.

Call: `model(x [B,H,W,C], t [B], text [B,77,768], text_mask [B,77]) -> [B,H,W,C] fp32`.
Stages have a width, heads and whether their blocks attend (self-attention, then
cross-attention to the caption); the layout rules are UNet2DCondition's docstring.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
import pydantic
from flax import nnx
from pydantic import PositiveFloat, PositiveInt

from dew.config import ModelConfig
from dew.models.layers.attention import Attention, key_mask
from dew.models.layers.conv import ResnetBlock, conv, upsample_nearest
from dew.models.layers.embeddings import sinusoidal
from dew.models.layers.mlp import GeGLU, gelu_tanh
from dew.models.layers.norms import GroupNorm, LayerNorm
from dew.models.registry import register


class UNet2DConditionConfig(ModelConfig):
    """Per stage: channels, heads, whether it has (self + cross) attention blocks. The middle
    block always attends, with the last stage's heads."""

    objective: ClassVar[str] = "edm"

    image_size: PositiveInt = 32
    channels: PositiveInt = 4
    block_channels: tuple[PositiveInt, ...] = pydantic.Field((64, 128, 256), min_length=1)
    heads: tuple[PositiveInt, ...] = (4, 4, 8)
    cross_attention: tuple[bool, ...] = (True, True, False)
    layers_per_block: PositiveInt = 1
    time_features: PositiveInt = 64
    time_embed_features: PositiveInt = 256
    norm_groups: PositiveInt = 32
    norm_eps: PositiveFloat = 1e-5

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


class SpatialTransformer(nnx.Module):
    """GroupNorm, 1×1 conv in, one transformer layer (LN → self-attention, LN → cross-attention
    to the caption, LN → GEGLU, each residual), 1×1 conv out, plus the block input."""

    def __init__(self, c: int, heads: int, config: UNet2DConditionConfig, *, rngs: nnx.Rngs):
        dtype, impl = config.dtype, config.attention_impl
        self.norm = GroupNorm(c, config.norm_groups, eps=1e-6, rngs=rngs)
        self.proj_in = conv(c, c, 1, rngs=rngs, dtype=dtype)
        self.norm1 = LayerNorm(c, rngs=rngs)
        self.self_attn = Attention(
            c, heads, qkv_bias=False, out_bias=True, dtype=dtype, attention_impl=impl, rngs=rngs
        )
        self.norm2 = LayerNorm(c, rngs=rngs)
        self.cross_attn = Attention(
            c, heads, kv_features=config.text_width, qkv_bias=False, out_bias=True, dtype=dtype,
            attention_impl=impl, rngs=rngs,
        )  # fmt: skip
        self.norm3 = LayerNorm(c, rngs=rngs)
        self.ff = GeGLU(c, 4 * c, activation=gelu_tanh, dtype=dtype, rngs=rngs)
        self.proj_out = conv(c, c, 1, rngs=rngs, dtype=dtype)

    def __call__(self, x: jax.Array, text: jax.Array, mask: jax.Array | None) -> jax.Array:
        """mask: the caption's key mask [B, 1, 1, 77] (or None)."""
        n, h, w, c = x.shape
        tokens = self.proj_in(self.norm(x)).reshape(n, h * w, c)
        tokens = tokens + self.self_attn(self.norm1(tokens))
        tokens = tokens + self.cross_attn(self.norm2(tokens), text, mask=mask)
        tokens = tokens + self.ff(self.norm3(tokens))
        return x + self.proj_out(tokens.reshape(n, h, w, c))


@register("unet_2d_condition", UNet2DConditionConfig)
class UNet2DCondition(nnx.Module):
    """conv_in; down levels (resnets, attention where the stage has it, a stride-2 conv but
    on the last), every output pushed as a skip; middle resnet, attention, resnet; up levels
    of layers_per_block + 1 resnets on [x, latest skip], attention where the stage has it,
    nearest ×2 and a 3×3 conv but on the last; GroupNorm, SiLU, conv 3×3 out."""

    def __init__(self, config: UNet2DConditionConfig, *, rngs: nnx.Rngs):
        stages = (config.block_channels, config.heads, config.cross_attention)
        self.config = config
        dtype, chans = config.dtype, config.block_channels
        resnet = lambda cin, cout: ResnetBlock(
            cin, cout, config.time_embed_features, groups=config.norm_groups, eps=config.norm_eps,
            silu_temb=True, rngs=rngs, dtype=dtype,
        )  # fmt: skip
        attend = lambda c, heads, on: (
            SpatialTransformer(c, heads, config, rngs=rngs) if on else None
        )
        emb = config.time_embed_features
        self.time_embed = nnx.Sequential(
            nnx.Linear(config.time_features, emb, dtype=dtype, rngs=rngs),
            jax.nn.silu,
            nnx.Linear(emb, emb, dtype=dtype, rngs=rngs),
        )
        self.conv_in = conv(config.channels, chans[0], 3, rngs=rngs, dtype=dtype)

        width, skips = chans[0], [chans[0]]
        down_resnets, down_attention, downsample = [], [], []
        for i, (c, heads, cross) in enumerate(zip(*stages, strict=True)):
            resnets, attention = [], []
            for _ in range(config.layers_per_block):
                resnets.append(resnet(width, c))
                attention.append(attend(c, heads, cross))
                width = c
                skips.append(c)
            down_resnets.append(nnx.List(resnets))
            down_attention.append(nnx.List(attention))
            last = i == len(chans) - 1
            downsample.append(None if last else conv(c, c, 3, stride=2, rngs=rngs, dtype=dtype))
            skips += [] if last else [c]
        self.down_resnets, self.down_attention = nnx.List(down_resnets), nnx.List(down_attention)
        self.downsample = nnx.List(downsample)

        self.middle_in = resnet(width, width)
        self.middle_attention = SpatialTransformer(width, config.heads[-1], config, rngs=rngs)
        self.middle_out = resnet(width, width)

        up_resnets, up_attention, upsample = [], [], []
        for i, (c, heads, cross) in enumerate(zip(*(reversed(s) for s in stages), strict=True)):
            resnets, attention = [], []
            for _ in range(config.layers_per_block + 1):
                resnets.append(resnet(width + skips.pop(), c))
                attention.append(attend(c, heads, cross))
                width = c
            up_resnets.append(nnx.List(resnets))
            up_attention.append(nnx.List(attention))
            last = i == len(chans) - 1
            upsample.append(None if last else conv(c, c, 3, rngs=rngs, dtype=dtype))
        self.up_resnets, self.up_attention = nnx.List(up_resnets), nnx.List(up_attention)
        self.upsample = nnx.List(upsample)

        self.out_norm = GroupNorm(width, config.norm_groups, eps=config.norm_eps, rngs=rngs)
        self.conv_out = conv(width, config.channels, 3, rngs=rngs, dtype=dtype)

    def __call__(self, x, t, text, text_mask=None):
        config = self.config
        temb = self.time_embed(sinusoidal(t, config.time_features, cos_first=True))
        x = self.conv_in(x.astype(config.dtype))
        mask = None if text_mask is None else key_mask(text_mask)
        skips = [x]
        for resnets, attention, down in zip(
            self.down_resnets, self.down_attention, self.downsample, strict=True
        ):
            for block, attn in zip(resnets, attention, strict=True):
                x = block(x, temb)
                x = x if attn is None else attn(x, text, mask)
                skips.append(x)
            if down is not None:
                x = down(x)
                skips.append(x)

        x = self.middle_out(self.middle_attention(self.middle_in(x, temb), text, mask), temb)

        for resnets, attention, up in zip(
            self.up_resnets, self.up_attention, self.upsample, strict=True
        ):
            for block, attn in zip(resnets, attention, strict=True):
                x = block(jnp.concatenate([x, skips.pop()], axis=-1), temb)
                x = x if attn is None else attn(x, text, mask)
            if up is not None:
                x = up(upsample_nearest(x))

        return self.conv_out(jax.nn.silu(self.out_norm(x))).astype(jnp.float32)
