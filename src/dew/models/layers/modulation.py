"""adaLN modulation: a conditioning vector turned into shift / scale / gate chunks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx


def modulate(x: jax.Array, shift: jax.Array, scale: jax.Array) -> jax.Array:
    """x [B, S, d] with per-sample shift, scale [B, d] (or already [B, S, d])."""
    if shift.ndim == x.ndim - 1:
        shift, scale = shift[:, None], scale[:, None]
    return x * (1 + scale) + shift


class AdaLNModulation(nnx.Module):
    """SiLU(c) → Dense(c→chunks·d), split into `chunks` vectors.

    Zero-initialised by default (adaLN-Zero): every block starts as the identity.
    """

    def __init__(
        self,
        cond_features: int,
        features: int,
        chunks: int,
        *,
        rngs: nnx.Rngs,
        zero_init: bool = True,
        dtype=jnp.bfloat16,
    ):
        self.chunks = chunks
        init = nnx.initializers.zeros_init() if zero_init else nnx.initializers.lecun_normal()
        self.proj = nnx.Linear(
            cond_features, chunks * features, kernel_init=init, dtype=dtype, rngs=rngs
        )

    def __call__(self, c: jax.Array) -> list[jax.Array]:
        return jnp.split(self.proj(jax.nn.silu(c)), self.chunks, axis=-1)
