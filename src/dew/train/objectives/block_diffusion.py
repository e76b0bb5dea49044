"""Block diffusion for a decoder LM (diffusion_gemma): denoise canvases against a clean cache.

A row is a prompt followed by `canvases` canvases of `canvas` tokens (the response).
Per row one noise level t ~ U(1e-4, 1 − 1e-4); every response token is kept with
probability 1 − t, else replaced by an id drawn uniformly from the vocabulary (so a
replaced token may by chance equal the clean one); the prompt is never corrupted.

The causal model runs once over the clean row: its next-token loss (the LM objective's
chunked tied head) is the second term of the loss, and its keys and values are the cache
the denoiser attends to. The denoiser runs bidirectionally over the noisy response, each
canvas seeing the clean prompt, the clean canvases before it and itself. Self-conditioning:
a first denoising pass, without gradient, from zero logits; its logits condition the second
pass for each row with probability 0.5 (the other rows get zero logits again). One canvas
per row, drawn uniformly, is scored: loss = that canvas's cross-entropy against the clean
tokens + the next-token loss.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from dew.train.objectives import Objective, register_objective
from dew.train.objectives.lm import chunked_cross_entropy

T_MIN, T_MAX = 1e-4, 1 - 1e-4
SELF_CONDITION_RATE = 0.5


def sample_t(rng: jax.Array, batch_size: int) -> jax.Array:
    """One noise level per row, uniform in [T_MIN, T_MAX)."""
    return jax.random.uniform(rng, (batch_size,), minval=T_MIN, maxval=T_MAX)


def corrupt(
    rng: jax.Array, tokens: jax.Array, prompt: int, t: jax.Array, vocab: int
) -> tuple[jax.Array, jax.Array]:
    """Uniform-replacement noise: tokens [B, S], t [B] -> (noisy [B, S], replaced [B, S]).

    Positions before `prompt` are never replaced; each later one is, with probability t of
    its row, by an id uniform in [0, vocab).
    """
    replace_key, id_key = jax.random.split(rng)
    in_response = jnp.arange(tokens.shape[1])[None, :] >= prompt
    replaced = in_response & (jax.random.uniform(replace_key, tokens.shape) < t[:, None])
    random_ids = jax.random.randint(id_key, tokens.shape, 0, vocab, dtype=tokens.dtype)
    return jnp.where(replaced, random_ids, tokens), replaced


def canvas_cross_entropy(
    logits: jax.Array, targets: jax.Array, scored: jax.Array, canvas: int
) -> jax.Array:
    """Mean cross-entropy over each row's scored canvas only.

    logits [B, R, V], targets [B, R] (the clean response), scored [B] canvas indices.
    """
    logits = logits.astype(jnp.float32)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    nll = jax.nn.logsumexp(logits, axis=-1) - picked
    canvas_of = jnp.arange(targets.shape[1]) // canvas
    weight = (canvas_of[None, :] == scored[:, None]).astype(jnp.float32)
    return jnp.sum(nll * weight) / jnp.sum(weight)


@register_objective("block_diffusion")
class BlockDiffusion(Objective):
    """For a model with `encode(tokens) -> (hidden, cache)`, `denoise(noisy,
    self_condition_logits, cache) -> hidden`, `logits(hidden)` and `head_table()`, and a
    config with `vocab_size`, `prompt`, `canvas`, `canvases` and `head_chunks`."""

    def example_batch(self, batch_size: int) -> dict[str, np.ndarray]:
        """Rows of prompt + canvases × canvas + 1 tokens: the clean row and its next tokens."""
        c = self.config
        length = c.prompt + c.canvases * c.canvas + 1
        rng = np.random.default_rng(0)
        return {"tokens": rng.integers(0, c.vocab_size, (batch_size, length), dtype=np.int32)}

    def loss(self, model, batch, rng, *, condition=None, ema=None):
        c = self.config
        clean, next_tokens = batch["tokens"][:, :-1], batch["tokens"][:, 1:]
        batch_size = clean.shape[0]
        t_key, noise_key, canvas_key, self_key = jax.random.split(rng, 4)

        hidden, cache = model.encode(clean)
        lm_loss = chunked_cross_entropy(hidden, model.head_table(), next_tokens, c.head_chunks)

        t = sample_t(t_key, batch_size)
        noisy, _ = corrupt(noise_key, clean, c.prompt, t, c.vocab_size)
        noisy = noisy[:, c.prompt :]
        scored = jax.random.randint(canvas_key, (batch_size,), 0, c.canvases)

        zero = jnp.zeros((*noisy.shape, c.vocab_size), jnp.float32)
        first = jax.lax.stop_gradient(model.logits(model.denoise(noisy, zero, cache)))
        use = jax.random.uniform(self_key, (batch_size,)) < SELF_CONDITION_RATE
        self_condition = jnp.where(use[:, None, None], first, 0.0)
        logits = model.logits(model.denoise(noisy, self_condition, cache))

        canvas_loss = canvas_cross_entropy(logits, clean[:, c.prompt :], scored, c.canvas)
        metrics = {"train/canvas_loss": canvas_loss, "train/lm_loss": lm_loss}
        return canvas_loss + lm_loss, metrics
