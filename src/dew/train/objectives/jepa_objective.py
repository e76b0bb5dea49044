"""JEPA (I-JEPA, Assran et al. 2023): predict a target encoder's features of masked blocks.

Per sample, `num_targets` rectangular target blocks and a context set are drawn on the
patch grid (video: one mask for the whole clip, the same tokens in every frame). The context
encoder sees the context tokens, the predictor guesses the target encoder's features at each
target block, and the loss is the L2 distance to those features layer-normed without affine
parameters. The target encoder is an EMA copy of the context encoder kept in the train
state: momentum rises linearly from 0.996 to 1 over `MOMENTUM_STEPS` steps.

Token counts are static (the step compiles once): every target block has exactly
`target_tokens` tokens, in any h×w shape of that area with aspect ratio 0.75-1.5 that fits
the grid, and the context is exactly `context_tokens` tokens drawn at random from those no
target covers. Blocks may overlap, so at least N − num_targets · target_tokens tokens are
free and any context count up to that is always satisfiable.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from dew.models.jepa import JepaEncoderConfig, JepaMasking
from dew.train.objectives import Objective, example_images, register_objective, to_unit_range

MOMENTUM_START, MOMENTUM_END = 0.996, 1.0
MOMENTUM_STEPS = 100_000
DEFAULT_TARGET_FRACTION = 0.175  # I-JEPA's target scale range is 0.15-0.2
ASPECT_RANGE = (0.75, 1.5)


class MaskPlan:
    """Static token counts and the allowed target block shapes for one grid."""

    def __init__(self, grid: int, masking: JepaMasking):
        tokens = grid * grid
        side = max(1, round(math.sqrt(DEFAULT_TARGET_FRACTION * tokens)))
        target_tokens = masking.target_tokens or side * side
        self.shapes = block_shapes(target_tokens, grid)
        if not self.shapes:
            raise ValueError(
                f"JEPA masking: no target block of {target_tokens} tokens fits a "
                f"{grid}×{grid} patch grid; valid: 1 to {tokens}"
            )
        free = tokens - masking.num_targets * target_tokens
        context_tokens = masking.context_tokens or free
        if masking.num_targets < 1 or not 1 <= context_tokens <= free:
            raise ValueError(
                f"JEPA masking: {masking.num_targets} target blocks of {target_tokens} tokens "
                f"and {context_tokens} context tokens do not fit {tokens} patches; valid: at "
                f"least 1 target block and 1 to {max(free, 0)} context tokens"
            )
        self.grid, self.num_targets = grid, masking.num_targets
        self.target_tokens, self.context_tokens = target_tokens, context_tokens


def block_shapes(area: int, grid: int) -> list[tuple[int, int]]:
    """(h, w) with h·w == area fitting the grid, aspect in ASPECT_RANGE where any is."""
    fits = [(h, area // h) for h in range(1, grid + 1) if area % h == 0 and area // h <= grid]
    shaped = [(h, w) for h, w in fits if ASPECT_RANGE[0] <= h / w <= ASPECT_RANGE[1]]
    return shaped or fits


def sample_masks(rng: jax.Array, plan: MaskPlan, batch_size: int):
    """-> context [B, context_tokens] and targets [B, num_targets, target_tokens] indices."""
    shapes = jnp.asarray(np.array(plan.shapes, dtype=np.int32))
    offsets = jnp.arange(plan.target_tokens)

    def one_block(key):
        shape_key, row_key, col_key = jax.random.split(key, 3)
        h, w = shapes[jax.random.randint(shape_key, (), 0, len(plan.shapes))]
        top = jax.random.randint(row_key, (), 0, plan.grid - h + 1)
        left = jax.random.randint(col_key, (), 0, plan.grid - w + 1)
        return (top + offsets // w) * plan.grid + left + offsets % w

    def one_sample(key):
        block_keys, context_key = jax.random.split(key)
        targets = jax.vmap(one_block)(jax.random.split(block_keys, plan.num_targets))
        covered = jnp.zeros((plan.grid * plan.grid,), bool).at[targets.reshape(-1)].set(True)
        # Free tokens get a random score in [0, 1), covered ones −1: top-k picks free ones.
        score = jnp.where(covered, -1.0, jax.random.uniform(context_key, covered.shape))
        context = jnp.sort(jax.lax.top_k(score, plan.context_tokens)[1])
        return context.astype(jnp.int32), targets.astype(jnp.int32)

    return jax.vmap(one_sample)(jax.random.split(rng, batch_size))


def momentum(step: jax.Array) -> jax.Array:
    progress = jnp.minimum(step.astype(jnp.float32) / MOMENTUM_STEPS, 1.0)
    return MOMENTUM_START + (MOMENTUM_END - MOMENTUM_START) * progress


def layer_norm(x: jax.Array, eps: float = 1e-6) -> jax.Array:
    """Without affine parameters, in fp32: the target features the predictor regresses."""
    x = x.astype(jnp.float32)
    mean = x.mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(jnp.square(x - mean).mean(-1, keepdims=True) + eps)


@register_objective("jepa")
class Jepa(Objective):
    """For the models of dew.models.jepa: `model.encoder` and `model.predictor`."""

    uses_condition = False

    def __init__(self, config):
        if not isinstance(config, JepaEncoderConfig):
            raise ValueError(
                f"the jepa objective trains a JEPA model (jepa_encoder, jepa_video_encoder), not "
                f"a {type(config).__name__}; jepa_predictor trains inside them, with no step of "
                f"its own"
            )
        super().__init__(config)
        self.plan = MaskPlan(config.grid, config.masking)

    def example_batch(self, batch_size: int):
        return {"images": example_images(self.config, batch_size)["images"]}

    def init_ema(self, model_params):
        # A copy, not an alias: the state's params and EMA are donated separately.
        return jax.tree.map(jnp.copy, model_params["encoder"])

    def update_ema(self, ema, model_params, step):
        m = momentum(step)
        return jax.tree.map(lambda e, p: m * e + (1 - m) * p, ema, model_params["encoder"])

    def loss(self, model, batch, rng, *, condition=None, ema=None):
        images = to_unit_range(batch["images"]).astype(jnp.dtype(self.config.dtype))
        context, targets = sample_masks(rng, self.plan, images.shape[0])

        target_encoder = nnx.merge(nnx.graphdef(model.encoder), jax.lax.stop_gradient(ema))
        features = layer_norm(target_encoder(images))  # [B, T, N, D], all tokens
        wanted = jnp.take_along_axis(
            features[:, None], targets[:, :, None, :, None], axis=3
        )  # [B, K, T, Nt, D]

        predictions = model(images, context, targets)
        loss = jnp.mean(jnp.square(predictions - wanted))
        return loss, {}
