"""video_dit: the published row (params exact, GFLOP/step within 0.1%) and cpu-smoke training."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from dew.models.video import VideoDiT, VideoDiTConfig
from dew.train.mesh import MeshSpec
from dew.train.trainer import Trainer

PUBLISHED_PARAMS = 25_155_504
PUBLISHED_GFLOP = 760.0
PUBLISHED_BATCH = 4


@pytest.fixture(scope="module")
def small():
    """The small preset compiled (never run) for the published batch."""
    trainer = Trainer("video_dit", preset="small", compilation_cache_dir=None)
    trainer.compile(trainer.example_batch(PUBLISHED_BATCH))
    return trainer


@pytest.mark.slow
def test_small_params_match_published(small):
    assert small.param_counts == {"backbone": PUBLISHED_PARAMS, "condition": 0}


@pytest.mark.slow
def test_small_gflop_per_step_within_0_1_percent(small):
    assert small.flops / 1e9 == pytest.approx(PUBLISHED_GFLOP, rel=1e-3)


def test_temporal_blocks_mix_frames_and_spatial_blocks_do_not():
    """With every frame's pixels but one frame's zeroed, only a temporal block can carry that
    frame's content into the others' outputs."""
    config = VideoDiTConfig.preset(
        "cpu-smoke", dtype="float32", depth=1, frames=3, image_size=8, width=32
    )
    model = VideoDiT(config, rngs=nnx.Rngs(0))
    # adaLN-Zero starts every block as the identity: open the gates to see the mixing.
    for blocks in (model.spatial, model.temporal):
        for block in blocks:
            block.modulation.proj.bias[...] = jnp.ones_like(block.modulation.proj.bias[...])
    model.head.kernel[...] = jax.random.normal(jax.random.key(1), model.head.kernel.shape)
    x = jnp.zeros((1, config.frames, config.image_size, config.image_size, config.channels))
    pulse = x.at[:, 0].set(1.0)
    text, mask = jnp.zeros((1, 77, 768)), jnp.ones((1, 77), bool)
    t = jnp.zeros((1,))

    @nnx.jit
    def change_in_later_frames(m):
        return jnp.abs(m(pulse, t, text, mask) - m(x, t, text, mask))[:, 1:].max()

    assert float(change_in_later_frames(model)) > 1e-3
    for block in model.temporal:  # temporal gates shut: frames no longer see each other
        block.modulation.proj.bias[...] = jnp.zeros_like(block.modulation.proj.bias[...])
    assert float(change_in_later_frames(model)) == 0.0


@pytest.mark.slow
def test_cpu_smoke_trains_three_steps_sharded_over_8_devices():
    trainer = Trainer(
        "video_dit", preset="cpu-smoke", mesh=MeshSpec(fsdp=8), compilation_cache_dir=None
    )
    batch = trainer.put_batch(trainer.example_batch(8))
    assert batch["images"].ndim == 5
    state = trainer.init()
    largest = max(jax.tree.leaves(state.params), key=lambda leaf: leaf.size)
    assert "fsdp" in largest.sharding.spec
    assert largest.addressable_shards[0].data.size == largest.size // 8

    losses = []
    for _ in range(3):
        old = state
        state, metrics = trainer.step(state, batch)
        losses.append(float(metrics["train/loss"]))
        assert jax.tree.leaves(old.params)[0].is_deleted()  # the step donated its input state
    assert np.all(np.isfinite(losses))
    assert int(state.step) == 3
