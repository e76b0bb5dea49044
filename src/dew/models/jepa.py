"""I-JEPA and its factorized video form: a context encoder and a predictor.

The context encoder sees only the context tokens of an image (or a clip: the same spatial
tokens in every frame, a tubelet) and the predictor guesses the target encoder's features
at the target positions. The target encoder is the context encoder's EMA copy; it lives in
the train state, not here (see dew.train.objectives.jepa_objective), so this module holds only what
the gradient trains: encoder and predictor.

Tokens are laid out [B, T, N, d] throughout, T = 1 for images. Spatial blocks attend over
the N tokens of a frame ([B·T, N, d]); video models add temporal blocks that attend over
the T frames of one token position ([B·N, T, d]) with RoPE on the frame index.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
import pydantic
from flax import nnx
from pydantic import PositiveInt

from dew.config import Config, ModelConfig, check_divisible
from dew.models.layers.attention import Attention, rope_frequencies
from dew.models.layers.embeddings import Constant, sincos_2d
from dew.models.layers.mlp import Mlp, gelu_exact
from dew.models.layers.norms import LayerNorm
from dew.models.layers.patches import PatchEmbed
from dew.models.registry import register

LAYER_NORM_EPS = 1e-6


class JepaMasking(Config):
    """Where the context and target tokens lie on the patch grid (read by the JEPA objective).

    Token counts are fixed so that the compiled step has static shapes. Defaults are the
    objective's own: 4 target blocks of about 17.5% of the grid each (a square block, or
    any block of the same area with aspect 0.75-1.5), and as many context tokens as the
    targets are guaranteed to leave free. The benchmark presets fix their own counts.
    """

    num_targets: PositiveInt = 4
    target_tokens: PositiveInt | None = None
    context_tokens: PositiveInt | None = None


class JepaPredictorConfig(ModelConfig):
    objective: ClassVar[str] = "jepa"

    grid: PositiveInt = 16  # patch grid side
    encoder_width: PositiveInt = 384
    width: PositiveInt = 192
    depth: PositiveInt = 3  # layers; a temporal predictor's layer is spatial + temporal
    heads: PositiveInt = 6
    mlp_ratio: PositiveInt = 4
    temporal: bool = False

    presets: ClassVar[dict] = {
        "small": {},
        "cpu-smoke": {"grid": 4, "encoder_width": 32, "width": 16, "depth": 1, "heads": 2},
    }

    @pydantic.model_validator(mode="after")
    def _check_shapes(self):
        check_divisible("predictor width", self.width, "heads", self.heads)
        return self


class JepaEncoderConfig(ModelConfig):
    objective: ClassVar[str] = "jepa"

    image_size: PositiveInt = 64
    channels: PositiveInt = 3
    frames: PositiveInt | None = None  # video: a clip of this many frames
    patch: PositiveInt = 4
    width: PositiveInt = 384
    depth: PositiveInt = 6  # layers; a video encoder's layer is a spatial and a temporal block
    heads: PositiveInt = 6
    mlp_ratio: PositiveInt = 4
    # The predictor's encoder_width, grid, temporal layout, dtype and attention_impl follow
    # from this config.
    predictor: JepaPredictorConfig = JepaPredictorConfig()
    masking: JepaMasking = JepaMasking()

    presets: ClassVar[dict] = {
        # The benchmark's fixed mask: 2 target blocks of 63 tokens (7×9 or 9×7), 130 context.
        "small": {"masking": {"num_targets": 2, "target_tokens": 63, "context_tokens": 130}},
        "cpu-smoke": {
            "image_size": 16,
            "width": 32,
            "depth": 2,
            "heads": 2,
            "predictor": {"width": 16, "depth": 1, "heads": 2},
            "masking": {"num_targets": 2, "target_tokens": 4, "context_tokens": 8},
        },
    }

    @pydantic.model_validator(mode="after")
    def _check_shapes(self):
        check_divisible("width", self.width, "heads", self.heads)
        check_divisible("image_size", self.image_size, "patch", self.patch)
        return self

    @property
    def grid(self) -> int:
        return self.image_size // self.patch


class JepaVideoEncoderConfig(JepaEncoderConfig):
    frames: PositiveInt | None = 8
    depth: PositiveInt = 4
    predictor: JepaPredictorConfig = JepaPredictorConfig(depth=2)

    presets: ClassVar[dict] = {
        "small": JepaEncoderConfig.presets["small"],
        "cpu-smoke": {**JepaEncoderConfig.presets["cpu-smoke"], "frames": 4, "depth": 1},
    }


class ViTBlock(nnx.Module):
    """Pre-LN: LN → attention (biases everywhere) → residual, LN → MLP(4d, GELU) → residual."""

    def __init__(self, width: int, heads: int, mlp_ratio: int, *, dtype, attention_impl, rngs):
        self.attention_norm = LayerNorm(width, eps=LAYER_NORM_EPS, rngs=rngs)
        self.attention = Attention(
            width, heads, dtype=dtype, attention_impl=attention_impl, rngs=rngs
        )
        self.mlp_norm = LayerNorm(width, eps=LAYER_NORM_EPS, rngs=rngs)
        self.mlp = Mlp(width, mlp_ratio * width, activation=gelu_exact, dtype=dtype, rngs=rngs)

    def __call__(self, x: jax.Array, rope_angles: jax.Array | None = None) -> jax.Array:
        x = x + self.attention(self.attention_norm(x), rope_angles=rope_angles)
        return x + self.mlp(self.mlp_norm(x))


class FactorizedBlocks(nnx.Module):
    """`depth` layers over tokens [B, T, N, d]: a spatial block, then (if temporal) a
    temporal block with RoPE (theta 1e4) on the frame index."""

    def __init__(self, width, heads, mlp_ratio, depth, temporal, *, dtype, attention_impl, rngs):
        block = lambda: ViTBlock(
            width, heads, mlp_ratio, dtype=dtype, attention_impl=attention_impl, rngs=rngs
        )
        self.head_dim = width // heads
        self.spatial = nnx.List([block() for _ in range(depth)])
        self.temporal = nnx.List([block() for _ in range(depth)]) if temporal else None

    def __call__(self, x: jax.Array) -> jax.Array:
        b, t, n, d = x.shape
        angles = rope_frequencies(jnp.arange(t), self.head_dim)
        for layer, spatial in enumerate(self.spatial):
            x = spatial(x.reshape(b * t, n, d)).reshape(b, t, n, d)
            if self.temporal is not None:
                columns = x.transpose(0, 2, 1, 3).reshape(b * n, t, d)
                columns = self.temporal[layer](columns, rope_angles=angles)
                x = columns.reshape(b, n, t, d).transpose(0, 2, 1, 3)
        return x


def gather_tokens(x: jax.Array, indices: jax.Array) -> jax.Array:
    """x [B, T, N, d], indices [B, n] -> [B, T, n, d]: the same tokens in every frame."""
    return jnp.take_along_axis(x, indices[:, None, :, None], axis=2)


class JepaContextEncoder(nnx.Module):
    """Patch embedding over the whole image, fixed 2-D sin-cos positions, then (optionally)
    only the kept tokens through the blocks, and a final LN. Also the target encoder's graph."""

    def __init__(self, config: JepaEncoderConfig, *, rngs: nnx.Rngs):
        dtype = jnp.dtype(config.dtype)
        self.patch_embed = PatchEmbed(
            config.patch, config.channels, config.width, dtype=dtype, rngs=rngs
        )
        self.positions = Constant(sincos_2d(config.grid, config.grid, config.width))
        self.blocks = FactorizedBlocks(
            config.width, config.heads, config.mlp_ratio, config.depth,
            temporal=config.frames is not None, dtype=dtype,
            attention_impl=config.attention_impl, rngs=rngs,
        )  # fmt: skip
        self.norm = LayerNorm(config.width, eps=LAYER_NORM_EPS, rngs=rngs)

    def __call__(self, images: jax.Array, keep: jax.Array | None = None) -> jax.Array:
        """images [B, H, W, C] or [B, T, H, W, C]; keep [B, n] token indices -> [B, T, n, d]."""
        clip = images if images.ndim == 5 else images[:, None]
        b, t = clip.shape[:2]
        tokens = self.patch_embed(clip.reshape(b * t, *clip.shape[2:]))
        tokens = tokens + self.positions(tokens.dtype)[None]
        tokens = tokens.reshape(b, t, *tokens.shape[1:])
        if keep is not None:
            tokens = gather_tokens(tokens, keep)
        return self.norm(self.blocks(tokens))


