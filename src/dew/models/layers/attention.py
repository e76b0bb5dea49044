"""Attention: one function for every family, and the projections around it.

`attention()` is the single place a model computes softmax(q kᵀ) v, so that the
implementation (`xla`, the published path; `cudnn` fused attention; `auto`) is one
setting. Logits and softmax are fp32 whatever the compute dtype (the published numerics).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from dew import platforms
from dew.config import ATTENTION_IMPLS, AttentionImpl, check_divisible
from dew.models.layers.norms import RMSNorm


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    mask: jax.Array | None = None,
    causal: bool = False,
    impl: AttentionImpl = "xla",
) -> jax.Array:
    """q [B, T, H, D], k and v [B, S, H, D] -> [B, T, H, D].

    `mask` broadcasts to [B, H, T, S] (True = attend). `causal` adds the lower-triangular
    mask aligned to the end: the queries are the last T of the S key positions (S - T
    cached keys come first), so query i sees keys 0 .. i + S - T. `jax.nn.dot_product_attention`
    aligns its causal mask to the start instead: the cudnn path refuses causal with T ≠ S.
    """
    if impl not in ATTENTION_IMPLS:
        raise ValueError(f"unknown attention_impl {impl!r}; valid: {', '.join(ATTENTION_IMPLS)}")
    t, s = q.shape[1], k.shape[1]
    offset_causal = causal and t != s
    if impl == "auto":
        impl = "cudnn" if _cudnn_attention_available(q, mask, offset_causal) else "xla"
    if impl == "cudnn":
        if offset_causal:
            raise ValueError(f"cudnn attention: causal with {t} queries but {s} keys")
        return jax.nn.dot_product_attention(
            q, k, v, mask=mask, is_causal=causal, implementation="cudnn"
        ).astype(q.dtype)
    scale = q.shape[-1] ** -0.5
    logits = jnp.einsum("bthd,bshd->bhts", q, k).astype(jnp.float32) * scale
    if causal:
        causal_mask = jnp.tril(jnp.ones((t, s), dtype=bool), k=s - t)
        mask = causal_mask if mask is None else jnp.logical_and(mask, causal_mask)
    if mask is not None:
        logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
    weights = jax.nn.softmax(logits, axis=-1).astype(v.dtype)
    return jnp.einsum("bhts,bshd->bthd", weights, v)


def key_mask(keep: jax.Array) -> jax.Array:
    """keep [B, S] (True = a key to attend to) -> [B, 1, 1, S]: the same keys for every head
    and query."""
    return keep[:, None, None, :]


def _cudnn_attention_available(q: jax.Array, mask: jax.Array | None, offset_causal: bool) -> bool:
    # cuDNN's fused attention needs an NVIDIA GPU (dew.platforms: its `attention`; never a
    # ROCm one, which JAX calls "gpu" too), 16-bit inputs and a head dim it supports, and
    # no mask but its own (start-aligned) causal one.
    return (
        not offset_causal
        and "cudnn" in platforms.of_devices(jax.devices()).attention
        and q.dtype in (jnp.bfloat16, jnp.float16)
        and q.shape[-1] <= 128
        and q.shape[-1] % 8 == 0
        and mask is None
    )


def rope_frequencies(positions: jax.Array, dim: int, theta: float = 1e4) -> jax.Array:
    """Angles [..., dim // 2] for integer positions [...]."""
    inv = 1.0 / theta ** (jnp.arange(0, dim, 2, dtype=jnp.float32) / dim)
    return positions.astype(jnp.float32)[..., None] * inv


def apply_rope(x: jax.Array, angles: jax.Array, *, interleaved: bool = False) -> jax.Array:
    """Rotate x [B, S, H, D] by angles [S, D/2] (or [B, S, D/2]).

    Half-split pairs (d, d + D/2) by default; `interleaved` pairs (2i, 2i + 1) as Flux does.
    """
    if angles.ndim == 2:
        angles = angles[None]
    cos = jnp.cos(angles)[:, :, None, :]
    sin = jnp.sin(angles)[:, :, None, :]
    xf = x.astype(jnp.float32)
    if interleaved:
        x1, x2 = xf[..., 0::2], xf[..., 1::2]
        out = jnp.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1).reshape(x.shape)
    else:
        x1, x2 = jnp.split(xf, 2, axis=-1)
        out = jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
    return out.astype(x.dtype)


class Attention(nnx.Module):
    """Multi-head attention with its q, k, v (and optional o) projections.

    Self-attention by default; `kv_features` makes it cross-attention from another width.
    Families that attend jointly over two streams use `project_qkv` and `attention` directly.
    """

    def __init__(
        self,
        features: int,
        num_heads: int,
        *,
        rngs: nnx.Rngs,
        kv_features: int | None = None,
        qkv_bias: bool = True,
        out_bias: bool | None = None,
        out_projection: bool = True,
        qk_norm: bool = False,
        qk_norm_eps: float = 1e-6,
        head_dim: int | None = None,
        dtype=jnp.bfloat16,
        attention_impl: AttentionImpl = "xla",
    ):
        if head_dim is None:
            check_divisible("width", features, "num_heads", num_heads)
            head_dim = features // num_heads
        self.num_heads, self.head_dim = num_heads, head_dim
        self.attention_impl = attention_impl
        inner = num_heads * head_dim
        kv_features = kv_features or features
        dense = lambda i, o, b: nnx.Linear(i, o, use_bias=b, dtype=dtype, rngs=rngs)
        self.q = dense(features, inner, qkv_bias)
        self.k = dense(kv_features, inner, qkv_bias)
        self.v = dense(kv_features, inner, qkv_bias)
        self.o = (
            dense(inner, features, qkv_bias if out_bias is None else out_bias)
            if out_projection
            else None
        )
        if qk_norm:
            self.q_norm = RMSNorm(head_dim, eps=qk_norm_eps, rngs=rngs)
            self.k_norm = RMSNorm(head_dim, eps=qk_norm_eps, rngs=rngs)
        else:
            self.q_norm = self.k_norm = None

    def heads(self, x: jax.Array) -> jax.Array:
        return x.reshape(*x.shape[:-1], self.num_heads, self.head_dim)

    def project_qkv(self, x: jax.Array, context: jax.Array | None = None):
        """-> q [B, T, H, D], k and v [B, S, H, D], qk-normed if the layer has qk-norm."""
        context = x if context is None else context
        q, k, v = self.heads(self.q(x)), self.heads(self.k(context)), self.heads(self.v(context))
        if self.q_norm is not None:
            q, k = self.q_norm(q).astype(q.dtype), self.k_norm(k).astype(k.dtype)
        return q, k, v

    def project_out(self, y: jax.Array) -> jax.Array:
        y = y.reshape(*y.shape[:-2], self.num_heads * self.head_dim)
        return y if self.o is None else self.o(y)

    def __call__(
        self,
        x: jax.Array,
        context: jax.Array | None = None,
        *,
        mask: jax.Array | None = None,
        causal: bool = False,
        rope_angles: jax.Array | None = None,
    ) -> jax.Array:
        q, k, v = self.project_qkv(x, context)
        if rope_angles is not None:
            q, k = apply_rope(q, rope_angles), apply_rope(k, rope_angles)
        y = attention(q, k, v, mask=mask, causal=causal, impl=self.attention_impl)
        return self.project_out(y)
