"""multimodal_transformer: the causal_transformer decoder reading one image per row.

A SigLIP-style vision tower (patch convolution with bias, learned positions, pre-LN ViT
layers with tanh-GELU MLPs, a final LayerNorm, no pooling head) encodes the image; a
projector average-pools the patch grid 2×2, RMS-normalises with a (1 + w) scale in fp32
and maps to the decoder's width without bias. The first `image_tokens` positions of every
row hold the image token id; their embeddings are replaced by the projected features and
the decoder attends causally over the whole row. Call: `model(tokens [B, S], images
[B, H, W, 3] in [-1, 1]) -> final hidden [B, S, d]`; the LM objective applies the tied head.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
import pydantic
from flax import nnx
from pydantic import NonNegativeInt, PositiveInt

from dew.config import check_divisible
from dew.models.decoder import CausalTransformer, CausalTransformerConfig
from dew.models.layers.attention import Attention
from dew.models.layers.mlp import Mlp, gelu_tanh
from dew.models.layers.norms import LayerNorm, RMSNorm
from dew.models.layers.patches import PatchEmbed
from dew.models.registry import register

VISION_LN_EPS = 1e-6
POOL = 2  # the projector's average pool: 2×2 patches per image token


class MultimodalConfig(CausalTransformerConfig):
    """The decoder's fields plus the vision tower's; one square RGB image per row."""

    objective: ClassVar[str] = "multimodal_lm"

    image_token_id: NonNegativeInt = 50303
    image_size: PositiveInt = 448
    patch: PositiveInt = 14
    vision_width: PositiveInt = 1152
    vision_depth: PositiveInt = 4
    vision_heads: PositiveInt = 16
    vision_mlp: PositiveInt = 4304

    presets: ClassVar = {
        "small": {},
        "cpu-smoke": {
            **CausalTransformerConfig.presets["cpu-smoke"],
            "seq_len": 15,
            "head_chunks": 3,
            "image_token_id": 255,
            "image_size": 16,
            "patch": 8,
            "vision_width": 32,
            "vision_depth": 1,
            "vision_heads": 2,
            "vision_mlp": 128,
        },
    }

    @property
    def image_tokens(self) -> int:
        return (self.image_size // self.patch // POOL) ** 2

    @pydantic.model_validator(mode="after")
    def _check_image(self):
        check_divisible("image_size", self.image_size, f"patch × {POOL} =", self.patch * POOL)
        check_divisible("vision_width", self.vision_width, "vision_heads", self.vision_heads)
        if self.image_token_id >= self.vocab_size:
            raise ValueError(
                f"image_token_id {self.image_token_id} is outside the vocabulary"
                f" 0-{self.vocab_size - 1}"
            )
        if self.image_tokens > self.seq_len:
            raise ValueError(
                f"{self.image_tokens} image tokens do not fit a row of seq_len {self.seq_len}"
            )
        return self


class VisionLayer(nnx.Module):
    """Pre-LN ViT layer: LN → attention (bias) → residual, LN → tanh-GELU MLP → residual."""

    def __init__(self, config: MultimodalConfig, *, rngs: nnx.Rngs):
        dtype = config.dtype
        width = config.vision_width
        self.attention_norm = LayerNorm(width, eps=VISION_LN_EPS, rngs=rngs)
        self.attention = Attention(
            width, config.vision_heads, qkv_bias=True, dtype=dtype,
            attention_impl=config.attention_impl, rngs=rngs,
        )  # fmt: skip
        self.mlp_norm = LayerNorm(width, eps=VISION_LN_EPS, rngs=rngs)
        self.mlp = Mlp(width, config.vision_mlp, activation=gelu_tanh, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attention(self.attention_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class VisionTower(nnx.Module):
    """SigLIP-style encoder, no pooling head: images [B, H, W, 3] -> patches [B, N, width]."""

    def __init__(self, config: MultimodalConfig, *, rngs: nnx.Rngs):
        dtype = config.dtype
        width, grid = config.vision_width, config.image_size // config.patch
        self.patch_embed = PatchEmbed(config.patch, 3, width, dtype=dtype, rngs=rngs)
        self.positions = nnx.Param(
            jax.random.normal(rngs.params(), (grid * grid, width), jnp.float32) * width**-0.5
        )
        self.layers = nnx.List([VisionLayer(config, rngs=rngs) for _ in range(config.vision_depth)])
        self.post_norm = LayerNorm(width, eps=VISION_LN_EPS, rngs=rngs)

    def __call__(self, images: jax.Array) -> jax.Array:
        x = self.patch_embed(images)
        x = x + self.positions[...].astype(x.dtype)
        for layer in self.layers:
            x = layer(x)
        return self.post_norm(x)


class Projector(nnx.Module):
    """Patches on their grid, average-pooled 2×2, RMSNorm (1 + w) in fp32, Dense without bias."""

    def __init__(self, config: MultimodalConfig, *, rngs: nnx.Rngs):
        self.grid = config.image_size // config.patch
        self.norm = RMSNorm(config.vision_width, eps=1e-6, unit_offset=True, rngs=rngs)
        self.proj = nnx.Linear(
            config.vision_width, config.width, use_bias=False, dtype=config.dtype,
            rngs=rngs,
        )  # fmt: skip

    def __call__(self, patches: jax.Array) -> jax.Array:
        b, _, c = patches.shape
        g, p = self.grid, POOL
        x = patches.astype(jnp.float32).reshape(b, g // p, p, g // p, p, c).mean(axis=(2, 4))
        x = self.norm(x.reshape(b, -1, c))
        return self.proj(x)


@register("multimodal_transformer", MultimodalConfig)
class MultimodalTransformer(nnx.Module):
    def __init__(self, config: MultimodalConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.decoder = CausalTransformer(config, rngs=rngs)
        self.vision = VisionTower(config, rngs=rngs)
        self.projector = Projector(config, rngs=rngs)

    def head_table(self) -> jax.Array:
        """The tied output projection [V, d] in fp32 (the decoder's embedding)."""
        return self.decoder.head_table()

    def __call__(self, tokens: jax.Array, images: jax.Array) -> jax.Array:
        """tokens [B, S] (the first `image_tokens` hold the image token id), images
        [B, H, W, 3] in [-1, 1] -> final-normed hidden states [B, S, d]."""
        n = self.config.image_tokens
        image_features = self.projector(self.vision(images))
        text = self.decoder.embed_tokens(tokens[:, n:])
        x = jnp.concatenate([image_features.astype(text.dtype), text], axis=1)
        return self.decoder.run_layers(x)
