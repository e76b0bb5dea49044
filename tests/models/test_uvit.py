"""uvit: the published row (params exact, GFLOP/step within 0.1%) and a cpu-smoke training run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from dew.models.uvit import UViT, UViTConfig
from dew.train.mesh import MeshSpec
from dew.train.trainer import Trainer

PUBLISHED_PARAMS = 24_351_024
PUBLISHED_GFLOP = 617.8
PUBLISHED_BATCH = 16


@pytest.fixture(scope="module")
def small():
    """The small preset compiled (never run) for the published batch."""
    trainer = Trainer("uvit", preset="small", compilation_cache_dir=None)
    trainer.compile(trainer.example_batch(PUBLISHED_BATCH))
    return trainer


@pytest.mark.slow
def test_small_params_match_published(small):
    assert small.param_counts == {"backbone": PUBLISHED_PARAMS, "condition": 0}


@pytest.mark.slow
def test_small_condition_in_state_adds_the_table():
    trainer = Trainer("uvit", preset="small", condition_in_state=True, compilation_cache_dir=None)
    assert trainer.param_counts == {"backbone": PUBLISHED_PARAMS, "condition": 130 * 768}


@pytest.mark.slow
def test_small_gflop_per_step_within_0_1_percent(small):
    assert small.flops / 1e9 == pytest.approx(PUBLISHED_GFLOP, rel=1e-3)


@pytest.mark.slow
def test_cpu_smoke_trains_three_steps_sharded_over_8_devices():
    trainer = Trainer("uvit", preset="cpu-smoke", mesh=MeshSpec(fsdp=8), compilation_cache_dir=None)
    batch = trainer.put_batch(trainer.example_batch(8))
    state = trainer.init()
    table = state.params["model"]["positions"][...]
    assert "fsdp" in table.sharding.spec
    assert len({shard.device for shard in table.addressable_shards}) == 8
    assert table.addressable_shards[0].data.size == table.size // 8

    losses = []
    for _ in range(3):
        old = state
        state, metrics = trainer.step(state, batch)
        losses.append(float(metrics["train/loss"]))
        assert jax.tree.leaves(old.params)[0].is_deleted()  # the step donated its input state
    assert np.all(np.isfinite(losses))
    assert int(state.step) == 3


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"heads": 5}, "width 384 is not divisible by heads 5"),
        ({"image_size": 66}, "image_size 66 is not divisible by patch 4"),
        ({"image_size": 1024}, "image_size 1024 exceeds position_table_size 512"),
    ],
)
def test_bad_config_is_a_clear_error(overrides, message):
    with pytest.raises(ValueError, match=message):
        UViTConfig.preset("small", **overrides)


def test_padding_caption_tokens_are_not_attended():
    config = UViTConfig.preset("cpu-smoke", dtype="float32")
    model = UViT(config, rngs=nnx.Rngs(0))
    model.head.kernel[...] = jax.random.normal(jax.random.key(1), model.head.kernel.shape)
    x = jax.random.normal(jax.random.key(2), (1, 16, 16, 3))
    t = jnp.ones((1,))
    text = jax.random.normal(jax.random.key(3), (1, 77, 768))
    mask = jnp.arange(77)[None] < 9  # "a flower": start token + 8 characters
    forward = nnx.jit(lambda m, text: m(x, t, text, mask))
    base = forward(model, text)
    padding_changed = forward(model, text.at[:, 20:].add(5.0))
    caption_changed = forward(model, text.at[:, 3].add(5.0))
    np.testing.assert_allclose(padding_changed, base, atol=1e-5)
    assert float(jnp.abs(caption_changed - base).max()) > 1e-3
