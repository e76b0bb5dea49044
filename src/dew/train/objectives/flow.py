"""Rectified-flow matching (SD3 / Flux): straight paths from data to noise.

x0 is the data, x1 Gaussian noise, x_t = (1 − t)·x0 + t·x1 the interpolant, and the model
predicts the velocity dx_t/dt = x1 − x0 from (x_t, t). Timesteps are logit-normal(0, 1)
(the sigmoid of a standard normal, which weights the middle of the path) with shift 1
(the SD3 resolution shift t' = s·t / (1 + (s − 1)·t), the identity at s = 1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dew.train.objectives import (
    Objective,
    example_images,
    per_sample,
    register_objective,
    to_unit_range,
)

LOGIT_MEAN, LOGIT_STD, SHIFT = 0.0, 1.0, 1.0


def logit_normal_timesteps(
    key: jax.Array, batch_size: int, *, mean=LOGIT_MEAN, std=LOGIT_STD, shift=SHIFT
) -> jax.Array:
    """t [B] in (0, 1): sigmoid(N(mean, std²)), then the resolution shift."""
    t = jax.nn.sigmoid(mean + std * jax.random.normal(key, (batch_size,), jnp.float32))
    return shift * t / (1.0 + (shift - 1.0) * t)


def interpolate(x0: jax.Array, x1: jax.Array, t: jax.Array) -> jax.Array:
    """The point at time t [B] on the straight path from x0 (t = 0) to x1 (t = 1)."""
    s = per_sample(t, x0)
    return (1.0 - s) * x0 + s * x1


def velocity_target(x0: jax.Array, x1: jax.Array) -> jax.Array:
    return x1 - x0


def flow_loss(model, x0, x1, t, text, text_mask, *, dtype) -> jax.Array:
    """Mean squared error of the predicted velocity at x_t, fp32."""
    out = model(interpolate(x0, x1, t).astype(dtype), t, text, text_mask)
    return jnp.mean(jnp.square(out.astype(jnp.float32) - velocity_target(x0, x1)))


@register_objective("flow")
class FlowMatching(Objective):
    uses_condition = True

    def example_batch(self, batch_size: int):
        return example_images(self.config, batch_size)

    def loss(self, model, batch, rng, *, condition=None, ema=None):
        x0 = to_unit_range(batch["images"])
        text, text_mask = condition(batch["text_ids"])
        noise_key, time_key = jax.random.split(rng)
        x1 = jax.random.normal(noise_key, x0.shape, jnp.float32)
        t = logit_normal_timesteps(time_key, x0.shape[0])
        dtype = jnp.dtype(self.config.dtype)
        return flow_loss(model, x0, x1, t, text, text_mask, dtype=dtype), {}
