"""U-ViT: a plain ViT over [time token, text tokens, patch tokens] with long skips.

Every input is a token: the noise level becomes one token, each caption token another, the
image 256 patch tokens with a learned position table. Blocks are split into an "in" half, a
middle block and an "out" half; each out block first fuses its mirrored in block's output
with Dense(2d→d) (the long skip that gives U-ViT its name).
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
import pydantic
from flax import nnx
from pydantic import PositiveInt

from dew.config import ModelConfig, check_divisible
from dew.models.layers.attention import Attention, key_mask
from dew.models.layers.embeddings import fourier_features, fourier_frequencies
from dew.models.layers.mlp import GeGLU, gelu_exact
from dew.models.layers.norms import LayerNorm, RMSNorm
from dew.models.layers.patches import PatchEmbed, unpatchify
from dew.models.registry import register


class UViTConfig(ModelConfig):
    objective: ClassVar[str] = "edm"

    image_size: PositiveInt = 64
    channels: PositiveInt = 3
    patch: PositiveInt = 4
    width: PositiveInt = 384
    side_depth: PositiveInt = 3  # blocks in each of the in and out halves (plus one middle)
    heads: PositiveInt = 6
    ff_ratio: PositiveInt = 4  # GEGLU hidden width; its input projection is 2·ff_ratio·d wide
    # The learned position table is sized for this resolution; smaller images use its
    # top-left corner (the published count includes the whole table).
    position_table_size: PositiveInt = 512

    presets: ClassVar = {
        "small": {},
        "cpu-smoke": {
            "image_size": 16,
            "width": 32,
            "side_depth": 1,
            "heads": 2,
            "ff_ratio": 2,
            "position_table_size": 32,
        },
    }

    @pydantic.model_validator(mode="after")
    def _check_shapes(self):
        check_divisible("width", self.width, "heads", self.heads)
        check_divisible("image_size", self.image_size, "patch", self.patch)
        check_divisible("position_table_size", self.position_table_size, "patch", self.patch)
        if self.image_size > self.position_table_size:
            raise ValueError(
                f"image_size {self.image_size} exceeds position_table_size "
                f"{self.position_table_size}: the position table has no rows for it"
            )
        return self


class UViTBlock(nnx.Module):
    """Pre-norm block: RMSNorm → attention (no biases) → residual, RMSNorm → GEGLU → residual."""

    def __init__(self, config: UViTConfig, *, rngs: nnx.Rngs):
        d, dtype = config.width, jnp.dtype(config.dtype)
        self.attention_norm = RMSNorm(d, rngs=rngs)
        self.attention = Attention(
            d, config.heads, qkv_bias=False, dtype=dtype,
            attention_impl=config.attention_impl, rngs=rngs,
        )  # fmt: skip
        self.ff_norm = RMSNorm(d, rngs=rngs)
        self.ff = GeGLU(d, config.ff_ratio * d, activation=gelu_exact, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        x = x + self.attention(self.attention_norm(x), mask=mask)
        return x + self.ff(self.ff_norm(x))


@register("uvit", UViTConfig)
class UViT(nnx.Module):
    """model(x [B,H,W,C], t [B], text [B,77,768], text_mask [B,77]) -> [B,H,W,C] fp32."""

    def __init__(self, config: UViTConfig, *, rngs: nnx.Rngs):
        d, p, dtype = config.width, config.patch, jnp.dtype(config.dtype)
        self.config = config
        dense = lambda i, o: nnx.Linear(i, o, dtype=dtype, rngs=rngs)
        self.patch_embed = PatchEmbed(p, config.channels, d, dtype=dtype, rngs=rngs)
        table_side = config.position_table_size // p
        self.positions = nnx.Param(
            nnx.initializers.normal(0.02)(rngs.params(), (table_side, table_side, d))
        )
        self.time_frequencies = fourier_frequencies(d)
        self.time_in, self.time_out = dense(d, d), dense(d, d)
        self.text_in = dense(config.text_width, d)
        self.in_blocks = nnx.List([UViTBlock(config, rngs=rngs) for _ in range(config.side_depth)])
        self.mid_block = UViTBlock(config, rngs=rngs)
        self.skip_fusions = nnx.List([dense(2 * d, d) for _ in range(config.side_depth)])
        self.out_blocks = nnx.List([UViTBlock(config, rngs=rngs) for _ in range(config.side_depth)])
        self.final_norm = LayerNorm(d, rngs=rngs)
        self.head = dense(d, p * p * config.channels)

    def __call__(
        self, x: jax.Array, t: jax.Array, text: jax.Array, text_mask: jax.Array
    ) -> jax.Array:
        config, dtype = self.config, jnp.dtype(self.config.dtype)
        b, h, w, _ = x.shape
        p = config.patch
        grid_h, grid_w = h // p, w // p

        patches = self.patch_embed(x.astype(dtype))
        positions = self.positions[:grid_h, :grid_w].reshape(grid_h * grid_w, -1)
        patches = patches + positions.astype(dtype)[None]
        time = fourier_features(t, self.time_frequencies).astype(dtype)
        time = gelu_exact(self.time_out(gelu_exact(self.time_in(time))))
        words = self.text_in(text.astype(dtype))
        tokens = jnp.concatenate([time[:, None], words, patches], axis=1)

        # Padding caption tokens are never attended to; the time token and patches always are.
        keep = jnp.concatenate(
            [jnp.ones((b, 1), bool), text_mask, jnp.ones((b, grid_h * grid_w), bool)], axis=1
        )
        mask = key_mask(keep)

        skips = []
        for block in self.in_blocks:
            tokens = block(tokens, mask)
            skips.append(tokens)
        tokens = self.mid_block(tokens, mask)
        for fusion, block in zip(self.skip_fusions, self.out_blocks, strict=True):
            tokens = fusion(jnp.concatenate([tokens, skips.pop()], axis=-1))
            tokens = block(tokens, mask)

        patches = self.head(self.final_norm(tokens)[:, -grid_h * grid_w :])
        return unpatchify(patches, h, w, p).astype(jnp.float32)
