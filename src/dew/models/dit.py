"""The DiT family: simple_dit, simple_udit (long skips) and hybrid_dit (S5 token mixers).

All three share the same pieces: a p×p patch embedding with fixed 2-D sin-cos positions,
a random-Fourier time embedding MLP, a text path (Dense(768→d) per caption token, then a
masked mean) added to the time vector to give `c`, adaLN-Zero modulated blocks with RoPE
attention on the raster index, and an affine-LayerNorm head. Call:
`model(x [B,H,W,C], t [B], text [B,77,768], text_mask [B,77]) -> [B,H,W,C] fp32`.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
import pydantic
from flax import nnx
from pydantic import PositiveFloat, PositiveInt

from dew.config import ModelConfig, check_divisible
from dew.models.layers.attention import Attention, rope_frequencies
from dew.models.layers.conditioning import TextPool, TimeEmbedding
from dew.models.layers.embeddings import Constant, sincos_2d
from dew.models.layers.mlp import Mlp
from dew.models.layers.modulation import AdaLNModulation, modulate
from dew.models.layers.norms import LayerNorm
from dew.models.layers.patches import PatchEmbed, unpatchify
from dew.models.layers.ssm import BidirectionalS5
from dew.models.registry import register

SMOKE_GEOMETRY = {"image_size": 16, "width": 64, "heads": 2, "mlp_ratio": 2}
"""The DiT family's cpu-smoke size; each config's cpu-smoke preset adds its depth."""


class DiTConfig(ModelConfig):
    objective: ClassVar[str] = "edm"

    image_size: PositiveInt = 64
    channels: PositiveInt = 3
    patch: PositiveInt = 4
    width: PositiveInt = 384
    depth: PositiveInt = 6
    heads: PositiveInt = 6
    mlp_ratio: PositiveInt = 4
    rope_theta: PositiveFloat = 1e4

    presets: ClassVar = {
        "small": {},
        "cpu-smoke": {**SMOKE_GEOMETRY, "depth": 2},
    }

    @pydantic.model_validator(mode="after")
    def _check_shapes(self):
        check_divisible("width", self.width, "heads", self.heads)
        check_divisible("image_size", self.image_size, "patch", self.patch)
        return self


class SimpleUDiTConfig(DiTConfig):
    """depth counts every block: depth // 2 down, 1 middle, depth // 2 up."""

    depth: PositiveInt = 7
    presets: ClassVar = {
        "small": {},
        "cpu-smoke": {**SMOKE_GEOMETRY, "depth": 3},
    }


class HybridDiTConfig(DiTConfig):
    """Every `attention_every`-th layer mixes tokens by attention, the others by S5."""

    attention_every: PositiveInt = 4
    ssm_state: PositiveInt = 64
    presets: ClassVar = {
        "small": {},
        "cpu-smoke": {**SMOKE_GEOMETRY, "depth": 4, "ssm_state": 16},
    }


class DiTBlock(nnx.Module):
    """adaLN-Zero block: modulated LN → token mixer → gate, modulated LN → MLP → gate.

    The mixer is RoPE self-attention, or (`ssm_state` set) a bidirectional S5.
    """

    def __init__(self, config: DiTConfig, *, rngs: nnx.Rngs, ssm_state: int | None = None):
        d, dtype = config.width, config.dtype
        self.modulation = AdaLNModulation(d, d, 6, rngs=rngs, dtype=dtype)
        self.norm1 = LayerNorm(d, affine=False, rngs=rngs)
        self.norm2 = LayerNorm(d, affine=False, rngs=rngs)
        self.attends = ssm_state is None
        if self.attends:
            self.mixer = Attention(
                d, config.heads, dtype=dtype, attention_impl=config.attention_impl, rngs=rngs
            )
        else:
            self.mixer = BidirectionalS5(d, ssm_state, dtype=dtype, rngs=rngs)
        self.mlp = Mlp(d, config.mlp_ratio * d, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array, c: jax.Array, rope_angles: jax.Array) -> jax.Array:
        shift1, scale1, gate1, shift2, scale2, gate2 = self.modulation(c)
        h = modulate(self.norm1(x), shift1, scale1)
        h = self.mixer(h, rope_angles=rope_angles) if self.attends else self.mixer(h)
        x = x + gate1[:, None] * h
        h = self.mlp(modulate(self.norm2(x), shift2, scale2))
        return x + gate2[:, None] * h


