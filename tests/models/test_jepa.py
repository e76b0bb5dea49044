"""JEPA: the two published rows, the block masks, the EMA target encoder, cpu-smoke training."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dew.models import registry
from dew.models.jepa import JepaEncoderConfig, JepaMasking
from dew.train.mesh import MeshSpec
from dew.train.objectives.jepa_objective import (
    MOMENTUM_START,
    Jepa,
    MaskPlan,
    block_shapes,
    sample_masks,
)
from dew.train.trainer import Trainer

# architecture: (params, GFLOP/step, batch) as published.
PUBLISHED = {
    "jepa_encoder": (12_149_568, 297.3, 16),
    "jepa_video_encoder": (16_143_360, 758.1, 4),
}


@pytest.fixture(scope="module", params=sorted(PUBLISHED))
def small(request):
    """The small preset compiled (never run) for the published batch."""
    name = request.param
    trainer = Trainer(name, preset="small", compilation_cache_dir=None)
    trainer.compile(trainer.example_batch(PUBLISHED[name][2]))
    return name, trainer


@pytest.mark.slow
def test_small_params_match_published(small):
    name, trainer = small
    # The EMA target encoder is state, not parameters.
    assert trainer.param_counts == {"backbone": PUBLISHED[name][0], "condition": 0}
    assert trainer.abstract_state.ema is not None


@pytest.mark.slow
def test_small_gflop_per_step_within_0_1_percent(small):
    name, trainer = small
    assert trainer.flops / 1e9 == pytest.approx(PUBLISHED[name][1], rel=1e-3)


def test_predictor_is_registered_with_its_own_presets():
    arch = registry.get("jepa_predictor")
    for preset in ("small", "cpu-smoke"):
        config = arch.config_cls.preset(preset)
        model = nnx_abstract(arch.module_cls, config)
        assert model.embed.in_features == config.encoder_width


def nnx_abstract(module_cls, config):
    from flax import nnx

    return nnx.eval_shape(lambda: module_cls(config, rngs=nnx.Rngs(0)))


def test_benchmark_mask_has_exact_counts_and_disjoint_context():
    plan = MaskPlan(16, JepaEncoderConfig.preset("small").masking)
    assert sorted(plan.shapes) == [(7, 9), (9, 7)]
    context, targets = jax.jit(lambda key: sample_masks(key, plan, 16))(jax.random.key(3))
    context, targets = np.asarray(context), np.asarray(targets)
    assert context.shape == (16, 130) and targets.shape == (16, 2, 63)
    for sample_context, sample_targets in zip(context, targets, strict=True):
        assert len(set(sample_context)) == 130
        assert not set(sample_context) & set(sample_targets.reshape(-1))
        for block in sample_targets:
            rows, cols = np.divmod(block, 16)
            height, width = rows.max() - rows.min() + 1, cols.max() - cols.min() + 1
            assert (height, width) in plan.shapes  # a full rectangle: 63 distinct cells of it
            assert len(set(block)) == 63


def test_default_mask_is_four_square_targets():
    plan = MaskPlan(16, JepaMasking())
    assert plan.num_targets == 4 and plan.target_tokens == 49
    assert plan.context_tokens == 256 - 4 * 49


@pytest.mark.parametrize(
    "masking",
    [
        JepaMasking(num_targets=2, target_tokens=63, context_tokens=131),
        JepaMasking(num_targets=2, target_tokens=17 * 17),
    ],
)
def test_impossible_masks_are_clear_errors(masking):
    with pytest.raises(ValueError, match="JEPA masking"):
        MaskPlan(16, masking)


def test_block_shapes_keep_the_aspect_range():
    assert block_shapes(63, 16) == [(7, 9), (9, 7)]
    assert block_shapes(4, 4) == [(2, 2)]


def test_ema_starts_at_momentum_0_996():
    objective = Jepa(JepaEncoderConfig.preset("cpu-smoke"))
    ema = {"w": jnp.zeros(3)}
    params = {"encoder": {"w": jnp.ones(3)}}
    updated = objective.update_ema(ema, params, jnp.zeros((), jnp.int32))
    np.testing.assert_allclose(updated["w"], 1 - MOMENTUM_START, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_cpu_smoke_trains_three_steps_sharded_over_8_devices(name):
    trainer = Trainer(name, preset="cpu-smoke", mesh=MeshSpec(fsdp=8), compilation_cache_dir=None)
    batch = trainer.put_batch(trainer.example_batch(8))
    state = trainer.init()
    largest = max(jax.tree.leaves(state.params), key=lambda leaf: leaf.size)
    assert "fsdp" in largest.sharding.spec
    assert largest.addressable_shards[0].data.size == largest.size // 8
    initial_ema = jax.tree.map(np.asarray, state.ema)

    losses = []
    for _ in range(3):
        old = state
        state, metrics = trainer.step(state, batch)
        losses.append(float(metrics["train/loss"]))
        assert jax.tree.leaves(old.params)[0].is_deleted()  # the step donated its input state
    assert np.all(np.isfinite(losses))
    # The target encoder moved, slowly: towards the encoder, not onto it.
    ema, encoder = state.ema, state.params["model"]["encoder"]
    moved = jax.tree.map(lambda a, b: float(np.abs(np.asarray(a) - b).max()), ema, initial_ema)
    assert max(jax.tree.leaves(moved)) > 0
    apart = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), ema, encoder)
    assert max(jax.tree.leaves(apart)) > 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"heads": 5}, "width 384 is not divisible by heads 5"),
        ({"predictor": {"width": 190}}, "predictor width 190 is not divisible by heads 6"),
        ({"image_size": 62}, "image_size 62 is not divisible by patch 4"),
    ],
)
def test_bad_config_is_a_clear_error(overrides, message):
    with pytest.raises(ValueError, match=message):
        JepaEncoderConfig.preset("small", **overrides)


def test_predictor_alone_has_no_step():
    with pytest.raises(ValueError, match="jepa_predictor trains inside them"):
        Trainer("jepa_predictor", preset="cpu-smoke", compilation_cache_dir=None)
