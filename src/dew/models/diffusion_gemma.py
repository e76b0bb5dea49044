"""diffusion_gemma: the causal_transformer decoder trained as a block-diffusion LM.

A row is a prompt and `canvases` canvases of `canvas` tokens. The same decoder runs two
ways (shared parameters): causally over the clean row (`encode`, which also returns every
layer's keys and values: the cache), and bidirectionally over the noisy response against
that cache (`denoise`), each canvas seeing the prompt, the canvases before it and itself.
Two things are added to the decoder: one fp32 scalar per layer multiplying the block's
output (initialised to 1), and a self-conditioning MLP that turns the previous pass's
logits (as probabilities over the tied embedding) into an input offset.
"""

from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
import pydantic
from flax import nnx
from pydantic import PositiveInt

from dew.models.decoder import CausalTransformer, CausalTransformerConfig
from dew.models.layers.mlp import SwiGLU, gelu_tanh
from dew.models.layers.norms import RMSNorm
from dew.models.registry import register


class DiffusionGemmaConfig(CausalTransformerConfig):
    """The decoder's fields, plus the row layout: prompt + canvases × canvas tokens
    (= seq_len) and the self-conditioning MLP's hidden width."""

    objective: ClassVar[str] = "block_diffusion"

    prompt: PositiveInt = 256
    canvas: PositiveInt = 128
    canvases: PositiveInt = 2
    self_condition_hidden: PositiveInt = 3072

    presets: ClassVar = {
        "small": {},
        "cpu-smoke": {
            **CausalTransformerConfig.presets["cpu-smoke"],
            "prompt": 8,
            "canvas": 4,
            "self_condition_hidden": 64,
        },
    }

    @pydantic.model_validator(mode="after")
    def _check_row(self):
        row = self.prompt + self.canvases * self.canvas
        if row != self.seq_len:
            raise ValueError(
                f"seq_len {self.seq_len} must equal prompt + canvases × canvas = {row}"
            )
        return self


class SelfConditioning(nnx.Module):
    """RMSNorm → tanh-GELU gated MLP without biases → scale-free RMSNorm."""

    def __init__(self, config: DiffusionGemmaConfig, *, rngs: nnx.Rngs):
        d, eps = config.width, config.norm_eps
        self.norm = RMSNorm(d, eps=eps, rngs=rngs)
        self.mlp = SwiGLU(
            d, config.self_condition_hidden, activation=gelu_tanh, dtype=config.dtype, rngs=rngs
        )
        self.out_norm = RMSNorm(d, eps=eps, scale=False, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out_norm(self.mlp(self.norm(x)))


def canvas_mask(prompt: int, canvas: int, canvases: int) -> jax.Array:
    """[R, S + R] bool, True = visible: a noisy token of canvas c sees the cache's clean
    prompt and canvases before c (S = prompt + R cached positions) and its own canvas's
    noisy tokens, in both directions."""
    response = canvases * canvas
    query_canvas = jnp.arange(response) // canvas
    cached = jnp.arange(prompt + response)[None, :] < prompt + query_canvas[:, None] * canvas
    own = query_canvas[:, None] == query_canvas[None, :]
    return jnp.concatenate([cached, own], axis=1)


@register("diffusion_gemma", DiffusionGemmaConfig)
class DiffusionGemma(nnx.Module):
    """The block-diffusion objective drives it: `encode(tokens)` (causal, fills the cache),
    `denoise(noisy, self_condition_logits, cache)` (bidirectional), `logits(hidden)`."""

    def __init__(self, config: DiffusionGemmaConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.decoder = CausalTransformer(config, rngs=rngs)
        self.layer_scalars = nnx.Param(jnp.ones((config.depth,), jnp.float32))
        self.self_condition = SelfConditioning(config, rngs=rngs)

    def head_table(self) -> jax.Array:
        """The tied output projection [V, d] in fp32 (the decoder's embedding)."""
        return self.decoder.head_table()

    def logits(self, hidden: jax.Array) -> jax.Array:
        """hidden [B, T, d] -> fp32 logits [B, T, V] through the tied head."""
        return jnp.einsum("btd,vd->btv", hidden.astype(jnp.float32), self.head_table())

    def _run_layers(self, x: jax.Array, angles: jax.Array, caches=None, **kwargs):
        """Every decoder layer, each output scaled by its layer scalar, then the final norm.

        With `caches` (one (k, v) per layer) the layers attend to them first; otherwise each
        layer hands its own (k, v) back: the cache a denoising pass attends to.
        """
        kvs = []
        for index, layer in enumerate(self.decoder.layers):
            if caches is None:
                x, kv = layer(x, angles, return_kv=True, **kwargs)
                kvs.append(kv)
            else:
                x = layer(x, angles, context_kv=caches[index], **kwargs)
            x = (x * self.layer_scalars[index]).astype(x.dtype)
        return self.decoder.final_norm(x), kvs

    def encode(self, tokens: jax.Array):
        """Causal pass over the clean row [B, S] -> (final hidden [B, S, d], per-layer (k, v))."""
        angles = self.decoder.rope_angles(jnp.arange(tokens.shape[1]))
        return self._run_layers(self.decoder.embed_tokens(tokens), angles, causal=True)

    def denoise(self, noisy: jax.Array, self_condition_logits: jax.Array, cache) -> jax.Array:
        """Bidirectional pass over the noisy response [B, R] against the clean row's cache.

        self_condition_logits [B, R, V]: the previous pass's logits (zeros for none); their
        probabilities over the tied embedding, through the self-conditioning MLP, are added
        to the noisy tokens' embeddings.
        """
        config = self.config
        x = self.decoder.embed_tokens(noisy)
        probs = jax.nn.softmax(self_condition_logits.astype(jnp.float32), axis=-1)
        expected = jnp.einsum(
            "btv,vd->btd", probs.astype(x.dtype), self.head_table().astype(x.dtype)
        )
        x = x + self.self_condition(expected).astype(x.dtype)
        angles = self.decoder.rope_angles(config.prompt + jnp.arange(noisy.shape[1]))
        mask = canvas_mask(config.prompt, config.canvas, config.canvases)
        hidden, _ = self._run_layers(x, angles, caches=cache, causal=False, mask=mask)
        return hidden
