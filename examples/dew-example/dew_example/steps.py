"""A training step of its own, for `--step dew_example.steps:make_step`.

No dew model, objective or Trainer: a two-layer MLP classifier in plain jax, trained by
optax's AdamW. What dew asks of a factory is its signature and what it returns:
`make_step(batch=B) -> (step, state, batch)`, where `step` is a `jax.jit` function
`step(state, batch) -> (state, metrics)` and `state` and `batch` are pytrees of arrays. dew
compiles the step ahead of time for them, counts its FLOPs, and times it in fresh processes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

FEATURES, HIDDEN, CLASSES = 256, 1024, 10
LEARNING_RATE = 1e-3


def init_params(key: jax.Array) -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(key)
    return {
        "w1": jax.random.normal(k1, (FEATURES, HIDDEN), jnp.float32) / np.sqrt(FEATURES),
        "b1": jnp.zeros((HIDDEN,), jnp.float32),
        "w2": jax.random.normal(k2, (HIDDEN, CLASSES), jnp.float32) / np.sqrt(HIDDEN),
        "b2": jnp.zeros((CLASSES,), jnp.float32),
    }


def loss_fn(params: dict[str, jax.Array], batch: dict[str, jax.Array]) -> jax.Array:
    hidden = jax.nn.gelu(batch["x"] @ params["w1"] + params["b1"])
    logits = hidden @ params["w2"] + params["b2"]
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()


def make_step(batch: int = 8):
    """-> (step, state, batch): the jitted step (state donated), its first state, one batch."""
    optimizer = optax.adamw(LEARNING_RATE)

    def train_step(state, data):
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], data)
        updates, opt_state = optimizer.update(grads, state["opt_state"], state["params"])
        params = optax.apply_updates(state["params"], updates)
        new_state = {"params": params, "opt_state": opt_state, "step": state["step"] + 1}
        return new_state, {"loss": loss}

    params = init_params(jax.random.key(0))
    state = {
        "params": params,
        "opt_state": optimizer.init(params),
        "step": jnp.zeros((), jnp.int32),
    }
    rng = np.random.default_rng(0)
    data = {
        "x": rng.standard_normal((batch, FEATURES), np.float32),
        "y": rng.integers(0, CLASSES, (batch,), np.int32),
    }
    # Donating the state lets the step write the new one into the old one's buffers.
    return jax.jit(train_step, donate_argnums=0), state, data