class DiTStem(nnx.Module):
    """What every DiT-geometry model builds first (the DiT family, video_dit, simple_mmdit):
    the patch embedding with its fixed sin-cos positions, and `c` = time embedding + pooled
    caption."""

    def __init__(self, config: DiTConfig, *, rngs: nnx.Rngs):
        self.config = config
        d, dtype = config.width, config.dtype
        grid = config.image_size // config.patch
        self.patch_embed = PatchEmbed(config.patch, config.channels, d, dtype=dtype, rngs=rngs)
        self.positions = Constant(sincos_2d(grid, grid, d))
        self.time_embed = TimeEmbedding(d, dtype=dtype, rngs=rngs)
        self.text_pool = TextPool(config.text_width, d, dtype=dtype, rngs=rngs)

    def embed_patches(self, x: jax.Array) -> jax.Array:
        """Images [N, H, W, C] -> tokens [N, (H/p)(W/p), d] in the compute dtype."""
        dtype = jnp.dtype(self.config.dtype)
        return self.patch_embed(x.astype(dtype)) + self.positions(dtype)[None]

    def condition(self, t: jax.Array, text: jax.Array, text_mask: jax.Array) -> jax.Array:
        """c [B, d]: the time embedding plus the masked mean of the projected caption."""
        return self.time_embed(t) + self.text_pool(text, text_mask)


class DiTBase(DiTStem):
    """The stem and head (affine LN, zero-init Dense) shared by the family; subclasses build
    the blocks (`self.blocks`, run in order unless they override `run_blocks`)."""

    def __init__(self, config: DiTConfig, *, rngs: nnx.Rngs):
        super().__init__(config, rngs=rngs)
        d, dtype = config.width, config.dtype
        self.head_norm = LayerNorm(d, rngs=rngs)
        self.head = nnx.Linear(
            d, config.patch**2 * config.channels, kernel_init=nnx.initializers.zeros_init(),
            dtype=dtype, rngs=rngs,
        )  # fmt: skip

    def run_blocks(self, x: jax.Array, c: jax.Array, rope_angles: jax.Array) -> jax.Array:
        for block in self.blocks:
            x = block(x, c, rope_angles)
        return x

    def __call__(self, x, t, text, text_mask):
        config = self.config
        height, width = x.shape[1:3]
        tokens = self.embed_patches(x)
        c = self.condition(t, text, text_mask)
        num_tokens = tokens.shape[1]
        rope_angles = rope_frequencies(
            jnp.arange(num_tokens), config.width // config.heads, config.rope_theta
        )
        tokens = self.run_blocks(tokens, c, rope_angles)
        out = self.head(self.head_norm(tokens)).astype(jnp.float32)
        return unpatchify(out, height, width, config.patch)


@register("simple_dit", DiTConfig)
class SimpleDiT(DiTBase):
    def __init__(self, config: DiTConfig, *, rngs: nnx.Rngs):
        super().__init__(config, rngs=rngs)
        self.blocks = nnx.List([DiTBlock(config, rngs=rngs) for _ in range(config.depth)])


@register("simple_udit", SimpleUDiTConfig)
class SimpleUDiT(DiTBase):
    """U-shaped: each up block first merges its mirrored down block's output, Dense(2d→d)."""

    def __init__(self, config: SimpleUDiTConfig, *, rngs: nnx.Rngs):
        super().__init__(config, rngs=rngs)
        half, d = config.depth // 2, config.width
        block = lambda: DiTBlock(config, rngs=rngs)
        self.down = nnx.List([block() for _ in range(half)])
        self.middle = nnx.List([block() for _ in range(config.depth - 2 * half)])
        self.merges = nnx.List(
            [nnx.Linear(2 * d, d, dtype=config.dtype, rngs=rngs) for _ in range(half)]
        )
        self.up = nnx.List([block() for _ in range(half)])

    def run_blocks(self, x, c, rope_angles):
        skips = []
        for block in self.down:
            x = block(x, c, rope_angles)
            skips.append(x)
        for block in self.middle:
            x = block(x, c, rope_angles)
        for merge, block in zip(self.merges, self.up, strict=True):
            x = merge(jnp.concatenate([x, skips.pop()], axis=-1))
            x = block(x, c, rope_angles)
        return x


@register("hybrid_dit", HybridDiTConfig)
class HybridDiT(DiTBase):
    """simple_dit whose token mixers follow ssm, ssm, ssm, attn, … (attention every 4th)."""

    def __init__(self, config: HybridDiTConfig, *, rngs: nnx.Rngs):
        super().__init__(config, rngs=rngs)
        attends = lambda i: (i + 1) % config.attention_every == 0
        self.blocks = nnx.List(
            [
                DiTBlock(config, rngs=rngs, ssm_state=None if attends(i) else config.ssm_state)
                for i in range(config.depth)
            ]
        )
