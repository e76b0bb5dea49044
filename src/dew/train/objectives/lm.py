"""Next-token cross-entropy through the tied vocabulary head, in sequence chunks.

The head (hidden · tableᵀ, fp32) and the cross-entropy run over `head_chunks` chunks of
the sequence, one at a time (a scan). The gradient is computed inside the same pass (a
custom VJP), so only one chunk's [B, S/chunks, V] logits are ever alive and nothing is
recomputed: the FLOPs equal the unchunked head's (forward and both gradient products)
while peak memory falls as chunks rise.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from dew.train.objectives import Objective, register_objective


def _chunks(x: jax.Array, chunks: int) -> jax.Array:
    """[B, S, ...] -> [chunks, B, S / chunks, ...]."""
    b, s = x.shape[:2]
    return jnp.moveaxis(x.reshape(b, chunks, s // chunks, *x.shape[2:]), 1, 0)


def _unchunk(x: jax.Array) -> jax.Array:
    x = jnp.moveaxis(x, 0, 1)
    return x.reshape(x.shape[0], -1, *x.shape[3:])


def _chunk_loss(hidden, table, targets):
    logits = jnp.einsum("bsd,vd->bsv", hidden.astype(jnp.float32), table)
    lse = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return (lse - picked).sum(), logits, lse


def _forward(hidden, table, targets, chunks):
    def body(total, chunk):
        h, t = chunk
        loss, _, _ = _chunk_loss(h, table, t)
        return total + loss, None

    total, _ = jax.lax.scan(
        body, jnp.zeros((), jnp.float32), (_chunks(hidden, chunks), _chunks(targets, chunks))
    )
    return total / targets.size


def _forward_with_grads(hidden, table, targets, chunks):
    def body(carry, chunk):
        total, table_grad = carry
        h, t = chunk
        loss, logits, lse = _chunk_loss(h, table, t)
        logits_grad = jnp.exp(logits - lse[..., None]) - jax.nn.one_hot(t, table.shape[0])
        hidden_grad = jnp.einsum("bsv,vd->bsd", logits_grad, table)
        table_grad = table_grad + jnp.einsum("bsv,bsd->vd", logits_grad, h.astype(jnp.float32))
        return (total + loss, table_grad), hidden_grad

    init = (jnp.zeros((), jnp.float32), jnp.zeros_like(table))
    (total, table_grad), hidden_grads = jax.lax.scan(
        body, init, (_chunks(hidden, chunks), _chunks(targets, chunks))
    )
    return total / targets.size, (_unchunk(hidden_grads), table_grad)


def chunked_cross_entropy(
    hidden: jax.Array, table: jax.Array, targets: jax.Array, chunks: int = 4
) -> jax.Array:
    """Mean next-token cross-entropy of hidden [B, S, d] against tied table [V, d] (fp32)."""
    if hidden.shape[1] % chunks:
        raise ValueError(f"head_chunks {chunks} does not divide the sequence {hidden.shape[1]}")
    return _chunked_cross_entropy(hidden, table, targets, chunks)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _chunked_cross_entropy(hidden, table, targets, chunks):
    return _forward(hidden, table, targets, chunks)


def _vjp_forward(hidden, table, targets, chunks):
    value, (hidden_grad, table_grad) = _forward_with_grads(hidden, table, targets, chunks)
    # hidden's dtype travels as a zero-size array: residuals must be arrays
    return value, (hidden_grad, table_grad, targets, jnp.zeros((0,), hidden.dtype))


def _vjp_backward(chunks, residuals, g):
    hidden_grad, table_grad, targets, dtype_marker = residuals
    scale = g / targets.size
    targets_grad = np.zeros(targets.shape, jax.dtypes.float0)
    return (hidden_grad * scale).astype(dtype_marker.dtype), table_grad * scale, targets_grad


_chunked_cross_entropy.defvjp(_vjp_forward, _vjp_backward)


@register_objective("lm")
class NextTokenPrediction(Objective):
    """Rows of seq_len + 1 tokens: inputs are the first seq_len, targets the last seq_len."""

    def example_batch(self, batch_size: int):
        rng = np.random.default_rng(0)
        shape = (batch_size, self.config.seq_len + 1)
        return {"tokens": rng.integers(0, self.config.vocab_size, shape, dtype=np.int32)}

    def loss(self, model, batch, rng, *, condition=None, ema=None):
        tokens = batch["tokens"]
        hidden = model(tokens[:, :-1])
        chunks = self.config.head_chunks
        return chunked_cross_entropy(hidden, model.head_table(), tokens[:, 1:], chunks), {}
