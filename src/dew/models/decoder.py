"""Decoder-only transformers: causal_transformer and its mixture-of-experts case.

A layer is pre-RMSNorm attention (q, k, v, o without bias, per-head RMSNorm on q and k,
RoPE) then pre-RMSNorm SwiGLU, or, in a sparse layer, a top-k mixture of SwiGLU experts.
The token embedding is tied with the output head; the model returns the final-normed
hidden states and the LM objective applies the head (chunked, in fp32).

The pieces are public so that other decoders (multimodal_transformer, diffusion_gemma)
reuse them: `DecoderLayer` (with `context_kv` to attend over extra keys/values and
`return_kv` to hand its own out, for a cache), `CausalTransformer.embed_tokens`,
`.run_layers` and `.head_table`.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
import pydantic
from flax import nnx
from pydantic import NonNegativeInt, PositiveFloat, PositiveInt

from dew.config import ModelConfig, check_divisible
from dew.models.layers.attention import Attention, apply_rope, attention, rope_frequencies
from dew.models.layers.mlp import SwiGLU
from dew.models.layers.norms import RMSNorm
from dew.models.registry import register


class CausalTransformerConfig(ModelConfig):
    """`experts` > 0 makes every `moe_every`-th layer (1-based) a mixture of experts."""

    objective: ClassVar[str] = "lm"

    vocab_size: PositiveInt = 50304  # GPT-2's 50,257 padded to a multiple of 64
    width: PositiveInt = 768
    depth: PositiveInt = 3
    heads: PositiveInt = 12
    mlp_hidden: PositiveInt = 3072
    seq_len: PositiveInt = 512
    rope_theta: PositiveFloat = 1e4
    norm_eps: PositiveFloat = 1e-6
    experts: NonNegativeInt = 0  # 0: every layer dense
    top_k: PositiveInt = 2
    moe_every: PositiveInt = 2
    head_chunks: PositiveInt = 4  # the LM head and its cross-entropy in this many chunks

    presets: ClassVar = {
        "small": {},
        "cpu-smoke": {"vocab_size": 256, "width": 32, "depth": 2, "heads": 2, "mlp_hidden": 64,
                      "seq_len": 16},
    }  # fmt: skip
    # The benchmark's MoE case on top of either preset: 8 experts, top-2, every second layer.

    @pydantic.model_validator(mode="after")
    def _check_shapes(self):
        check_divisible("width", self.width, "heads", self.heads)
        check_divisible("seq_len", self.seq_len, "head_chunks", self.head_chunks)
        if self.experts and self.top_k > self.experts:
            raise ValueError(f"top_k {self.top_k} must be in 1..experts ({self.experts})")
        return self

    def is_sparse(self, layer: int) -> bool:
        return self.experts > 0 and (layer + 1) % self.moe_every == 0


class MixtureOfExperts(nnx.Module):
    """Top-k routed SwiGLU experts (Mixtral semantics), dropless.

    Router Dense(d→E) in fp32 without bias, softmax over all experts, top-k, the k weights
    renormalised to sum to 1. Dispatch sorts the token-slots by expert and runs each
    expert's gate, up and down projections as one grouped matmul (`lax.ragged_dot`).
    """

    def __init__(
        self, features: int, hidden: int, experts: int, top_k: int, *, rngs: nnx.Rngs, dtype
    ):
        self.top_k, self.dtype = top_k, dtype
        self.router = nnx.Linear(features, experts, use_bias=False, dtype=jnp.float32, rngs=rngs)
        init = nnx.initializers.lecun_normal(in_axis=1, out_axis=2, batch_axis=(0,))
        self.gate = nnx.Param(init(rngs.params(), (experts, features, hidden), jnp.float32))
        self.up = nnx.Param(init(rngs.params(), (experts, features, hidden), jnp.float32))
        self.down = nnx.Param(init(rngs.params(), (experts, hidden, features), jnp.float32))

    @property
    def num_experts(self) -> int:
        return self.gate.shape[0]

    def route(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """tokens [T, d] -> (weights [T, k] fp32 summing to 1, expert ids [T, k])."""
        probs = jax.nn.softmax(self.router(x.astype(jnp.float32)), axis=-1)
        weights, experts = jax.lax.top_k(probs, self.top_k)
        return weights / weights.sum(-1, keepdims=True), experts

    def __call__(self, x: jax.Array) -> jax.Array:
        shape = x.shape
        tokens = x.reshape(-1, shape[-1])
        weights, experts = self.route(tokens)
        slots = experts.reshape(-1)  # token-slot s belongs to token s // k
        order = jnp.argsort(slots)
        group_sizes = jnp.bincount(slots, length=self.num_experts).astype(jnp.int32)
        xs = tokens[order // self.top_k].astype(self.dtype)
        grouped = lambda lhs, w: jax.lax.ragged_dot(lhs, w[...].astype(self.dtype), group_sizes)
        h = jax.nn.silu(grouped(xs, self.gate)) * grouped(xs, self.up)
        ys = grouped(h, self.down)[jnp.argsort(order)]  # back to token-slot order
        ys = ys.reshape(tokens.shape[0], self.top_k, -1).astype(jnp.float32)
        out = (ys * weights[..., None]).sum(1)
        return out.astype(x.dtype).reshape(shape)


class DecoderLayer(nnx.Module):
    def __init__(self, config: CausalTransformerConfig, *, sparse: bool, rngs: nnx.Rngs):
        d, dtype = config.width, config.dtype
        self.attention_norm = RMSNorm(d, eps=config.norm_eps, rngs=rngs)
        self.attention = Attention(
            d, config.heads, qkv_bias=False, out_bias=False, qk_norm=True,
            qk_norm_eps=config.norm_eps, dtype=dtype, attention_impl=config.attention_impl,
            rngs=rngs,
        )  # fmt: skip
        self.mlp_norm = RMSNorm(d, eps=config.norm_eps, rngs=rngs)
        if sparse:
            self.mlp = MixtureOfExperts(
                d, config.mlp_hidden, config.experts, config.top_k, dtype=dtype, rngs=rngs
            )
        else:
            self.mlp = SwiGLU(d, config.mlp_hidden, dtype=dtype, rngs=rngs)

    def __call__(
        self,
        x: jax.Array,
        rope_angles: jax.Array,
        *,
        causal: bool = True,
        mask: jax.Array | None = None,
        context_kv: tuple[jax.Array, jax.Array] | None = None,
        return_kv: bool = False,
    ):
        """x [B, S, d]; `context_kv` (k, v [B, S', H, D], already rotated) are attended
        before x's own keys; `return_kv` also returns x's rotated (k, v)."""
        q, k, v = self.attention.project_qkv(self.attention_norm(x))
        q, k = apply_rope(q, rope_angles), apply_rope(k, rope_angles)
        own_kv = (k, v)
        if context_kv is not None:
            k = jnp.concatenate([context_kv[0], k], axis=1)
            v = jnp.concatenate([context_kv[1], v], axis=1)
        y = attention(q, k, v, mask=mask, causal=causal, impl=self.attention.attention_impl)
        x = x + self.attention.project_out(y)
        x = x + self.mlp(self.mlp_norm(x))
        return (x, own_kv) if return_kv else x


@register("causal_transformer", CausalTransformerConfig)
class CausalTransformer(nnx.Module):
    """tokens [B, S] -> final-normed hidden states [B, S, d] (the head is the objective's)."""

    def __init__(self, config: CausalTransformerConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.embedding = nnx.Embed(
            config.vocab_size, config.width, dtype=config.dtype, rngs=rngs,
            embedding_init=nnx.initializers.normal(0.02),
        )  # fmt: skip
        self.layers = nnx.List(
            [
                DecoderLayer(config, sparse=config.is_sparse(i), rngs=rngs)
                for i in range(config.depth)
            ]
        )
        self.final_norm = RMSNorm(config.width, eps=config.norm_eps, rngs=rngs)

    def embed_tokens(self, tokens: jax.Array) -> jax.Array:
        return self.embedding(tokens)

    def rope_angles(self, positions: jax.Array) -> jax.Array:
        config = self.config
        return rope_frequencies(positions, config.width // config.heads, config.rope_theta)

    def run_layers(self, x: jax.Array, positions: jax.Array | None = None, **kwargs) -> jax.Array:
        """Embedded tokens [B, S, d] through every layer and the final norm."""
        positions = jnp.arange(x.shape[1]) if positions is None else positions
        angles = self.rope_angles(positions)
        for layer in self.layers:
            x = layer(x, angles, **kwargs)
        return self.final_norm(x)

    def head_table(self) -> jax.Array:
        """The tied output projection [V, d] in fp32."""
        return self.embedding.embedding[...].astype(jnp.float32)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        return self.run_layers(self.embed_tokens(tokens))
