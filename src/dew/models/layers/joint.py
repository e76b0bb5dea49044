"""Joint (MMDiT) blocks: two token streams, one attention over both.

Each stream (image and caption) has its own adaLN modulation, q/k/v/o projections and MLP;
the streams meet in one attention over the concatenated sequence. `JointBlock` is the
block of every MMDiT family (dew.models.mmdit) and Flux's double-stream block
(dew.models.flux).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import jax
import jax.numpy as jnp
from flax import nnx

from dew.config import AttentionImpl
from dew.models.layers.attention import Attention, apply_rope, attention, key_mask
from dew.models.layers.mlp import Mlp, gelu_exact
from dew.models.layers.modulation import AdaLNModulation, modulate
from dew.models.layers.norms import LayerNorm


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
            mask = key_mask(jnp.concatenate(keys, axis=1))
        order = (lambda i, t: (i, t)) if self.first == "image" else (lambda i, t: (t, i))
        joint = [jnp.concatenate(order(a, b), axis=1) for a, b in ((qi, qt), (ki, kt), (vi, vt))]
        y = attention(*joint, mask=mask, impl=self.attention_impl)
        n_first = (image if self.first == "image" else text).shape[1]
        y_first, y_second = y[:, :n_first], y[:, n_first:]
        yi, yt = (y_first, y_second) if self.first == "image" else (y_second, y_first)
        image = self.image.finish(image, yi, image_chunks)
        text = None if self.text.pre_only else self.text.finish(text, yt, text_chunks)
        return image, text
