"""MMDiT family: simple_mmdit, hierarchical_mmdit and sd3_transformer.

Each block carries two token streams (caption and image), each with its own adaLN
modulation, q/k/v/o projections and MLP, that meet in one joint attention over the
concatenated sequence: `JointBlock` (dew.models.layers.joint), shared with Flux's
double-stream blocks. Call: `model(x [B,H,W,C], t [B], text [B,77,W], text_mask [B,77])
-> [B,H,W,C] fp32`.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
import pydantic
from flax import nnx
from pydantic import PositiveFloat, PositiveInt

from dew.config import ModelConfig, check_divisible
from dew.models.dit import DiTConfig, DiTStem
from dew.models.layers.attention import rope_frequencies
from dew.models.layers.conditioning import TextPool, TimeEmbedding, TimestepMlp
from dew.models.layers.embeddings import Constant, sincos_2d, sinusoidal
from dew.models.layers.joint import joint_blocks
from dew.models.layers.mlp import gelu_tanh
from dew.models.layers.modulation import ModulatedHead
from dew.models.layers.norms import LayerNorm
from dew.models.layers.patches import PatchEmbed, patchify, unpatchify
from dew.models.registry import register

# --------------------------------------------------------------------------------------
# simple_mmdit
# --------------------------------------------------------------------------------------


class SimpleMMDiTConfig(DiTConfig):
    """simple_dit's geometry, presets and checks; its blocks are dual-stream (no RoPE:
    positions are the fixed sin-cos table, so the inherited rope_theta is unused)."""


@register("simple_mmdit", SimpleMMDiTConfig)
class SimpleMMDiT(DiTStem):
    """simple_dit's stem (patch embedding + sin-cos positions; c = time embedding + pooled
    caption); caption tokens enter through Dense(768→d); dual-stream blocks; head."""

    def __init__(self, config: SimpleMMDiTConfig, *, rngs: nnx.Rngs):
        super().__init__(config, rngs=rngs)
        d, dtype = config.width, config.dtype
        self.text_embed = nnx.Linear(config.text_width, d, dtype=dtype, rngs=rngs)
        self.blocks = joint_blocks(config.depth, d, config.heads, config, rngs=rngs)
        self.head = ModulatedHead(d, d, config.patch**2 * config.channels, dtype=dtype, rngs=rngs)

    def __call__(self, x, t, text, text_mask=None):
        b, h, w, _ = x.shape
        image = self.embed_patches(x)
        mask = jnp.ones(text.shape[:2], bool) if text_mask is None else text_mask
        c = self.condition(t, text, mask)
        txt = self.text_embed(text)
        for block in self.blocks:
            # The last block's caption output is unused: XLA drops its o and MLP.
            image, txt = block(image, txt, c, text_mask=mask)
        return unpatchify(self.head(image, c), h, w, self.config.patch)


# --------------------------------------------------------------------------------------
# hierarchical_mmdit
# --------------------------------------------------------------------------------------


class HierarchicalMMDiTConfig(ModelConfig):
    """Encoder stages at `widths` (tokens 2×2-merged between them), decoder stages at the
    reversed widths but the last, with skips from the encoder; head dim fixed."""

    objective: ClassVar[str] = "edm"

    image_size: PositiveInt = 64
    channels: PositiveInt = 3
    patch: PositiveInt = 2
    widths: tuple[PositiveInt, ...] = pydantic.Field((192, 384, 576), min_length=1)
    head_dim: PositiveInt = 64
    blocks_per_stage: PositiveInt = 2
    mlp_ratio: PositiveInt = 4
    rope_theta: PositiveFloat = 1e4

    presets: ClassVar = {
        "small": {},
        "cpu-smoke": {
            "image_size": 16, "widths": (32, 64), "head_dim": 16, "blocks_per_stage": 1,
            "mlp_ratio": 2,
        },
    }  # fmt: skip

    @pydantic.model_validator(mode="after")
    def _check_shapes(self):
        for width in self.widths:
            check_divisible("width", width, "head_dim", self.head_dim)
        merges = len(self.widths) - 1
        if self.image_size % (self.patch * 2**merges):
            raise ValueError(
                f"image_size {self.image_size} with patch {self.patch} does not halve "
                f"{merges} times"
            )
        return self


class HierarchicalStage(nnx.Module):
    """The joint blocks of one stage, RoPE on the image tokens; the caption stream starts
    from the level's text embedding and its output is dropped."""

    def __init__(self, width: int, config: HierarchicalMMDiTConfig, *, rngs: nnx.Rngs):
        self.head_dim, self.rope_theta = config.head_dim, config.rope_theta
        self.blocks = joint_blocks(
            config.blocks_per_stage, width, width // config.head_dim, config, rngs=rngs
        )

    def __call__(self, image, txt, text_mask, c):
        angles = rope_frequencies(jnp.arange(image.shape[1]), self.head_dim, self.rope_theta)
        for block in self.blocks:
            image, txt = block(image, txt, c, text_mask=text_mask, image_angles=angles)
        return image