@register("jepa_predictor", JepaPredictorConfig)
class JepaPredictor(nnx.Module):
    """Context features + mask tokens at the target positions -> predicted target features.

    Runs once per target block, the blocks folded into the batch: with K blocks, B context
    sets become B·K sequences of (context + target) tokens.
    """

    def __init__(self, config: JepaPredictorConfig, *, rngs: nnx.Rngs):
        dtype = jnp.dtype(config.dtype)
        self.embed = nnx.Linear(config.encoder_width, config.width, dtype=dtype, rngs=rngs)
        self.mask_token = nnx.Param(
            nnx.initializers.normal(0.02)(rngs.params(), (config.width,), jnp.float32)
        )
        self.positions = Constant(sincos_2d(config.grid, config.grid, config.width))
        self.blocks = FactorizedBlocks(
            config.width, config.heads, config.mlp_ratio, config.depth,
            temporal=config.temporal, dtype=dtype,
            attention_impl=config.attention_impl, rngs=rngs,
        )  # fmt: skip
        self.norm = LayerNorm(config.width, eps=LAYER_NORM_EPS, rngs=rngs)
        self.head = nnx.Linear(config.width, config.encoder_width, dtype=dtype, rngs=rngs)

    def __call__(self, context: jax.Array, context_index: jax.Array, target_index: jax.Array):
        """context [B, T, Nc, D] at context_index [B, Nc]; target_index [B, K, Nt]
        -> predictions [B, K, T, Nt, D]."""
        b, t, n_context, _ = context.shape
        k, n_target = target_index.shape[1:]
        # Folded first, embedded after: each of the B·K sequences projects its own copy
        # of the context (the published FLOP count includes these K projections).
        folded = jnp.broadcast_to(context[:, None], (b, k, *context.shape[1:]))
        x = self.embed(folded)  # [B, K, T, Nc, d]
        positions = self.positions(x.dtype)
        x = x + positions[context_index][:, None, None]
        x = x.reshape(b * k, *x.shape[2:])
        queries = self.mask_token[...].astype(x.dtype) + positions[target_index]  # [B, K, Nt, d]
        queries = jnp.broadcast_to(queries[:, :, None], (b, k, t, n_target, x.shape[-1]))
        x = jnp.concatenate([x, queries.reshape(b * k, t, n_target, -1)], axis=2)
        x = self.norm(self.blocks(x))
        predictions = self.head(x[:, :, n_context:])
        return predictions.reshape(b, k, t, n_target, -1).astype(jnp.float32)


@register("jepa_encoder", JepaEncoderConfig)
class Jepa(nnx.Module):
    """What a JEPA step trains: `encoder` (context encoder) and `predictor`."""

    def __init__(self, config: JepaEncoderConfig, *, rngs: nnx.Rngs):
        predictor_config = config.predictor.model_copy(
            update={
                "grid": config.grid,
                "encoder_width": config.width,
                "temporal": config.frames is not None,
                "dtype": config.dtype,
                "attention_impl": config.attention_impl,
            }
        )
        self.encoder = JepaContextEncoder(config, rngs=rngs)
        self.predictor = JepaPredictor(predictor_config, rngs=rngs)

    def __call__(self, images, context_index, target_index):
        """-> the predictor's guesses [B, K, T, Nt, D] of the target features."""
        return self.predictor(self.encoder(images, context_index), context_index, target_index)


@register("jepa_video_encoder", JepaVideoEncoderConfig)
class JepaVideo(Jepa):
    """The factorized video JEPA: same parts, each with temporal blocks (config.frames set)."""
