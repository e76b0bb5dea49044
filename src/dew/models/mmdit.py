"""MMDiT family: simple_mmdit, hierarchical_mmdit and sd3_transformer.

Each block carries two token streams (caption and image), each with its own adaLN
modulation, q/k/v/o projections and MLP, that meet in one joint attention over the
concatenated sequence. `JointBlock` is that block for every family here and for Flux's
double-stream blocks (dew.models.flux). Call: `model(x [B,H,W,C], t [B], text [B,77,W],
text_mask [B,77]) -> [B,H,W,C] fp32`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Literal

import jax
import jax.numpy as jnp
import pydantic
from flax import nnx

from dew.config import PresetConfig
from dew.models.dit import DiTConfig, TextPool, TimeEmbedding
from dew.models.layers.attention import (
    Attention,
    AttentionImpl,
    apply_rope,
    attention,
    rope_frequencies,
)
from dew.models.layers.embeddings import Constant, PatchEmbed, sincos_2d, sinusoidal
from dew.models.layers.mlp import Mlp, gelu_exact, gelu_tanh
from dew.models.layers.modulation import AdaLNModulation, modulate
from dew.models.layers.norms import LayerNorm
from dew.models.registry import register

Dtype = Literal["bfloat16", "float32"]


class JointStream(nnx.Module):
    """One stream of a joint block: adaLN (6 chunks; 2 when `pre_only`), non-affine LNs,
    q/k/v/o and an MLP. A `pre_only` stream only feeds keys and values to the attention
    (SD3's last context stream): no output projection, no MLP."""

    def __init__(
        self,
        features: int,
        heads: int,
        cond_features: int,
        *,
        rngs: nnx.Rngs,
        mlp_hidden: int,
        activation: Callable[[jax.Array], jax.Array],
        eps: float,
        qk_norm: bool,
        pre_only: bool,
        dtype,
        attention_impl: AttentionImpl,
    ):
        self.pre_only = pre_only
        self.modulation = AdaLNModulation(
            cond_features, features, 2 if pre_only else 6, dtype=dtype, rngs=rngs
        )
        self.norm1 = LayerNorm(features, affine=False, eps=eps, rngs=rngs)
        self.attn = Attention(
            features, heads, out_projection=not pre_only, qk_norm=qk_norm,
            dtype=dtype, attention_impl=attention_impl, rngs=rngs,
        )  # fmt: skip
        if pre_only:
            self.norm2 = self.mlp = None
        else:
            self.norm2 = LayerNorm(features, affine=False, eps=eps, rngs=rngs)
            self.mlp = Mlp(features, mlp_hidden, activation=activation, dtype=dtype, rngs=rngs)

    def qkv(self, x: jax.Array, c: jax.Array):
        chunks = self.modulation(c)
        q, k, v = self.attn.project_qkv(modulate(self.norm1(x), chunks[0], chunks[1]))
        return (q, k, v), chunks

    def finish(self, x: jax.Array, y: jax.Array, chunks) -> jax.Array:
        _, _, gate1, shift2, scale2, gate2 = chunks
        x = x + gate1[:, None] * self.attn.project_out(y)
        return x + gate2[:, None] * self.mlp(modulate(self.norm2(x), shift2, scale2))


class JointBlock(nnx.Module):
    """Two streams, one joint attention. `first` names the stream whose tokens lead the
    joint sequence ("image" for SD3, "text" for Flux and simple/hierarchical MMDiT)."""

    def __init__(
        self,
        features: int,
        heads: int,
        cond_features: int,
        *,
        rngs: nnx.Rngs,
        text_features: int | None = None,
        mlp_ratio: int = 4,
        activation: Callable[[jax.Array], jax.Array] = gelu_exact,
        eps: float = 1e-5,
        qk_norm: bool = False,
        text_pre_only: bool = False,
        first: Literal["image", "text"] = "text",
        rope_interleaved: bool = False,
        dtype=jnp.bfloat16,
        attention_impl: AttentionImpl = "xla",
    ):
        common = dict(
            heads=heads, cond_features=cond_features, mlp_hidden=mlp_ratio * features,
            activation=activation, eps=eps, qk_norm=qk_norm, dtype=dtype,
            attention_impl=attention_impl, rngs=rngs,
        )  # fmt: skip
        self.image = JointStream(features, pre_only=False, **common)
        self.text = JointStream(text_features or features, pre_only=text_pre_only, **common)
        self.first, self.rope_interleaved = first, rope_interleaved
        self.attention_impl = attention_impl

    def __call__(
        self,
        image: jax.Array,
        text: jax.Array,
        c: jax.Array,
        *,
        text_mask: jax.Array | None = None,
        image_angles: jax.Array | None = None,
        text_angles: jax.Array | None = None,
    ) -> tuple[jax.Array, jax.Array | None]:
        (qi, ki, vi), image_chunks = self.image.qkv(image, c)
        (qt, kt, vt), text_chunks = self.text.qkv(text, c)
        rope = lambda a, angles: (
            a if angles is None else apply_rope(a, angles, interleaved=self.rope_interleaved)
        )
        qi, ki = rope(qi, image_angles), rope(ki, image_angles)
        qt, kt = rope(qt, text_angles), rope(kt, text_angles)
        mask = None
        if text_mask is not None:
            image_keys = jnp.ones(image.shape[:2], bool)
            keys = [image_keys, text_mask] if self.first == "image" else [text_mask, image_keys]
            mask = jnp.concatenate(keys, axis=1)[:, None, None, :]
        order = (lambda i, t: (i, t)) if self.first == "image" else (lambda i, t: (t, i))
        joint = [jnp.concatenate(order(a, b), axis=1) for a, b in ((qi, qt), (ki, kt), (vi, vt))]
        y = attention(*joint, mask=mask, impl=self.attention_impl)
        n_first = (image if self.first == "image" else text).shape[1]
        y_first, y_second = y[:, :n_first], y[:, n_first:]
        yi, yt = (y_first, y_second) if self.first == "image" else (y_second, y_first)
        image = self.image.finish(image, yi, image_chunks)
        text = None if self.text.pre_only else self.text.finish(text, yt, text_chunks)
        return image, text


class ModulatedHead(nnx.Module):
    """SiLU(c) → Dense(c→2d) (shift, scale), non-affine LN, modulate, zero-init Dense(d→out)."""

    def __init__(
        self, features: int, cond_features: int, out: int, *, rngs, eps=1e-5, dtype,
        scale_first: bool = False,
    ):  # fmt: skip
        self.scale_first = scale_first
        self.modulation = AdaLNModulation(cond_features, features, 2, dtype=dtype, rngs=rngs)
        self.norm = LayerNorm(features, affine=False, eps=eps, rngs=rngs)
        self.proj = nnx.Linear(
            features, out, kernel_init=nnx.initializers.zeros_init(), dtype=dtype, rngs=rngs
        )

    def __call__(self, x: jax.Array, c: jax.Array) -> jax.Array:
        a, b = self.modulation(c)
        shift, scale = (b, a) if self.scale_first else (a, b)
        return self.proj(modulate(self.norm(x), shift, scale)).astype(jnp.float32)


def unpatchify(tokens: jax.Array, height: int, width: int, patch: int) -> jax.Array:
    """[B, (H/p)(W/p), p·p·C] -> [B, H, W, C]."""
    b = tokens.shape[0]
    channels = tokens.shape[-1] // (patch * patch)
    out = tokens.reshape(b, height // patch, width // patch, patch, patch, channels)
    return out.transpose(0, 1, 3, 2, 4, 5).reshape(b, height, width, channels)


# --------------------------------------------------------------------------------------
# simple_mmdit
# --------------------------------------------------------------------------------------


class SimpleMMDiTConfig(DiTConfig):
    """simple_dit's geometry, presets and checks; its blocks are dual-stream (no RoPE:
    positions are the fixed sin-cos table, so the inherited rope_theta is unused)."""


@register("simple_mmdit", SimpleMMDiTConfig)
class SimpleMMDiT(nnx.Module):
    """Patch embedding + sin-cos positions; c = time embedding + pooled caption (as
    simple_dit's); caption tokens enter through Dense(768→d); dual-stream blocks; head."""

    def __init__(self, cfg: SimpleMMDiTConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        d, dt = cfg.width, cfg.dtype
        grid = cfg.image_size // cfg.patch
        self.patch_embed = PatchEmbed(cfg.patch, cfg.channels, d, dtype=dt, rngs=rngs)
        self.positions = Constant(sincos_2d(grid, grid, d))
        self.time_embed = TimeEmbedding(d, dtype=dt, rngs=rngs)
        self.text_pool = TextPool(cfg.text_width, d, dtype=dt, rngs=rngs)
        self.text_embed = nnx.Linear(cfg.text_width, d, dtype=dt, rngs=rngs)
        self.blocks = nnx.List(
            [
                JointBlock(
                    d,
                    cfg.heads,
                    d,
                    mlp_ratio=cfg.mlp_ratio,
                    dtype=dt,
                    attention_impl=cfg.attention_impl,
                    rngs=rngs,
                )  # fmt: skip
                for _ in range(cfg.depth)
            ]
        )
        self.head = ModulatedHead(d, d, cfg.patch**2 * cfg.channels, dtype=dt, rngs=rngs)

    def __call__(self, x, t, text, text_mask=None):
        cfg = self.cfg
        b, h, w, _ = x.shape
        dt = jnp.dtype(cfg.dtype)
        image = self.patch_embed(x.astype(dt)) + self.positions(dt)[None]
        mask = jnp.ones(text.shape[:2], bool) if text_mask is None else text_mask
        c = self.time_embed(t) + self.text_pool(text, mask)
        txt = self.text_embed(text)
        for block in self.blocks:
            # The last block's caption output is unused: XLA drops its o and MLP.
            image, txt = block(image, txt, c, text_mask=mask)
        return unpatchify(self.head(image, c), h, w, cfg.patch)


# --------------------------------------------------------------------------------------
# hierarchical_mmdit
# --------------------------------------------------------------------------------------


class HierarchicalMMDiTConfig(PresetConfig):
    """Encoder stages at `widths` (tokens 2×2-merged between them), decoder stages at the
    reversed widths but the last, with skips from the encoder; head dim fixed."""

    objective: ClassVar[str] = "edm"
    image_size: int = 64
    channels: int = 3
    patch: int = 2
    widths: tuple[int, ...] = (192, 384, 576)
    head_dim: int = 64
    blocks_per_stage: int = 2
    mlp_ratio: int = 4
    text_width: int = 768
    rope_theta: float = 1e4
    dtype: Dtype = "bfloat16"
    attention_impl: AttentionImpl = "xla"

    presets: ClassVar = {
        "small": {},
        "cpu-smoke": {
            "image_size": 16, "widths": (32, 64), "head_dim": 16, "blocks_per_stage": 1,
            "mlp_ratio": 2,
        },
    }  # fmt: skip

    @pydantic.model_validator(mode="after")
    def _check_shapes(self):
        for w in self.widths:
            if w % self.head_dim:
                raise ValueError(f"width {w} is not divisible by head_dim {self.head_dim}")
        grid = self.image_size // self.patch
        if self.image_size % self.patch or grid % 2 ** (len(self.widths) - 1):
            raise ValueError(
                f"image_size {self.image_size} with patch {self.patch} does not halve "
                f"{len(self.widths) - 1} times"
            )
        return self


class HierarchicalStage(nnx.Module):
    """The joint blocks of one stage, RoPE on the image tokens; the caption stream starts
    from the level's text embedding and its output is dropped."""

    def __init__(self, width: int, cfg: HierarchicalMMDiTConfig, *, rngs: nnx.Rngs):
        self.head_dim, self.rope_theta = cfg.head_dim, cfg.rope_theta
        self.blocks = nnx.List(
            [
                JointBlock(
                    width,
                    width // cfg.head_dim,
                    width,
                    mlp_ratio=cfg.mlp_ratio,
                    dtype=cfg.dtype,
                    attention_impl=cfg.attention_impl,
                    rngs=rngs,
                )  # fmt: skip
                for _ in range(cfg.blocks_per_stage)
            ]
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
        grid = _tokens_to_grid(x)
        b, g, _, c = grid.shape
        groups = grid.reshape(b, g // 2, 2, g // 2, 2, c).transpose(0, 1, 3, 2, 4, 5)
        return self.proj(self.norm(groups.reshape(b, (g // 2) ** 2, 4 * c)))


class Expand(nnx.Module):
    """Dense(C→4·C_prev), LayerNorm, each token rearranged into a 2×2 group."""

    def __init__(self, width: int, prev_width: int, *, rngs: nnx.Rngs, dtype):
        self.proj = nnx.Linear(width, 4 * prev_width, dtype=dtype, rngs=rngs)
        self.norm = LayerNorm(4 * prev_width, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        grid = _tokens_to_grid(self.norm(self.proj(x)))
        b, g, _, c4 = grid.shape
        c = c4 // 4
        up = grid.reshape(b, g, g, 2, 2, c).transpose(0, 1, 3, 2, 4, 5)
        return up.reshape(b, (2 * g) ** 2, c)


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

    def __init__(self, cfg: HierarchicalMMDiTConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        dt, widths = cfg.dtype, cfg.widths
        base = widths[0]
        self.patch_embed = PatchEmbed(cfg.patch, cfg.channels, base, dtype=dt, rngs=rngs)
        self.time_embed = TimeEmbedding(base, dtype=dt, rngs=rngs)
        self.text_pool = TextPool(cfg.text_width, base, dtype=dt, rngs=rngs)
        self.cond_proj = nnx.List([nnx.Linear(base, w, dtype=dt, rngs=rngs) for w in widths])
        self.txt_embed = nnx.List(
            [nnx.Linear(cfg.text_width, w, dtype=dt, rngs=rngs) for w in widths]
        )
        self.encoder = nnx.List([HierarchicalStage(w, cfg, rngs=rngs) for w in widths])
        self.merges = nnx.List(
            [Merge(a, b, dtype=dt, rngs=rngs) for a, b in zip(widths, widths[1:], strict=False)]
        )
        self.expands = nnx.List(
            [Expand(widths[s + 1], widths[s], dtype=dt, rngs=rngs) for s in self._decoder_levels]
        )
        self.fuses = nnx.List([Fuse(widths[s], dtype=dt, rngs=rngs) for s in self._decoder_levels])
        self.decoder = nnx.List(
            [HierarchicalStage(widths[s], cfg, rngs=rngs) for s in self._decoder_levels]
        )
        self.head = ModulatedHead(base, base, cfg.patch**2 * cfg.channels, dtype=dt, rngs=rngs)

    @property
    def _decoder_levels(self) -> list[int]:
        return list(reversed(range(len(self.cfg.widths) - 1)))

    def __call__(self, x, t, text, text_mask=None):
        cfg = self.cfg
        b, h, w, _ = x.shape
        image = self.patch_embed(x.astype(cfg.dtype))
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
            self._decoder_levels, self.expands, self.fuses, self.decoder, strict=True
        ):
            image = fuse(expand(image), skips.pop())
            txt, c = levels[s]
            image = stage(image, txt, mask, c)
        return unpatchify(self.head(image, levels[0][1]), h, w, cfg.patch)


# --------------------------------------------------------------------------------------
# sd3_transformer
# --------------------------------------------------------------------------------------


class SD3Config(PresetConfig):
    """SD3 MMDiT on 16-channel latents. The caption table is `text_width` wide: the context
    embedder reads its first `joint_attention_dim` features of every token, the pooled
    vector is token 0's first `pooled_dim` features."""

    objective: ClassVar[str] = "flow"
    image_size: int = 32
    channels: int = 16
    patch: int = 2
    width: int = 384
    depth: int = 6
    heads: int = 6
    mlp_ratio: int = 4
    joint_attention_dim: int = 4096
    pooled_dim: int = 2048
    position_grid: int = 16  # the sin-cos table's side; the image's grid is cut from its centre
    timestep_features: int = 256
    dtype: Dtype = "bfloat16"
    attention_impl: AttentionImpl = "xla"

    presets: ClassVar = {
        "small": {},
        "cpu-smoke": {
            "image_size": 8, "width": 16, "depth": 2, "heads": 2, "joint_attention_dim": 16,
            "pooled_dim": 32, "position_grid": 4,
        },
    }  # fmt: skip

    @property
    def text_width(self) -> int:
        """Width of the caption table the Trainer builds for this model."""
        return max(self.joint_attention_dim, self.pooled_dim)

    @pydantic.model_validator(mode="after")
    def _check_shapes(self):
        if self.width % self.heads:
            raise ValueError(f"width {self.width} is not divisible by heads {self.heads}")
        grid, remainder = divmod(self.image_size, self.patch)
        if remainder or grid > self.position_grid:
            raise ValueError(
                f"image_size {self.image_size} must split into patches of {self.patch} on at "
                f"most a {self.position_grid}-wide position grid"
            )
        return self


def centre_crop_positions(table_grid: int, grid: int, features: int) -> Constant:
    """The centre grid×grid window of a table_grid² sin-cos table, flattened (SD3's
    `pos_embed_max_size`)."""
    table = sincos_2d(table_grid, table_grid, features).reshape(table_grid, table_grid, features)
    top = (table_grid - grid) // 2
    return Constant(table[top : top + grid, top : top + grid].reshape(grid * grid, features))


class TimestepMlp(nnx.Module):
    """Dense(in→d), SiLU, Dense(d→d): the SD3/Flux embedder of a timestep or pooled vector."""

    def __init__(self, features_in: int, width: int, *, rngs: nnx.Rngs, dtype):
        self.mlp = Mlp(features_in, width, activation=jax.nn.silu, dtype=dtype, rngs=rngs)
        # Mlp(in, hidden=width, out=in) would end at `in`; the embedder ends at `width`.
        self.mlp.down = nnx.Linear(width, width, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.mlp(x)


@register("sd3_transformer", SD3Config)
class SD3Transformer(nnx.Module):
    """Conditioning: sinusoid(1000·t) MLP + pooled-caption MLP; context Dense(4096→d); joint
    blocks with the image first, the last one context-pre-only; (scale, shift) head."""

    def __init__(self, cfg: SD3Config, *, rngs: nnx.Rngs):
        self.cfg = cfg
        d, dt = cfg.width, cfg.dtype
        self.patch_embed = PatchEmbed(cfg.patch, cfg.channels, d, dtype=dt, rngs=rngs)
        self.positions = centre_crop_positions(cfg.position_grid, cfg.image_size // cfg.patch, d)
        self.time_embed = TimestepMlp(cfg.timestep_features, d, dtype=dt, rngs=rngs)
        self.pooled_embed = TimestepMlp(cfg.pooled_dim, d, dtype=dt, rngs=rngs)
        self.context_embed = nnx.Linear(cfg.joint_attention_dim, d, dtype=dt, rngs=rngs)
        self.blocks = nnx.List(
            [
                JointBlock(
                    d,
                    cfg.heads,
                    d,
                    mlp_ratio=cfg.mlp_ratio,
                    activation=gelu_tanh,
                    eps=1e-6,
                    first="image",
                    text_pre_only=i == cfg.depth - 1,
                    dtype=dt,
                    attention_impl=cfg.attention_impl,
                    rngs=rngs,
                )  # fmt: skip
                for i in range(cfg.depth)
            ]
        )
        self.head = ModulatedHead(
            d, d, cfg.patch**2 * cfg.channels, eps=1e-6, scale_first=True, dtype=dt, rngs=rngs
        )

    def __call__(self, x, t, text, text_mask=None):
        cfg = self.cfg
        b, h, w, _ = x.shape
        dt = jnp.dtype(cfg.dtype)
        image = self.patch_embed(x.astype(dt)) + self.positions(dt)[None]
        timestep = sinusoidal(1000.0 * t, cfg.timestep_features, cos_first=True)
        c = self.time_embed(timestep) + self.pooled_embed(text[:, 0, : cfg.pooled_dim])
        context = self.context_embed(text[..., : cfg.joint_attention_dim])
        for block in self.blocks:
            image, context = block(image, context, c, text_mask=text_mask)
        return unpatchify(self.head(image, c), h, w, cfg.patch)