def _tokens_to_grid(x: jax.Array) -> jax.Array:
    b, n, c = x.shape
    g = int(round(n**0.5))
    return x.reshape(b, g, g, c)


class Merge(nnx.Module):
    """Concatenate each 2×2 group of tokens, affine LayerNorm(4C), Dense(4C→C_next)."""

    def __init__(self, width: int, next_width: int, *, rngs: nnx.Rngs, dtype):
        self.norm = LayerNorm(4 * width, rngs=rngs)
        self.proj = nnx.Linear(4 * width, next_width, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.proj(self.norm(patchify(_tokens_to_grid(x), 2)))


class Expand(nnx.Module):
    """Dense(C→4·C_prev), LayerNorm, each token rearranged into a 2×2 group."""

    def __init__(self, width: int, prev_width: int, *, rngs: nnx.Rngs, dtype):
        self.proj = nnx.Linear(width, 4 * prev_width, dtype=dtype, rngs=rngs)
        self.norm = LayerNorm(4 * prev_width, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        b, n, _ = x.shape
        side = 2 * int(round(n**0.5))
        up = unpatchify(self.norm(self.proj(x)), side, side, 2)
        return up.reshape(b, side * side, -1)


class Fuse(nnx.Module):
    """LayerNorm(2C) and Dense(2C→C) over [expanded, skip]."""

    def __init__(self, width: int, *, rngs: nnx.Rngs, dtype):
        self.norm = LayerNorm(2 * width, rngs=rngs)
        self.proj = nnx.Linear(2 * width, width, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array, skip: jax.Array) -> jax.Array:
        return self.proj(self.norm(jnp.concatenate([x, skip], axis=-1)))


@register("hierarchical_mmdit", HierarchicalMMDiTConfig)
class HierarchicalMMDiT(nnx.Module):
    """Per width level s: `cond_proj[s]` = Dense(base→d_s) of the base conditioning (no
    activation) and `txt_embed[s]` = Dense(768→d_s) of the raw caption, shared by the
    encoder and decoder stages of that width; the head is modulated by cond_proj[0]."""

    def __init__(self, config: HierarchicalMMDiTConfig, *, rngs: nnx.Rngs):
        self.config = config
        dtype, widths = config.dtype, config.widths
        base = widths[0]
        dense = lambda i, o: nnx.Linear(i, o, dtype=dtype, rngs=rngs)
        self.patch_embed = PatchEmbed(config.patch, config.channels, base, dtype=dtype, rngs=rngs)
        self.time_embed = TimeEmbedding(base, dtype=dtype, rngs=rngs)
        self.text_pool = TextPool(config.text_width, base, dtype=dtype, rngs=rngs)
        self.cond_proj = nnx.List([dense(base, w) for w in widths])
        self.txt_embed = nnx.List([dense(config.text_width, w) for w in widths])
        self.encoder = nnx.List([HierarchicalStage(w, config, rngs=rngs) for w in widths])
        self.merges = nnx.List(
            [Merge(a, b, dtype=dtype, rngs=rngs) for a, b in zip(widths, widths[1:], strict=False)]
        )
        levels = self.decoder_levels
        self.expands = nnx.List(
            [Expand(widths[s + 1], widths[s], dtype=dtype, rngs=rngs) for s in levels]
        )
        self.fuses = nnx.List([Fuse(widths[s], dtype=dtype, rngs=rngs) for s in levels])
        self.decoder = nnx.List([HierarchicalStage(widths[s], config, rngs=rngs) for s in levels])
        out = config.patch**2 * config.channels
        self.head = ModulatedHead(base, base, out, dtype=dtype, rngs=rngs)

    @property
    def decoder_levels(self) -> list[int]:
        """The width levels of the decoder stages, deepest first (every level but the last)."""
        return list(reversed(range(len(self.config.widths) - 1)))

    def __call__(self, x, t, text, text_mask=None):
        config = self.config
        b, h, w, _ = x.shape
        image = self.patch_embed(x.astype(config.dtype))
        mask = jnp.ones(text.shape[:2], bool) if text_mask is None else text_mask
        c0 = self.time_embed(t) + self.text_pool(text, mask)
        # Each level's caption embedding and conditioning is computed once and shared by its
        # encoder and decoder stages (one weight gradient each: the published count).
        levels = [
            (embed(text), proj(c0))
            for embed, proj in zip(self.txt_embed, self.cond_proj, strict=True)
        ]
        skips = []
        for s, stage in enumerate(self.encoder):
            txt, c = levels[s]
            image = stage(image, txt, mask, c)
            if s < len(self.merges):
                skips.append(image)
                image = self.merges[s](image)
        for s, expand, fuse, stage in zip(
            self.decoder_levels, self.expands, self.fuses, self.decoder, strict=True
        ):
            image = fuse(expand(image), skips.pop())
            txt, c = levels[s]
            image = stage(image, txt, mask, c)
        return unpatchify(self.head(image, levels[0][1]), h, w, config.patch)


# --------------------------------------------------------------------------------------
# sd3_transformer
# --------------------------------------------------------------------------------------


class SD3Config(ModelConfig):
    """SD3 MMDiT on 16-channel latents. The caption table is `text_width` wide: the context
    embedder reads its first `joint_attention_dim` features of every token, the pooled
    vector is token 0's first `pooled_dim` features."""

    objective: ClassVar[str] = "flow"

    image_size: PositiveInt = 32
    channels: PositiveInt = 16
    patch: PositiveInt = 2
    width: PositiveInt = 384
    depth: PositiveInt = 6
    heads: PositiveInt = 6
    mlp_ratio: PositiveInt = 4
    joint_attention_dim: PositiveInt = 4096
    pooled_dim: PositiveInt = 2048
    text_width: PositiveInt = 4096  # max(joint_attention_dim, pooled_dim)
    position_grid: PositiveInt = 16  # the sin-cos table's side; the image's grid is its centre
    timestep_features: PositiveInt = 256

    presets: ClassVar = {
        "small": {},
        "cpu-smoke": {
            "image_size": 8, "width": 16, "depth": 2, "heads": 2, "joint_attention_dim": 16,
            "pooled_dim": 32, "text_width": 32, "position_grid": 4,
        },
    }  # fmt: skip

    @pydantic.model_validator(mode="after")
    def _check_shapes(self):
        check_divisible("width", self.width, "heads", self.heads)
        check_divisible("image_size", self.image_size, "patch", self.patch)
        if self.image_size // self.patch > self.position_grid:
            raise ValueError(
                f"image_size {self.image_size} must split into patches of {self.patch} on at "
                f"most a {self.position_grid}-wide position grid"
            )
        for name, value in (("joint_attention_dim", self.joint_attention_dim),
                            ("pooled_dim", self.pooled_dim)):  # fmt: skip
            if value > self.text_width:
                raise ValueError(f"{name} {value} exceeds text_width {self.text_width}")
        return self


def centre_crop_positions(table_grid: int, grid: int, features: int) -> Constant:
    """The centre grid×grid window of a table_grid² sin-cos table, flattened (SD3's
    `pos_embed_max_size`)."""
    table = sincos_2d(table_grid, table_grid, features).reshape(table_grid, table_grid, features)
    top = (table_grid - grid) // 2
    return Constant(table[top : top + grid, top : top + grid].reshape(grid * grid, features))


@register("sd3_transformer", SD3Config)
class SD3Transformer(nnx.Module):
    """Conditioning: sinusoid(1000·t) MLP + pooled-caption MLP; context Dense(4096→d); joint
    blocks with the image first, the last one context-pre-only; (scale, shift) head."""

    def __init__(self, config: SD3Config, *, rngs: nnx.Rngs):
        self.config = config
        d, dtype = config.width, config.dtype
        grid = config.image_size // config.patch
        self.patch_embed = PatchEmbed(config.patch, config.channels, d, dtype=dtype, rngs=rngs)
        self.positions = centre_crop_positions(config.position_grid, grid, d)
        self.time_embed = TimestepMlp(config.timestep_features, d, dtype=dtype, rngs=rngs)
        self.pooled_embed = TimestepMlp(config.pooled_dim, d, dtype=dtype, rngs=rngs)
        self.context_embed = nnx.Linear(config.joint_attention_dim, d, dtype=dtype, rngs=rngs)
        self.blocks = joint_blocks(
            config.depth, d, config.heads, config, activation=gelu_tanh, eps=1e-6, first="image",
            text_pre_only_last=True, rngs=rngs,
        )  # fmt: skip
        self.head = ModulatedHead(
            d, d, config.patch**2 * config.channels, eps=1e-6, scale_first=True, dtype=dtype,
            rngs=rngs,
        )  # fmt: skip

    def __call__(self, x, t, text, text_mask=None):
        config = self.config
        b, h, w, _ = x.shape
        dtype = jnp.dtype(config.dtype)
        image = self.patch_embed(x.astype(dtype)) + self.positions(dtype)[None]
        timestep = sinusoidal(1000.0 * t, config.timestep_features, cos_first=True)
        c = self.time_embed(timestep) + self.pooled_embed(text[:, 0, : config.pooled_dim])
        context = self.context_embed(text[..., : config.joint_attention_dim])
        for block in self.blocks:
            image, context = block(image, context, c, text_mask=text_mask)
        return unpatchify(self.head(image, c), h, w, config.patch)
