"""adaLN modulation: a conditioning vector turned into shift / scale / gate chunks, and the
modulated output head of the MMDiT and Flux families."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from dew.models.layers.norms import LayerNorm


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


class ModulatedHead(nnx.Module):
    """SiLU(c) → Dense(c→2d) (shift, scale), non-affine LN, modulate, zero-init Dense(d→out).

    `scale_first`: the modulation's chunks are (scale, shift), as SD3 and Flux order them.
    Returns fp32.
    """

    def __init__(
        self, features: int, cond_features: int, out: int, *, rngs: nnx.Rngs,
        eps: float = 1e-5, scale_first: bool = False, dtype=jnp.bfloat16,
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
