"""Joint (MMDiT) blocks: two token streams, one attention over both.

Each stream (image and caption) has its own adaLN modulation, q/k/v/o projections and MLP;
the streams meet in one attention over the concatenated sequence. `JointBlock` is the
block of every MMDiT family (dew.models.mmdit) and Flux's double-stream block
(dew.models.flux); `joint_blocks` builds a family's stack of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import jax
import jax.numpy as jnp
from flax import nnx

from dew.config import AttentionImpl, ModelConfig
from dew.models.layers.attention import Attention, apply_rope, attention, key_mask
from dew.models.layers.mlp import Mlp, gelu_exact
from dew.models.layers.modulation import AdaLNModulation, modulate
from dew.models.layers.norms import LayerNorm


class JointStream(nnx.Module):
    """One stream of a joint block, its parts built by `JointBlock`: adaLN modulation (6
    chunks; 2 when pre-only), non-affine LNs, q/k/v/o and an MLP. A pre-only stream (no
    `norm2`, no `mlp`, no output projection) only feeds keys and values to the attention
    (SD3's last context stream)."""

    def __init__(
        self,
        modulation: AdaLNModulation,
        norm1: LayerNorm,
        attn: Attention,
        norm2: LayerNorm | None,
        mlp: Mlp | None,
    ):
        self.pre_only = mlp is None
        self.modulation, self.norm1, self.attn = modulation, norm1, attn
        self.norm2, self.mlp = norm2, mlp

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
        def stream(pre_only: bool) -> JointStream:
            norm = lambda: LayerNorm(features, affine=False, eps=eps, rngs=rngs)
            return JointStream(
                AdaLNModulation(
                    cond_features, features, 2 if pre_only else 6, dtype=dtype, rngs=rngs
                ),
                norm(),
                Attention(
                    features, heads, out_projection=not pre_only, qk_norm=qk_norm,
                    dtype=dtype, attention_impl=attention_impl, rngs=rngs,
                ),
                None if pre_only else norm(),
                None if pre_only else Mlp(
                    features, mlp_ratio * features, activation=activation, dtype=dtype,
                    rngs=rngs,
                ),
            )  # fmt: skip

        self.image = stream(pre_only=False)
        self.text = stream(pre_only=text_pre_only)
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


def joint_blocks(
    count: int,
    features: int,
    heads: int,
    config: ModelConfig,
    *,
    rngs: nnx.Rngs,
    text_pre_only_last: bool = False,
    **options,
) -> nnx.List:
    """`count` JointBlocks `features` wide, conditioned on a vector as wide, with the
    config's `mlp_ratio`, `dtype` and `attention_impl`. `text_pre_only_last`: the last
    block's caption stream is pre-only (SD3). `options`: JointBlock's (activation, eps,
    qk_norm, first, rope_interleaved), where the family departs from the defaults."""
    return nnx.List(
        [
            JointBlock(
                features,
                heads,
                features,
                mlp_ratio=config.mlp_ratio,
                text_pre_only=text_pre_only_last and i == count - 1,
                dtype=config.dtype,
                attention_impl=config.attention_impl,
                rngs=rngs,
                **options,
            )  # fmt: skip
            for i in range(count)
        ]
    )
