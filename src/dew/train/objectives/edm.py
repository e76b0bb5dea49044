"""EDM (Karras et al. 2022) denoising loss with its preconditioning and weighting.

ln σ ~ N(−1.2, 1.2²) clipped to [0.002, 80], σ_data 0.5; the caption condition is
dropped (zeroed) for 12% of the samples so the model also learns the unconditional case.
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

SIGMA_MIN, SIGMA_MAX, SIGMA_DATA = 0.002, 80.0, 0.5
LOG_SIGMA_MEAN, LOG_SIGMA_STD = -1.2, 1.2
CONDITION_DROP = 0.12


@register_objective("edm")
class EDM(Objective):
    uses_condition = True

    def example_batch(self, batch_size: int):
        return example_images(self.config, batch_size)

    def loss(self, model, batch, rng, *, condition=None, ema=None):
        x = to_unit_range(batch["images"])
        text, text_mask = condition(batch["text_ids"])
        noise_key, sigma_key, drop_key = jax.random.split(rng, 3)
        batch_size = x.shape[0]

        log_sigma = LOG_SIGMA_MEAN + LOG_SIGMA_STD * jax.random.normal(sigma_key, (batch_size,))
        sigma = jnp.clip(jnp.exp(log_sigma), SIGMA_MIN, SIGMA_MAX)
        keep = jax.random.uniform(drop_key, (batch_size,)) >= CONDITION_DROP
        text = text * keep[:, None, None].astype(text.dtype)

        s = per_sample(sigma, x)
        noisy = x + s * jax.random.normal(noise_key, x.shape, jnp.float32)
        total = s**2 + SIGMA_DATA**2
        c_skip, c_out = SIGMA_DATA**2 / total, s * SIGMA_DATA / jnp.sqrt(total)
        c_in, weight = jax.lax.rsqrt(total), total / (s * SIGMA_DATA) ** 2
        c_noise = jnp.log(sigma) / 4

        dtype = jnp.dtype(self.config.dtype)
        out = model((c_in * noisy).astype(dtype), c_noise, text, text_mask)
        denoised = c_skip * noisy + c_out * out.astype(jnp.float32)
        loss = jnp.mean(weight * jnp.square(denoised - x))
        return loss, {}
