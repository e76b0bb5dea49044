"""flux_transformer: Flux's double-stream (MMDiT) blocks followed by single-stream blocks.

Latents [B, H, W, C] are pixel-unshuffled 2×2 into (H/2)(W/2) tokens of 4C channels
(patch 1 after the unshuffle) and embedded by a Dense. RoPE runs over three position axes
on interleaved channel pairs: caption tokens have ids (0, 0, 0), image tokens (0, row, col).
Call: `model(x [B,H,W,C], t [B], text [B,77,W], text_mask [B,77]) -> [B,H,W,C] fp32`.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import jax
import jax.numpy as jnp
import pydantic
from flax import nnx

from dew.config import PresetConfig
from dew.models.layers.attention import (
    Attention,
    AttentionImpl,
    apply_rope,
    attention,
    rope_frequencies,
)
from dew.models.layers.embeddings import sinusoidal
from dew.models.layers.mlp import gelu_tanh
from dew.models.layers.modulation import AdaLNModulation, modulate
from dew.models.layers.norms import LayerNorm
from dew.models.mmdit import JointBlock, ModulatedHead, TimestepMlp
from dew.models.registry import register


class FluxConfig(PresetConfig):
    """The caption table is `text_width` wide: the context embedder reads the first
    `joint_attention_dim` features of every token, the pooled vector token 0's first
    `pooled_dim`."""

    objective: ClassVar[str] = "flow"
    image_size: int = 32
    channels: int = 16
    heads: int = 6
    head_dim: int = 64
    double_blocks: int = 3
    single_blocks: int = 3
    mlp_ratio: int = 4
    rope_axes: tuple[int, ...] = (16, 24, 24)
    rope_theta: float = 1e4
    joint_attention_dim: int = 4096
    pooled_dim: int = 768
    timestep_features: int = 256
    guidance: float = 3.5
    dtype: Literal["bfloat16", "float32"] = "bfloat16"
    attention_impl: AttentionImpl = "xla"

    presets: ClassVar = {
        "small": {},
        "cpu-smoke": {
            "image_size": 8, "heads": 2, "head_dim": 12, "double_blocks": 1, "single_blocks": 1,
            "rope_axes": (4, 4, 4), "joint_attention_dim": 16, "pooled_dim": 8,
        },
    }  # fmt: skip

    @property
    def width(self) -> int:
        return self.heads * self.head_dim

    @property
    def text_width(self) -> int:
        """Width of the caption table the Trainer builds for this model."""
        return max(self.joint_attention_dim, self.pooled_dim)

    @pydantic.model_validator(mode="after")
    def _check_shapes(self):
        if sum(self.rope_axes) != self.head_dim or any(a % 2 for a in self.rope_axes):
            raise ValueError(
                f"rope_axes {self.rope_axes} must be even and sum to head_dim {self.head_dim}"
            )
        if self.image_size % 2:
            raise ValueError(f"image_size {self.image_size} must be even (2×2 unshuffle)")
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

    def __init__(self, cfg: FluxConfig, *, rngs: nnx.Rngs):
        d, dt = cfg.width, cfg.dtype
        self.modulation = AdaLNModulation(d, d, 3, dtype=dt, rngs=rngs)
        self.norm = LayerNorm(d, affine=False, eps=1e-6, rngs=rngs)
        self.attn = Attention(
            d, cfg.heads, out_projection=False, qk_norm=True, dtype=dt,
            attention_impl=cfg.attention_impl, rngs=rngs,
        )  # fmt: skip
        self.mlp = nnx.Linear(d, cfg.mlp_ratio * d, dtype=dt, rngs=rngs)
        self.out = nnx.Linear((1 + cfg.mlp_ratio) * d, d, dtype=dt, rngs=rngs)
        self.attention_impl = cfg.attention_impl

    def __call__(self, x, c, *, mask, angles):
        shift, scale, gate = self.modulation(c)
        h = modulate(self.norm(x), shift, scale)
        q, k, v = self.attn.project_qkv(h)
        q, k = apply_rope(q, angles, interleaved=True), apply_rope(k, angles, interleaved=True)
        y = self.attn.project_out(attention(q, k, v, mask=mask, impl=self.attention_impl))
        out = self.out(jnp.concatenate([y, gelu_tanh(self.mlp(h))], axis=-1))
        return x + gate[:, None] * out


@register("flux_transformer", FluxConfig)
class FluxTransformer(nnx.Module):
    """Conditioning: sinusoid(1000·t) MLP + sinusoid(1000·guidance) MLP + pooled-caption
    MLP; context Dense(4096→d); double blocks (caption first, qk-norm), single blocks over
    [caption, image]; the head drops the caption tokens."""

    def __init__(self, cfg: FluxConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        d, dt = cfg.width, cfg.dtype
        self.x_embed = nnx.Linear(4 * cfg.channels, d, dtype=dt, rngs=rngs)
        self.time_embed = TimestepMlp(cfg.timestep_features, d, dtype=dt, rngs=rngs)
        self.guidance_embed = TimestepMlp(cfg.timestep_features, d, dtype=dt, rngs=rngs)
        self.pooled_embed = TimestepMlp(cfg.pooled_dim, d, dtype=dt, rngs=rngs)
        self.context_embed = nnx.Linear(cfg.joint_attention_dim, d, dtype=dt, rngs=rngs)
        self.double_blocks = nnx.List(
            [
                JointBlock(
                    d,
                    cfg.heads,
                    d,
                    mlp_ratio=cfg.mlp_ratio,
                    activation=gelu_tanh,
                    eps=1e-6,
                    qk_norm=True,
                    first="text",
                    rope_interleaved=True,
                    dtype=dt,
                    attention_impl=cfg.attention_impl,
                    rngs=rngs,
                )  # fmt: skip
                for _ in range(cfg.double_blocks)
            ]
        )
        self.single_blocks = nnx.List(
            [SingleStreamBlock(cfg, rngs=rngs) for _ in range(cfg.single_blocks)]
        )
        self.head = ModulatedHead(
            d, d, 4 * cfg.channels, eps=1e-6, scale_first=True, dtype=dt, rngs=rngs
        )

    def __call__(self, x, t, text, text_mask=None):
        cfg = self.cfg
        b, h, w, ch = x.shape
        dt = jnp.dtype(cfg.dtype)
        # 2×2 pixel-unshuffle: [B, H, W, C] -> [B, (H/2)(W/2), (2, 2, C)]
        tokens = x.astype(dt).reshape(b, h // 2, 2, w // 2, 2, ch).transpose(0, 1, 3, 2, 4, 5)
        image = self.x_embed(tokens.reshape(b, (h // 2) * (w // 2), 4 * ch))
        embed = lambda v: sinusoidal(1000.0 * v, cfg.timestep_features, cos_first=True)
        guidance = jnp.full_like(t, cfg.guidance)
        c = (
            self.time_embed(embed(t))
            + self.guidance_embed(embed(guidance))
            + self.pooled_embed(text[:, 0, : cfg.pooled_dim])
        )
        context = self.context_embed(text[..., : cfg.joint_attention_dim])

        n_text = context.shape[1]
        text_angles = rope_angles(jnp.zeros((n_text, 3), jnp.int32), cfg.rope_axes, cfg.rope_theta)
        image_angles = rope_angles(image_ids(h // 2), cfg.rope_axes, cfg.rope_theta)
        for block in self.double_blocks:
            image, context = block(
                image, context, c, text_mask=text_mask, image_angles=image_angles,
                text_angles=text_angles,
            )  # fmt: skip

        joint = jnp.concatenate([context, image], axis=1)
        mask = None
        if text_mask is not None:
            keys = jnp.concatenate([text_mask, jnp.ones(image.shape[:2], bool)], axis=1)
            mask = keys[:, None, None, :]
        angles = jnp.concatenate([text_angles, image_angles], axis=0)
        for block in self.single_blocks:
            joint = block(joint, c, mask=mask, angles=angles)

        out = self.head(joint[:, n_text:], c)  # [B, (H/2)(W/2), (2, 2, C)] fp32
        out = out.reshape(b, h // 2, w // 2, 2, 2, ch).transpose(0, 1, 3, 2, 4, 5)
        return out.reshape(b, h, w, ch)
