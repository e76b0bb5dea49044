"""Normalisations, computed in fp32 and returned in the input's dtype."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx


class LayerNorm(nnx.Module):
    """LayerNorm; `affine=False` is the adaLN-Zero form (no scale, no bias)."""

    def __init__(self, features: int, *, rngs: nnx.Rngs, eps: float = 1e-5, affine: bool = True):
        self.eps = eps
        self.scale = nnx.Param(jnp.ones((features,), jnp.float32)) if affine else None
        self.bias = nnx.Param(jnp.zeros((features,), jnp.float32)) if affine else None

    def __call__(self, x: jax.Array) -> jax.Array:
        xf = x.astype(jnp.float32)
        mean = xf.mean(-1, keepdims=True)
        var = jnp.square(xf - mean).mean(-1, keepdims=True)
        y = (xf - mean) * jax.lax.rsqrt(var + self.eps)
        if self.scale is not None:
            y = y * self.scale[...] + self.bias[...]
        return y.astype(x.dtype)


class RMSNorm(nnx.Module):
    """RMSNorm with a learned scale; `unit_offset` scales by (1 + w) (Gemma/SigLIP style)."""

    def __init__(
        self,
        features: int,
        *,
        rngs: nnx.Rngs,
        eps: float = 1e-6,
        scale: bool = True,
        unit_offset: bool = False,
    ):
        self.eps, self.unit_offset = eps, unit_offset
        init = jnp.zeros if unit_offset else jnp.ones
        self.scale = nnx.Param(init((features,), jnp.float32)) if scale else None

    def __call__(self, x: jax.Array) -> jax.Array:
        xf = x.astype(jnp.float32)
        y = xf * jax.lax.rsqrt(jnp.square(xf).mean(-1, keepdims=True) + self.eps)
        if self.scale is not None:
            y = y * (1.0 + self.scale[...] if self.unit_offset else self.scale[...])
        return y.astype(x.dtype)


class GroupNorm(nnx.Module):
    """GroupNorm over channels-last feature maps [B, ..., C]."""

    def __init__(self, features: int, groups: int, *, rngs: nnx.Rngs, eps: float = 1e-5):
        if features % groups:
            raise ValueError(f"GroupNorm: {features} channels do not split into {groups} groups")
        self.groups, self.eps = groups, eps
        self.scale = nnx.Param(jnp.ones((features,), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((features,), jnp.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        xf = x.astype(jnp.float32)
        shape = xf.shape
        g = xf.reshape(shape[0], -1, self.groups, shape[-1] // self.groups)
        mean = g.mean((1, 3), keepdims=True)
        var = jnp.square(g - mean).mean((1, 3), keepdims=True)
        y = ((g - mean) * jax.lax.rsqrt(var + self.eps)).reshape(shape)
        return (y * self.scale[...] + self.bias[...]).astype(x.dtype)
