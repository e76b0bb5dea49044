"""tiny_mixer: an MLP-Mixer denoiser trained by dew's flow-matching objective.

What an architecture from another package needs, and nothing more: a config that subclasses
`dew.config.ModelConfig` (its objective, its fields, presets "cpu-smoke" and "small"), an
`nnx.Module` built from the config, registered under its name, and the entry point in this
package's pyproject that points dew at the class. dew's Trainer builds it as
`TinyMixer(config, rngs=nnx.Rngs(seed))` and the "flow" objective calls it as
`model(x [B,H,W,C], t [B], text [B,77,text_width], text_mask [B,77]) -> [B,H,W,C] fp32`.

The blocks are dew's own (dew.models.layers): patches, the time and caption embeddings,
adaLN-Zero modulation, norms and MLPs. What is new is the token mixer: an MLP across the
patches instead of attention.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
import pydantic
from flax import nnx
from pydantic import PositiveInt

from dew.config import ModelConfig, check_divisible
from dew.models.layers.conditioning import TextPool, TimeEmbedding
from dew.models.layers.embeddings import Constant, sincos_2d
from dew.models.layers.mlp import Mlp
from dew.models.layers.modulation import AdaLNModulation, ModulatedHead, modulate
from dew.models.layers.norms import LayerNorm
from dew.models.layers.patches import PatchEmbed, unpatchify
from dew.models.registry import register


class TinyMixerConfig(ModelConfig):
    # One of dew's registered objectives (dew.train.objectives): it builds the batch
    # (images and caption ids) and the loss, so the model only has to take its call.
    objective: ClassVar[str] = "flow"

    image_size: PositiveInt = 32
    channels: PositiveInt = 3
    patch: PositiveInt = 4
    width: PositiveInt = 256
    depth: PositiveInt = 4
    token_mlp_ratio: PositiveInt = 2
    mlp_ratio: PositiveInt = 4

    presets: ClassVar = {
        "small": {},
        "cpu-smoke": {"image_size": 16, "width": 64, "depth": 4, "mlp_ratio": 2},
    }

    @pydantic.model_validator(mode="after")
    def _check_shapes(self):
        check_divisible("image_size", self.image_size, "patch", self.patch)
        return self

    @property
    def tokens(self) -> int:
        return (self.image_size // self.patch) ** 2


class MixerBlock(nnx.Module):
    """adaLN-Zero: modulated LN -> MLP across tokens -> gate, modulated LN -> MLP across
    channels -> gate."""

    def __init__(self, config: TinyMixerConfig, *, rngs: nnx.Rngs):
        d, dtype, tokens = config.width, config.dtype, config.tokens
        self.modulation = AdaLNModulation(d, d, 6, dtype=dtype, rngs=rngs)
        self.norm1 = LayerNorm(d, affine=False, rngs=rngs)
        self.norm2 = LayerNorm(d, affine=False, rngs=rngs)
        self.token_mlp = Mlp(tokens, config.token_mlp_ratio * tokens, dtype=dtype, rngs=rngs)
        self.channel_mlp = Mlp(d, config.mlp_ratio * d, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array, c: jax.Array) -> jax.Array:
        shift1, scale1, gate1, shift2, scale2, gate2 = self.modulation(c)
        h = modulate(self.norm1(x), shift1, scale1)
        h = self.token_mlp(h.swapaxes(1, 2)).swapaxes(1, 2)  # mix along the patches
        x = x + gate1[:, None] * h
        h = self.channel_mlp(modulate(self.norm2(x), shift2, scale2))
        return x + gate2[:, None] * h


@register("tiny_mixer", TinyMixerConfig)
class TinyMixer(nnx.Module):
    def __init__(self, config: TinyMixerConfig, *, rngs: nnx.Rngs):
        self.config = config
        d, dtype = config.width, config.dtype
        grid = config.image_size // config.patch
        self.patch_embed = PatchEmbed(config.patch, config.channels, d, dtype=dtype, rngs=rngs)
        # A constant of the executable, not a parameter: dew's state holds Params only.
        self.positions = Constant(sincos_2d(grid, grid, d))
        self.time_embed = TimeEmbedding(d, dtype=dtype, rngs=rngs)
        self.text_pool = TextPool(config.text_width, d, dtype=dtype, rngs=rngs)
        self.blocks = nnx.List([MixerBlock(config, rngs=rngs) for _ in range(config.depth)])
        out = config.patch**2 * config.channels
        self.head = ModulatedHead(d, d, out, dtype=dtype, rngs=rngs)

    def __call__(self, x, t, text, text_mask):
        config, dtype = self.config, jnp.dtype(self.config.dtype)
        height, width = x.shape[1:3]
        tokens = self.patch_embed(x.astype(dtype)) + self.positions(dtype)[None]
        c = self.time_embed(t) + self.text_pool(text, text_mask)
        for block in self.blocks:
            tokens = block(tokens, c)
        return unpatchify(self.head(tokens, c), height, width, config.patch)
