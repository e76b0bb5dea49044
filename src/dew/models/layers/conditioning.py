"""The conditioning vector's parts: timestep embeddings and the pooled caption.

`TimeEmbedding` (the DiT family's Fourier MLP), `TextPool` (a caption's masked mean after
a projection) and `TimestepMlp` (the SD3 / Flux embedder of a sinusoidal timestep or a
pooled caption vector).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from dew.models.layers.embeddings import fourier_features, fourier_frequencies
from dew.models.layers.mlp import Mlp, gelu_exact


class TimeEmbedding(nnx.Module):
    """Fixed Fourier features (scale 16) → Dense(d→4d), GELU → Dense(4d→4d), GELU → Dense(4d→d)."""

    def __init__(self, width: int, *, rngs: nnx.Rngs, dtype):
        self.frequencies = fourier_frequencies(width)
        self.mlp = nnx.Sequential(
            nnx.Linear(width, 4 * width, dtype=dtype, rngs=rngs),
            gelu_exact,
            nnx.Linear(4 * width, 4 * width, dtype=dtype, rngs=rngs),
            gelu_exact,
            nnx.Linear(4 * width, width, dtype=dtype, rngs=rngs),
        )

    def __call__(self, t: jax.Array) -> jax.Array:
        return self.mlp(fourier_features(t, self.frequencies))


class TextPool(nnx.Module):
    """Dense(text_width→d) on every caption token, then the masked mean (projecting first is
    the published FLOP count)."""

    def __init__(self, text_width: int, width: int, *, rngs: nnx.Rngs, dtype):
        self.proj = nnx.Linear(text_width, width, dtype=dtype, rngs=rngs)

    def __call__(self, text: jax.Array, mask: jax.Array) -> jax.Array:
        tokens = self.proj(text).astype(jnp.float32)
        weights = mask.astype(jnp.float32)[..., None]
        pooled = (tokens * weights).sum(1) / jnp.maximum(weights.sum(1), 1.0)
        return pooled.astype(tokens.dtype)


class TimestepMlp(nnx.Module):
    """Dense(in→d), SiLU, Dense(d→d): the SD3/Flux embedder of a timestep or pooled vector."""

    def __init__(self, features_in: int, width: int, *, rngs: nnx.Rngs, dtype):
        self.mlp = Mlp(
            features_in, width, out_features=width, activation=jax.nn.silu, dtype=dtype,
            rngs=rngs,
        )  # fmt: skip

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.mlp(x)
