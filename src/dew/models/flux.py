"""flux_transformer: Flux's double-stream (MMDiT) blocks followed by single-stream blocks.

Latents [B, H, W, C] are pixel-unshuffled 2×2 into (H/2)(W/2) tokens of 4C channels
(patch 1 after the unshuffle) and embedded by a Dense. RoPE runs over three position axes
on interleaved channel pairs: caption tokens have ids (0, 0, 0), image tokens (0, row, col).
Call: `model(x [B,H,W,C], t [B], text [B,77,W], text_mask [B,77]) -> [B,H,W,C] fp32`.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
import pydantic
from flax import nnx
from pydantic import PositiveFloat, PositiveInt

from dew.config import ModelConfig, check_divisible
from dew.models.layers.attention import (
    Attention,
    apply_rope,
    attention,
    key_mask,
    rope_frequencies,
)
from dew.models.layers.conditioning import TimestepMlp
from dew.models.layers.embeddings import sinusoidal
from dew.models.layers.joint import joint_blocks
from dew.models.layers.mlp import gelu_tanh
from dew.models.layers.modulation import AdaLNModulation, ModulatedHead, modulate
from dew.models.layers.norms import LayerNorm
from dew.models.layers.patches import patchify, unpatchify
from dew.models.registry import register


class FluxConfig(ModelConfig):
    """The caption table is `text_width` wide: the context embedder reads the first
    `joint_attention_dim` features of every token, the pooled vector token 0's first
    `pooled_dim`."""

    objective: ClassVar[str] = "flow"

    image_size: PositiveInt = 32
    channels: PositiveInt = 16
    heads: PositiveInt = 6
    head_dim: PositiveInt = 64
    double_blocks: PositiveInt = 3
    single_blocks: PositiveInt = 3
    mlp_ratio: PositiveInt = 4
    rope_axes: tuple[PositiveInt, ...] = (16, 24, 24)
    rope_theta: PositiveFloat = 1e4
    joint_attention_dim: PositiveInt = 4096
    pooled_dim: PositiveInt = 768
    text_width: PositiveInt = 4096  # max(joint_attention_dim, pooled_dim)
    timestep_features: PositiveInt = 256
    guidance: float = 3.5

    presets: ClassVar = {
        "small": {},
        "cpu-smoke": {
            "image_size": 8, "heads": 2, "head_dim": 12, "double_blocks": 1, "single_blocks": 1,
            "rope_axes": (4, 4, 4), "joint_attention_dim": 16, "pooled_dim": 8, "text_width": 16,
        },
    }  # fmt: skip

    @property
    def width(self) -> int:
        return self.heads * self.head_dim

    @pydantic.model_validator(mode="after")
    def _check_shapes(self):
        if sum(self.rope_axes) != self.head_dim or any(a % 2 for a in self.rope_axes):
            raise ValueError(
                f"rope_axes {self.rope_axes} must be even and sum to head_dim {self.head_dim}"
            )
        check_divisible("image_size", self.image_size, "the unshuffle patch", 2)
        for name, value in (("joint_attention_dim", self.joint_attention_dim),
                            ("pooled_dim", self.pooled_dim)):  # fmt: skip
            if value > self.text_width:
                raise ValueError(f"{name} {value} exceeds text_width {self.text_width}")
        return self


def rope_angles(ids: jax.Array, axes: tuple[int, ...], theta: float) -> jax.Array:
    """Position ids [S, len(axes)] -> angles [S, head_dim / 2], one block per axis."""
    return jnp.concatenate(
        [rope_frequencies(ids[:, i], dim, theta) for i, dim in enumerate(axes)], axis=-1
    )


def image_ids(grid: int) -> jax.Array:
    rows, cols = jnp.meshgrid(jnp.arange(grid), jnp.arange(grid), indexing="ij")
    return jnp.stack([jnp.zeros_like(rows), rows, cols], axis=-1).reshape(grid * grid, 3)


class SingleStreamBlock(nnx.Module):
    """Dense(d→3d) modulation (shift, scale, gate); modulated LN; in parallel a tanh-GELU
    Dense(d→4d) and qk-normed attention without output projection; Dense(5d→d) of both,
    gated residual."""

    def __init__(self, config: FluxConfig, *, rngs: nnx.Rngs):
        d, dtype = config.width, config.dtype
        self.modulation = AdaLNModulation(d, d, 3, dtype=dtype, rngs=rngs)
        self.norm = LayerNorm(d, affine=False, eps=1e-6, rngs=rngs)
        self.attn = Attention(
            d, config.heads, out_projection=False, qk_norm=True, dtype=dtype,
            attention_impl=config.attention_impl, rngs=rngs,
        )  # fmt: skip
        self.mlp = nnx.Linear(d, config.mlp_ratio * d, dtype=dtype, rngs=rngs)
        self.out = nnx.Linear((1 + config.mlp_ratio) * d, d, dtype=dtype, rngs=rngs)

    def __call__(self, x, c, *, mask, angles):
        shift, scale, gate = self.modulation(c)
        h = modulate(self.norm(x), shift, scale)
        q, k, v = self.attn.project_qkv(h)
        q, k = apply_rope(q, angles, interleaved=True), apply_rope(k, angles, interleaved=True)
        y = attention(q, k, v, mask=mask, impl=self.attn.attention_impl)
        out = self.out(jnp.concatenate([self.attn.project_out(y), gelu_tanh(self.mlp(h))], -1))
        return x + gate[:, None] * out


@register("flux_transformer", FluxConfig)
class FluxTransformer(nnx.Module):
    """Conditioning: sinusoid(1000·t) MLP + sinusoid(1000·guidance) MLP + pooled-caption
    MLP; context Dense(4096→d); double blocks (caption first, qk-norm), single blocks over
    [caption, image]; the head drops the caption tokens."""

    def __init__(self, config: FluxConfig, *, rngs: nnx.Rngs):
        self.config = config
        d, dtype = config.width, config.dtype
        self.x_embed = nnx.Linear(4 * config.channels, d, dtype=dtype, rngs=rngs)
        self.time_embed = TimestepMlp(config.timestep_features, d, dtype=dtype, rngs=rngs)
        self.guidance_embed = TimestepMlp(config.timestep_features, d, dtype=dtype, rngs=rngs)
        self.pooled_embed = TimestepMlp(config.pooled_dim, d, dtype=dtype, rngs=rngs)
        self.context_embed = nnx.Linear(config.joint_attention_dim, d, dtype=dtype, rngs=rngs)
        self.double_blocks = joint_blocks(
            config.double_blocks, d, config.heads, config, activation=gelu_tanh, eps=1e-6,
            qk_norm=True, first="text", rope_interleaved=True, rngs=rngs,
        )  # fmt: skip
        self.single_blocks = nnx.List(
            [SingleStreamBlock(config, rngs=rngs) for _ in range(config.single_blocks)]
        )
        self.head = ModulatedHead(
            d, d, 4 * config.channels, eps=1e-6, scale_first=True, dtype=dtype, rngs=rngs
        )

    def __call__(self, x, t, text, text_mask=None):
        config = self.config
        b, h, w, _ = x.shape
        dtype = jnp.dtype(config.dtype)
        image = self.x_embed(patchify(x.astype(dtype), 2))  # 2×2 pixel-unshuffle, then Dense
        embed = lambda v: sinusoidal(1000.0 * v, config.timestep_features, cos_first=True)
        guidance = jnp.full_like(t, config.guidance)
        c = (
            self.time_embed(embed(t))
            + self.guidance_embed(embed(guidance))
            + self.pooled_embed(text[:, 0, : config.pooled_dim])
        )
        context = self.context_embed(text[..., : config.joint_attention_dim])

        n_text = context.shape[1]
        axes, theta = config.rope_axes, config.rope_theta
        text_angles = rope_angles(jnp.zeros((n_text, 3), jnp.int32), axes, theta)
        image_angles = rope_angles(image_ids(h // 2), axes, theta)
        for block in self.double_blocks:
            image, context = block(
                image, context, c, text_mask=text_mask, image_angles=image_angles,
                text_angles=text_angles,
            )  # fmt: skip

        joint = jnp.concatenate([context, image], axis=1)
        mask = None
        if text_mask is not None:
            mask = key_mask(jnp.concatenate([text_mask, jnp.ones(image.shape[:2], bool)], 1))
        angles = jnp.concatenate([text_angles, image_angles], axis=0)
        for block in self.single_blocks:
            joint = block(joint, c, mask=mask, angles=angles)

        out = self.head(joint[:, n_text:], c)  # [B, (H/2)(W/2), (2, 2, C)] fp32
        return unpatchify(out, h, w, 2)
